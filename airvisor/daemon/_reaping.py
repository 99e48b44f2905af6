"""GET /processes and POST /reap through airvisor.reaper (imported lazily)."""

from __future__ import annotations

from typing import Any

from airvisor.daemon._machine import FeatureMissing


def _reaper(function: str) -> Any:
    try:
        import airvisor.reaper as reaper

        return getattr(reaper, function)
    except (ImportError, AttributeError) as err:
        raise FeatureMissing(
            f"the reaper (airvisor.reaper.{function}) is not available in this build ({err})"
        ) from err


def discover_stale(live_run_ids: set[str]) -> Any:
    """What the reaper would stop, and why (a dry run): airvisor.reaper.Discovery."""
    return _reaper("discover_all")(live_run_ids=live_run_ids)


def reap_stale(live_run_ids: set[str], *, dry_run: bool) -> Any:
    """Stops stale processes (not those of `live_run_ids`): airvisor.reaper.ReapReport."""
    return _reaper("reap")(live_run_ids=live_run_ids, dry_run=dry_run)
