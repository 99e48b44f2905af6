"""Looking at a run's stacks: every member process in parallel, bounded in time; the stored
artifacts of an attempt; and the look the supervisor takes before it kills a hung attempt.

Artifacts of attempt N: `<state>/runs/<id>/attempt_N/stacks/<component>-<pid>.txt` (each
thread's frames, as a person reads them), `<component>-<pid>.json` (that process's
`ProcessStacks`) and `capture.json` (the whole `StackCapture`, which the API serves).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any, Literal, TypeVar

from airvisor._logging import get_logger
from airvisor.policy._event_levels import event_log_level
from airvisor.stacks._model import ProcessStacks, StackCapture, Target
from airvisor.stacks._pyspy import Dump, dump_process, find_py_spy, source_line
from airvisor.stacks._targets import live_targets
from airvisor.stacks._verdict import summary, verdict

log = get_logger("airvisor.stacks")

BUDGET_SECONDS = 5.0  # the whole look, all processes together: never delays a recovery more
MAX_WORKERS = 16
CAPTURE_FILE = "capture.json"
EVENT_KIND = "stacks"

Dumper = Callable[..., Dump]
T = TypeVar("T")


def capture(targets: Sequence[Target], *, run_id: str, attempt: int,
            reason: Literal["stall", "on demand"], budget: float = BUDGET_SECONDS,
            native: bool = True, dumper: Dumper = dump_process) -> StackCapture:
    """Every target's stacks, in parallel (one py-spy per process), within `budget` seconds:
    each py-spy gets what is left of the budget as its hard timeout."""
    started, wall = time.monotonic(), time.time()
    notes: list[str] = []
    if not targets:
        notes.append("no live Python process of the run to look at")
    py_spy = find_py_spy() if dumper is dump_process else "py-spy"
    if targets and py_spy is None:
        notes.append("py-spy is not installed (a dependency of airvisor: `pip install py-spy` "
                     "into airvisor's environment); no stacks")
        targets = []
    results: dict[int, Dump] = {}
    if targets:
        pool = ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(targets)),
                                  thread_name_prefix="stacks")
        try:
            futures = {pool.submit(dumper, t.pid, timeout=budget, native=native,
                                   py_spy=py_spy): t for t in targets}
            done, _ = wait_futures(futures, timeout=budget + 1.0)
            for future in done:
                try:
                    results[futures[future].pid] = future.result()
                except Exception as exc:  # an adapter bug must not stop a recovery
                    results[futures[future].pid] = Dump(note=f"internal error: {exc}")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    processes = []
    for target in targets:
        dump = results.get(target.pid) or Dump(
            note=f"no answer within {budget:.1f} s (the look is bounded)")
        stacks = ProcessStacks(target=target, threads=list(dump.threads), native=dump.native,
                               note=dump.note, errors=list(dump.errors), stopped=dump.stopped)
        processes.append(stacks.model_copy(update={"verdict": verdict(stacks, source_line)}))
    return StackCapture(run_id=run_id, attempt=attempt, reason=reason, taken_at=wall,
                        seconds=round(time.monotonic() - started, 3), processes=processes,
                        summary=summary(processes, source_line), notes=notes)


# -- the run's processes (from the store) ------------------------------------------------------
def run_roots(store: Any, run_id: str, attempt: int | None = None
              ) -> list[tuple[str, int, float | None]]:
    """The live processes the store records for the attempt: (component, pid, create_time)."""
    return [(c.name, c.pid, c.create_time) for c in store.components(run_id, attempt)
            if c.kind in ("process", "member") and c.pid and c.state == "running"]


def capture_run(store: Any, run_id: str, attempt: int, *,
                reason: Literal["stall", "on demand"], budget: float = BUDGET_SECONDS,
                dumper: Dumper = dump_process) -> StackCapture:
    return capture(live_targets(run_roots(store, run_id, attempt)), run_id=run_id,
                   attempt=attempt, reason=reason, budget=budget, dumper=dumper)


# -- artifacts ---------------------------------------------------------------------------------
def stacks_dir(attempt_dir: Path) -> Path:
    return attempt_dir / "stacks"


def attempt_dir_of(store: Any, run_id: str, attempt: int) -> Path:
    """As the supervisor names it (RunSupervisor.attempt_dir_of)."""
    return Path(store.path).parent / "runs" / run_id / f"attempt_{attempt}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "process"


def render_text(stacks: ProcessStacks) -> str:
    """One process's stacks as a person reads them (py-spy's own `dump` layout)."""
    target = stacks.target
    out = [stacks.verdict or target.label, f"pid {target.pid}: {' '.join(target.argv)}".rstrip()]
    if stacks.note:
        out.append(f"note: {stacks.note}")
    for error in stacks.errors:
        out.append(f"py-spy {error}")
    for thread in stacks.threads:
        state = "active" if thread.active else "idle"
        out.append("")
        out.append(f"Thread {thread.os_thread_id or thread.thread_id} ({state}): "
                   f"\"{thread.name or '?'}\"")
        for frame in thread.frames:
            where = frame.short if frame.native else f"{frame.short}:{frame.line}"
            out.append(f"    {frame.name} ({where})")
            if frame.code:
                out.append(f"        {frame.code}")
    return "\n".join(out) + "\n"


def write_capture(result: StackCapture, attempt_dir: Path) -> Path:
    directory = stacks_dir(attempt_dir)
    directory.mkdir(parents=True, exist_ok=True)
    for stacks in result.processes:
        stem = f"{_safe(stacks.target.component)}-{stacks.target.pid}"
        (directory / f"{stem}.txt").write_text(render_text(stacks))
        (directory / f"{stem}.json").write_text(stacks.model_dump_json(indent=1))
    (directory / CAPTURE_FILE).write_text(result.model_dump_json(indent=1))
    return directory


def read_capture(attempt_dir: Path) -> StackCapture | None:
    """An attempt's stored stacks, or None when none were taken (or the file is unreadable)."""
    try:
        return StackCapture.model_validate_json(
            (stacks_dir(attempt_dir) / CAPTURE_FILE).read_text())
    except (OSError, ValueError):
        return None


# -- before the kill of a hung attempt ---------------------------------------------------------
def event_message(result: StackCapture) -> str:
    lines = result.verdicts or result.notes or ["nothing to look at"]
    across = f"{result.summary}. Each process: " if result.summary else ""
    return "stacks before the stall kill: " + across + "; ".join(lines)


def stacks_before_kill(store: Any, run_id: str, attempt: int, attempt_dir: Path, *,
                       budget: float = BUDGET_SECONDS) -> StackCapture | None:
    """Take, store and announce (one `stacks` event) the stacks of the attempt's processes.
    Never raises: whatever goes wrong is logged and the recovery goes on."""
    try:
        result = capture_run(store, run_id, attempt, reason="stall", budget=budget)
        directory: Path | None = None
        try:
            directory = write_capture(result, attempt_dir)
        except OSError as exc:
            result = result.model_copy(update={
                "notes": [*result.notes, f"cannot store the stacks under {attempt_dir}: "
                                         f"{exc.strerror or exc}"]})
        message = event_message(result)
        store.add_event(run_id, EVENT_KIND, message, data={
            "attempt": attempt, "verdicts": result.verdicts, "notes": result.notes,
            "summary": result.summary,
            "dir": str(directory) if directory is not None else None,
            "seconds": result.seconds})
        # With the attempt too: `airvisor status` shows where each process was under the
        # attempt's row long after the event has left the recent events.
        store.merge_attempt_details(run_id, attempt, stacks=list(result.verdicts),
                                    stacks_summary=result.summary)
        log.log(event_log_level(EVENT_KIND, message), message, run=run_id, kind=EVENT_KIND)
        return result
    except Exception as exc:  # never in the way of the recovery
        log.error("stacks before the stall kill failed", run=run_id, error=str(exc),
                  exc_info=exc)
        return None


def with_stacks_first(job: Callable[[], T], store: Any, run_id: str, attempt: int,
                      attempt_dir: Path) -> Callable[[], T]:
    """`job` (the stop of a hung attempt's trees), preceded by the look at its stacks."""
    def run() -> T:
        stacks_before_kill(store, run_id, attempt, attempt_dir)
        return job()

    return run
