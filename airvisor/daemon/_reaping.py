"""GET /processes and POST /reap through airvisor.reaper."""

from __future__ import annotations

from airvisor.reaper import Discovery, ReapReport, discover_all, reap


def discover_stale(live_run_ids: set[str]) -> Discovery:
    """What the reaper would stop, and why (a dry run)."""
    return discover_all(live_run_ids=live_run_ids)


def reap_stale(live_run_ids: set[str], *, dry_run: bool) -> ReapReport:
    """Stops stale processes (not those of `live_run_ids`)."""
    return reap(live_run_ids=live_run_ids, dry_run=dry_run)
