"""The stacks tests run real supervised demo runs: the engine tests' harness."""

from __future__ import annotations

from ..engine.conftest import Harness, harness  # noqa: F401  (the fixture, shared)
