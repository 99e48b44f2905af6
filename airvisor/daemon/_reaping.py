"""GET /processes and POST /reap through airvisor.reaper."""

from __future__ import annotations

from airvisor.proc._cgroup import own_state_dir
from airvisor.reaper import (
    Discovery,
    ReapReport,
    discover_all,
    process_outcomes,
    reap,
    record_reap,
    this_reaper,
)


def discover_stale(live_run_ids: set[str]) -> Discovery:
    """What the reaper would stop, and why (a dry run)."""
    return discover_all(live_run_ids=live_run_ids)


def reap_stale(live_run_ids: set[str], *, dry_run: bool) -> ReapReport:
    """Stops stale processes (not those of `live_run_ids`); what it stopped of a run goes into
    that run's events, as every reap's does (reaper.record_reap)."""
    report = reap(live_run_ids=live_run_ids, dry_run=dry_run)
    if not dry_run:
        record_reap(process_outcomes(report.candidates, (), report.kill),
                    this_reaper("the daemon's POST /reap"), own_state_dir=own_state_dir())
    return report
