"""Which supervision events need a person: a pure function over the events table's rows.

The engine records everything a notification needs as events (kind, message, data); this module
reads them, so the engine needs no notification code. Mapping:

- `state` "run failed"                       -> failed (reason: the run's last error, which
                                                 holds the crash-loop verdict when it gave up)
- `state` "run succeeded"                    -> succeeded
- `stacks` (taken before the stall kill, airvisor.stacks) after a `failure` whose reason starts
  with "hung:" -> stalled, with the hang's reason and where each process was stuck (`stacks`:
  the verdict lines); should no `stacks` event come, the stop that follows the hang
  (`stopped_components`) -> stalled without them
- `gpu_wait` (the preflight starts waiting for GPU memory held by others) -> gpu_wait
  (holders parsed from the preflight's table); the preflight's failure after that wait,
  `failure` "preflight failed: GPU memory is still held ...", is one only when no `gpu_wait`
  of the same attempt came first
- `state` "run running" right after an attempt that followed a failure -> recovered (the
  failure's reason and the new attempt's resume step); a restart a person asked for is not a
  recovery.
- `needs_person` (the environment could not serve `health.rollout_error_limit` episodes in a
  row: airvisor.box._rollouts) -> needs_person (reason: the newest episode's error); the
  run then stops as failed, which is the `failed` notification as for any failed run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airvisor.store import EventRecord, RunRecord

GPU_HELD = "GPU memory is still held"
RESTART_REQUESTED = "restart requested"
_GPU_LINE = re.compile(r"^GPU (\d+)\b")
_HOLDER_ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+(\?|[\d.]+ GiB)\s+(.*)$")


@dataclass(frozen=True)
class Notification:
    kind: str  # one of airvisor.profile._schema.NOTIFY_EVENTS
    run_id: str
    event_id: int
    at: float
    title: str
    reason: str | None = None
    resume_step: int | None = None
    attempt: int | None = None
    holders: list[dict[str, Any]] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)  # stalled: where each process was stuck

    @property
    def key(self) -> str:
        return f"{self.run_id}:{self.event_id}:{self.kind}"


def _last_attempt_id(earlier: Sequence[EventRecord]) -> int:
    """The id of the newest `attempt` or `preflight`-starting state event (the current wait's
    attempt begins after it); 0 when none."""
    for event in reversed(earlier):
        if event.kind == "attempt" or _phase_is(event, "preflight"):
            return event.id
    return 0


def parse_holders(message: str) -> list[dict[str, Any]]:
    """The holder rows of the preflight's shortfall table (airvisor.gpu.format_memory_shortfall):
    [{"gpu", "pid", "user", "memory", "command"}]."""
    holders: list[dict[str, Any]] = []
    gpu: int | None = None
    for line in message.splitlines():
        head = _GPU_LINE.match(line)
        if head:
            gpu = int(head.group(1))
            continue
        row = _HOLDER_ROW.match(line)
        if row and gpu is not None:
            holders.append({"gpu": gpu, "pid": int(row.group(1)), "user": row.group(2),
                            "memory": row.group(3), "command": row.group(4).strip()})
    return holders


def _phase_is(event: EventRecord, phase: str) -> bool:
    """A `state` event into `phase` (its typed data; the message for events an older airvisor
    recorded without it)."""
    if event.kind != "state":
        return False
    recorded = event.data.get("phase")
    if isinstance(recorded, str):
        return recorded == phase
    return event.message == f"run {phase}"


def _failure_kind(event: EventRecord) -> str:
    """A `failure` event's kind (crash, hang, operator, ...): typed data, or from the message
    for events an older airvisor recorded without it."""
    kind = event.data.get("failure_kind")
    if isinstance(kind, str):
        return kind
    if event.message.startswith("hung:"):
        return "hang"
    return "operator" if event.message == RESTART_REQUESTED else "crash"


def _recovery(event: EventRecord, earlier: Sequence[EventRecord]
              ) -> tuple[EventRecord, EventRecord] | None:
    """(the attempt event, the failure before it) when this `run running` ends a recovery."""
    attempt: EventRecord | None = None
    for previous in reversed(earlier):
        if attempt is None:
            if previous.kind == "attempt":
                attempt = previous
            elif _phase_is(previous, "running"):
                return None  # already running since the last attempt started
            continue
        if previous.kind == "failure":
            return attempt, previous
        if previous.kind in ("attempt", "success", "submitted"):
            return None
    return None


def _hang_being_stopped(earlier: Sequence[EventRecord]) -> EventRecord | None:
    """The `hung:` failure this attempt's stop follows (None when the newest failure since
    the last attempt is not a hang, or its stacks were announced already)."""
    for previous in reversed(earlier):
        if previous.kind in ("attempt", "stopped_components", "stacks"):
            return None
        if previous.kind == "failure":
            return previous if _failure_kind(previous) == "hang" else None
    return None


def decide(event: EventRecord, earlier: Sequence[EventRecord], run: RunRecord | None
           ) -> Notification | None:
    """The notification `event` calls for, if any. `earlier`: the run's events before it
    (oldest first; the last few dozen are enough)."""
    name = run.name if run is not None else event.run_id
    step = run.step if run is not None else None

    def new(kind: str, title: str, **extra: Any) -> Notification:
        return Notification(kind, event.run_id, event.id, event.at, title, **extra)

    if _phase_is(event, "failed"):
        reason = (run.last_error if run is not None else None) or "unknown"
        gave_up = any(e.kind == "gave_up" for e in earlier[-20:])
        verb = "gave up" if gave_up else "failed"
        return new("failed", f"run {name} {verb}: {reason.splitlines()[0]}",
                            reason=reason)
    if event.kind == "needs_person":
        reason = str(event.data.get("reason") or event.message)
        return new("needs_person", f"run {name} {event.message}", reason=reason)
    if _phase_is(event, "succeeded"):
        where = f" at step {step}" if step is not None else ""
        return new("succeeded", f"run {name} succeeded{where}")
    if event.kind in ("stacks", "stopped_components"):
        # A hang is reported once the stacks before its kill are taken (or, without them,
        # once its processes are stopped): the notification says where each one was stuck.
        hang = _hang_being_stopped(earlier)
        if hang is None:
            return None
        verdicts = event.data.get("verdicts") if event.kind == "stacks" else None
        lines = [str(v) for v in verdicts] if isinstance(verdicts, list) else []
        # One line across the ranks first (which wait in which collective or GPU sync, which
        # one is elsewhere: the usual culprit), then each process's verdict.
        across = event.data.get("summary") if event.kind == "stacks" else None
        if isinstance(across, str) and across:
            lines.insert(0, across)
        return new("stalled", f"run {name} stalled: {hang.message}", reason=hang.message,
                   attempt=hang.data.get("attempt"), stacks=lines)
    if (event.kind == "gpu_wait" and GPU_HELD in event.message) or (
            event.kind == "failure" and GPU_HELD in event.message
            and not any(e.kind == "gpu_wait" for e in earlier[-50:]
                        if e.id > _last_attempt_id(earlier))):
        holders = parse_holders(event.message)
        who = ", ".join(f"pid {h['pid']} ({h['user']}, {h['memory']} on GPU {h['gpu']})"
                        for h in holders[:5]) or "holders unknown"
        return new("gpu_wait", f"run {name} is waiting for GPU memory held "
                            f"by others: {who}", reason=event.message, holders=holders,
                            attempt=event.data.get("attempt"))
    if _phase_is(event, "running"):
        found = _recovery(event, earlier)
        if found is None:
            return None
        attempt, failure = found
        if _failure_kind(failure) == "operator":
            return None
        resume = attempt.data.get("resume_step")
        number = attempt.data.get("attempt")
        start = f"step {resume}" if resume is not None else "the start (no checkpoint)"
        return new(
            "recovered", f"run {name} recovered (attempt {number}, resumed from {start}) "
            f"after: {failure.message.splitlines()[0]}", reason=failure.message,
            resume_step=resume if isinstance(resume, int) else None,
            attempt=number if isinstance(number, int) else None)
    return None
