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
from airvisor.reaper._owners import live_runs_of, resolve_owners, store_view, supervisor_alive
from airvisor.reaper._preflight import (
    PreflightError,
    PreflightReport,
    holder_notes,
    inference_memory_share,
    memory_requirements,
    prepare_machine,
    profile_gpus,
    profile_ports,
)
from airvisor.reaper._reap import (
    BusyPort,
    ReapReport,
    busy_ports,
    judge_containers,
    orphan_containers,
    reap,
)
from airvisor.reaper._table import format_age, format_candidates
from airvisor.reaper._verdict import (
    KIND_LABELS,
    PRIME_RL_SCRIPTS,
    Ownership,
    ReapContext,
    Verdict,
    classify,
    judge_all,
    known_kind,
    ownership,
    parse_program,
)

__all__ = [
    "KIND_LABELS",
    "PRIME_RL_SCRIPTS",
    "BusyPort",
    "Candidate",
    "Discovery",
    "Leftover",
    "LeftoverResult",
    "Ownership",
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
    "holder_notes",
    "inference_memory_share",
    "judge_all",
    "judge_containers",
    "known_kind",
    "live_runs_of",
    "memory_requirements",
    "orphan_containers",
    "ownership",
    "parse_program",
    "prepare_machine",
    "profile_gpus",
    "profile_ports",
    "reap",
    "remove_leftovers",
    "resolve_owners",
    "store_view",
    "supervisor_alive",
]
