"""Stale training processes: discovery (pure verdicts over process facts), reaping, and the
machine preflight that `start` runs before each attempt."""

from airvisor.proc._argv import PRIME_RL_SCRIPTS, parse_program
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
    ProcessOutcome,
    ReapReport,
    busy_ports,
    judge_containers,
    orphan_containers,
    outcomes_message,
    process_outcomes,
    reap,
)
from airvisor.reaper._slurm import JobAsker, slurm_job_phases
from airvisor.reaper._table import format_age, format_candidates
from airvisor.reaper._verdict import (
    KIND_LABELS,
    Ownership,
    ReapContext,
    Verdict,
    classify,
    judge_all,
    known_kind,
    ownership,
    slurm_job_claims,
)

__all__ = [
    "KIND_LABELS",
    "PRIME_RL_SCRIPTS",
    "BusyPort",
    "Candidate",
    "Discovery",
    "JobAsker",
    "Leftover",
    "LeftoverResult",
    "Ownership",
    "PreflightError",
    "PreflightReport",
    "ProcessOutcome",
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
    "outcomes_message",
    "ownership",
    "parse_program",
    "prepare_machine",
    "process_outcomes",
    "profile_gpus",
    "profile_ports",
    "reap",
    "remove_leftovers",
    "resolve_owners",
    "slurm_job_claims",
    "slurm_job_phases",
    "store_view",
    "supervisor_alive",
]
