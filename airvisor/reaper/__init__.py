"""Stale training processes: discovery (pure verdicts over process facts), reaping, and the
machine preflight that `start` runs before each attempt."""

from airvisor.reaper._discover import (
    Candidate,
    Discovery,
    build_candidates,
    default_context,
    discover,
    discover_all,
)
from airvisor.reaper._leftovers import Leftover, LeftoverResult, find_leftovers, remove_leftovers
from airvisor.reaper._preflight import (
    PreflightError,
    PreflightReport,
    inference_memory_share,
    memory_requirements,
    prepare_machine,
    profile_gpus,
)
from airvisor.reaper._reap import BusyPort, ReapReport, busy_ports, orphan_containers, reap
from airvisor.reaper._table import format_age, format_candidates
from airvisor.reaper._verdict import (
    KIND_LABELS,
    ReapContext,
    Verdict,
    classify,
    judge_all,
    known_kind,
    parse_program,
)

__all__ = [
    "KIND_LABELS",
    "BusyPort",
    "Candidate",
    "Discovery",
    "Leftover",
    "LeftoverResult",
    "PreflightError",
    "PreflightReport",
    "ReapContext",
    "ReapReport",
    "Verdict",
    "build_candidates",
    "busy_ports",
    "classify",
    "default_context",
    "discover",
    "discover_all",
    "find_leftovers",
    "format_age",
    "format_candidates",
    "inference_memory_share",
    "judge_all",
    "known_kind",
    "memory_requirements",
    "orphan_containers",
    "parse_program",
    "prepare_machine",
    "profile_gpus",
    "reap",
    "remove_leftovers",
]
