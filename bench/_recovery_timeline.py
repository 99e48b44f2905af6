"""What the recovery benches share (issue 22): `drive` (the main loop, ticked until a check
holds) and the timeline of one recovery, from a trainer's SIGKILL to the next attempt's first
`Step` line, split into what airvisor does and what prime-rl does.

The marks come from two sources, both wall-clock (`time.time()`, the clock the store's events
use, sub-millisecond; the kill is stamped with it too):

- the run's events in the store (`Store.events`): the death seen (`member_exited`), the failure
  recorded, the rest stopped (`stopped_components`), the preflight and the attempt recorded, the
  rest launched (`component_started` of the launcher). Each is stamped when the main loop
  records it, so a mark is when airvisor acted, not when the worker finished.
- spans timed around the calls that do the work, on whichever thread calls them: the manager's
  injectable hooks (`stop_tree`: SIGTERM to the rest's trees until they are gone;
  `prepare_machine`: the preflight job's first call) and, patched in for
  the bench only, prime-rl's config resolver (`airvisor.primerl._adapters.resolve`, which runs
  prime-rl's code as a subprocess) and the kept server's health probe
  (`airvisor.box._kept.probe_kept_server`). Where a patched name is gone (the code
  moved), that span is simply not timed and the table says "-".

The first `Step` line is the bench's own poll: `_attempt_progress` set, seen after a tick
(`drive`'s 20 ms wait at most, plus a store query).
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airvisor.runs import RunManager
from airvisor.store import Store

BOUND = 300.0

# The marks of one recovery, in the order a kept-scope recovery passes them today; a change in
# the engine's order (a stop begun before the failure is recorded) shows as the order of the
# medians, the table lists them as they came.
DEATH = "death seen (member_exited)"
PROBE_BEGAN = "kept server's probe began"
PROBE_ENDED = "kept server's probe ended"
FAILURE = "failure recorded"
STOP_BEGAN = "stop began (SIGTERM to the rest)"
STOP_ENDED = "stop ended (the rest's trees gone)"
STOPPED = "stopped recorded (stopped_components)"
PREFLIGHT_BEGAN = "preflight began (its job's first call)"
PREFLIGHT = "preflight recorded"
ATTEMPT = "attempt recorded"
LAUNCHED = "rest launched (component_started launcher)"
STEP = "first Step line seen"
# The launcher's "failed with exit code N" line completing the failure (issue 30 item 4: the
# old launcher's, after the relaunch, when the rest did not wait for it).
STATUS = "exit status read (failure_status)"

_EVENT_MARKS = {"failure": FAILURE, "stopped_components": STOPPED, "preflight": PREFLIGHT,
                "attempt": ATTEMPT, "failure_status": STATUS}


def drive(manager: RunManager, check: Callable[[], Any], what: str, bound: float = BOUND,
          tick: float = 0.02) -> Any:
    """Tick the manager's main loop until `check()` returns something true (returned)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        manager.tick(tick)
        value = check()
        if value:
            return value
    raise SystemExit(f"no {what} within {bound:g} s")


@dataclass(frozen=True)
class Span:
    name: str  # "stop", "resolve", "resolve --split", "probe", "prepare_machine"
    start: float
    end: float


@dataclass
class Recovery:
    """One recovery: each mark's seconds after the kill, and the resolver runs in it."""

    marks: dict[str, float]
    # Each resolver run: ("resolve" or "resolve --split", seconds), in the order they ran.
    resolver: list[tuple[str, float]] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.marks[STEP]

    def airvisor_share(self) -> float | None:
        """Kill -> the rest's launch: everything before prime-rl's processes start again."""
        return self.marks.get(LAUNCHED)

    def stop(self) -> float | None:
        if STOP_BEGAN in self.marks and STOP_ENDED in self.marks:
            return self.marks[STOP_ENDED] - self.marks[STOP_BEGAN]
        return None


class RecoveryClock:
    """Times the calls of a run's recoveries (see the module's docstring)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return fn(*args, **kwargs)
            finally:
                # (the resolver: the full `rl` or its halves, `--split`, told apart)
                label = f"{name} --split" if kwargs.get("split") else name
                with self._lock:
                    self.spans.append(Span(label, start, time.time()))
        return wrapper

    def install(self, manager: RunManager) -> None:
        """Wrap the manager's hooks (the supervisors it creates from now on use them)."""
        hooks = manager.hooks
        hooks.stop_tree = self.timed("stop", hooks.stop_tree)
        hooks.prepare_machine = self.timed("prepare_machine", hooks.prepare_machine)

    @contextlib.contextmanager
    def patched(self) -> Iterator[list[str]]:
        """prime-rl's resolver and the kept server's probe, timed while inside; yields the
        names that could not be patched (their spans are then missing)."""
        targets = (("airvisor.primerl._adapters", "resolve", "resolve"),
                   ("airvisor.box._kept", "probe_kept_server", "probe"))
        undo: list[tuple[Any, str, Any]] = []
        missing: list[str] = []
        for module_name, attribute, label in targets:
            module = importlib.import_module(module_name)
            original = getattr(module, attribute, None)
            if original is None:
                missing.append(f"{module_name}.{attribute}")
                continue
            setattr(module, attribute, self.timed(label, original))
            undo.append((module, attribute, original))
        try:
            yield missing
        finally:
            for module, attribute, original in undo:
                setattr(module, attribute, original)

    def between(self, start: float, end: float) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if start <= s.start <= end]


def recovery_of(store: Store, run_id: str, after_id: int, killed: float, step_seen: float,
                clock: RecoveryClock, victim: str = "trainer") -> Recovery:
    """The timeline of the recovery from the kill at `killed` (wall clock) to the step line
    seen at `step_seen`: the events recorded after event id `after_id` and the spans begun in
    between (each mark its first occurrence)."""
    marks: dict[str, float] = {STEP: step_seen - killed}
    for event in store.events(run_id, after_id=after_id, limit=10000):
        if event.at > step_seen:
            break
        name = _EVENT_MARKS.get(event.kind)
        if event.kind == "member_exited" and event.component == victim:
            name = DEATH
        elif event.kind == "component_started" and event.component == "launcher":
            name = LAUNCHED
        if name is not None and name not in marks:
            marks[name] = event.at - killed
    resolver: list[tuple[str, float]] = []
    for span in clock.between(killed, step_seen):
        if span.name.startswith("resolve"):
            resolver.append((span.name, span.end - span.start))
            continue
        begun, ended = {"stop": (STOP_BEGAN, STOP_ENDED), "probe": (PROBE_BEGAN, PROBE_ENDED),
                        "prepare_machine": (PREFLIGHT_BEGAN, None)}.get(span.name, (None, None))
        if begun is not None and begun not in marks:
            marks[begun] = span.start - killed
            if ended is not None:
                marks[ended] = span.end - killed
    return Recovery(marks, resolver)


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):6.3f} {max(values):6.3f}"


def _interval(recoveries: list[Recovery], start: str | None, end: str) -> list[float]:
    return [r.marks[end] - (r.marks[start] if start is not None else 0.0)
            for r in recoveries if end in r.marks and (start is None or start in r.marks)]


# The intervals (docs/benchmarks.md), event to event: (label, from, to, whose).
INTERVALS = (
    ("kill -> failure recorded", None, FAILURE, "airvisor (its death watch, the decision)"),
    ("failure -> rest stopped", FAILURE, STOPPED,
     "prime-rl's rl exiting on SIGTERM, airvisor's wait for it"),
    ("stopped -> preflight recorded", STOPPED, PREFLIGHT,
     "prime-rl's resolver (subprocesses), airvisor's checkpoint choice and files"),
    ("preflight -> attempt recorded", PREFLIGHT, ATTEMPT, "airvisor"),
    ("attempt -> rest launched", ATTEMPT, LAUNCHED, "airvisor (the spawn)"),
    ("launched -> first Step line", LAUNCHED, STEP,
     "prime-rl's rl, torchrun, trainer and orchestrator start, first step (not airvisor's)"),
)


def report(title: str, recoveries: list[Recovery]) -> str:
    """The tables the bench prints: each mark after the kill, the issue's intervals, and
    airvisor's share split by whose code runs in it (seconds: median, max)."""
    n = len(recoveries)
    lines = [f"{title}: recovery timeline, seconds after the trainer's SIGKILL "
             f"(median, max; n={n})"]
    names = sorted({m for r in recoveries for m in r.marks},
                   key=lambda m: statistics.median(_interval(recoveries, None, m)))
    for name in names:
        values = _interval(recoveries, None, name)
        note = f" (n={len(values)})" if len(values) != n else ""
        lines.append(f"  {name:44} {_stats(values)}{note}")
    lines.append(f"{title}: the intervals (median, max)")
    for label, start, end, whose in INTERVALS:
        lines.append(f"  {label:32} {_stats(_interval(recoveries, start, end))}  {whose}")
    shares = [r for r in recoveries if r.airvisor_share() is not None]
    total = [r.airvisor_share() or 0.0 for r in shares]
    stop = [r.stop() or 0.0 for r in shares]
    resolver = [sum(seconds for _, seconds in r.resolver) for r in shares]
    runs = sorted({len(r.resolver) for r in shares})
    own = [t - s - q for t, s, q in zip(total, stop, resolver, strict=True)]
    lines += [
        f"{title}: airvisor's share, kill -> the rest launched (median, max)",
        f"  {'total':44} {_stats(total)}",
        f"  {'  the stop (SIGTERM until the rest is gone)':44} {_stats(stop)}",
        f"  {'  prime-rl resolver, ' + '/'.join(map(str, runs)) + ' run(s) in all':44} "
        f"{_stats(resolver)}",
    ]
    for kind in sorted({name for r in shares for name, _ in r.resolver}):
        each = [seconds for r in shares for name, seconds in r.resolver if name == kind]
        lines.append(f"  {'    each ' + kind + f' (n={len(each)})':44} {_stats(each)}")
    lines += [
        f"  {'  the rest: airvisor own code and hand-offs':44} {_stats(own)}",
        f"  {'(then) launched -> first Step line':44} "
        f"{_stats(_interval(recoveries, LAUNCHED, STEP))}",
    ]
    return "\n".join(lines)
