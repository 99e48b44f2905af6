"""Suite-wide rules.

In CI (`CI=true`) a skipped test is a failure: CI installs every environment the tests need
(scripts/setup.d), so a skip there means a set-up step silently did not work, and a skipped test
proves nothing. Outside CI a skip stays a skip (a developer without Docker can still run the rest).
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

STRICT = os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CI=true), which counts as a failure: {reason}"
