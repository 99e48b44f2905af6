"""Which log file is a run's component's: one answer for `airvisor logs` (with and without a
daemon: the API's log endpoint asks the same) and the run page's log panes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from airvisor._logging import get_logger
from airvisor.primerl import layout_for
from airvisor.store import RunRecord, Store

log = get_logger("airvisor.view")

# The components whose logs prime-rl's launcher writes itself (found through the layout).
LAYOUT_LOGS: tuple[Literal["inference", "trainer", "orchestrator"], ...] = (
    "inference", "trainer", "orchestrator")


class LogNotFound(LookupError):
    """No such component in that attempt, no log recorded for it, or one outside the run's
    directories; str() says which, and what there is."""


def layout_sources(profile: dict[str, Any]) -> tuple[Path | None, dict[str, Path]] | None:
    """Where the run's prime-rl version writes metrics.jsonl and each component's log
    (airvisor.primerl's layout of its resolved facts), or None when the stored profile has no
    resolved facts (component mode: the store's log paths are used)."""
    prime_rl = profile.get("prime_rl")
    resolved = profile.get("resolved")
    version = prime_rl.get("version") if isinstance(prime_rl, dict) else None
    if not isinstance(resolved, dict) or not isinstance(version, str):
        return None
    try:
        layout = layout_for(version, resolved)
        logs = {name: layout.log_file(name) for name in LAYOUT_LOGS}
        return layout.metrics_file(), {k: v for k, v in logs.items() if v is not None}
    except Exception as err:  # facts of another airvisor version: fall back to the store's
        log.debug("no layout for the run's logs", error=repr(err))
        return None


def log_files(store: Store, run: RunRecord, attempt: int | None = None) -> dict[str, Path]:
    """Every log of an attempt (default: the current one) by component: those the store
    recorded (the processes airvisor started, prime-rl's launcher's members it found) and,
    for the current attempt under the launcher, each component's where the run's prime-rl
    version writes it. Paths come from the engine or the run's own profile only."""
    found = {c.name: Path(c.log_path) for c in store.components(run.id, attempt)
             if c.log_path}
    if attempt is None or attempt == run.attempt:
        sources = layout_sources(run.profile)
        if sources is not None:
            for name, path in sources[1].items():
                found.setdefault(name, path)
    job_id = slurm_job_of(store, run, attempt)
    if job_id is not None:
        # Slurm mode: the job's own output (prime-rl's template: #SBATCH --output=
        # <output_dir>/job_%j.log), with the node check's and the launcher's lines.
        found.setdefault("job", Path(run.run_dir) / f"job_{job_id}.log")
    return found


def slurm_job_of(store: Store, run: RunRecord, attempt: int | None) -> str | None:
    """The Slurm job of an attempt of a Slurm run (None for a one-box run)."""
    if attempt is None or attempt == run.attempt:
        job = run.details.get("slurm_job_id")
        return str(job) if job else None
    for row in store.attempts(run.id):
        if row["number"] == attempt:
            job = row["details"].get("job_id")
            return str(job) if job else None
    return None


def find_log(store: Store, run: RunRecord, component: str, attempt: int | None = None
             ) -> Path:
    """The log of `component` in `attempt` (default: the current one); LogNotFound else.

    Never a file outside the run's own directories: prime-rl's run directory, and the one the
    engine keeps for the run's attempts in the state directory (<state dir>/runs/<run id>)."""
    files = log_files(store, run, attempt)
    which = run.attempt if attempt is None else attempt
    if component not in files:
        known = ", ".join(sorted(files)) or "none recorded yet"
        raise LogNotFound(f"run {run.id} has no log of {component!r} in attempt {which} "
                          f"(known: {known})")
    path = files[component]
    allowed = (Path(run.run_dir), store.path.parent / "runs" / run.id)
    resolved = path.resolve()
    if not any(resolved.is_relative_to(where.resolve()) for where in allowed):
        raise LogNotFound(f"the log of {component!r} lies outside the run's directories")
    return path
