"""The one renderer of a run for the terminal (rich): `airvisor status`, the event lines and the
live progress line of a foreground `start` or `start --follow`.

Every function takes a view model (airvisor.view._model) and returns rich renderables built
from `Text` (never markup: a run's messages are printed as they are, brackets included).
"""

from __future__ import annotations

import io
import time
from collections import Counter

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from airvisor.primerl import strip_ansi
from airvisor.reaper import format_age
from airvisor.store import LIVE_STATES
from airvisor.view._model import AttemptView, EventView, RunSummaryView, RunView

STATE_STYLES = {
    "running": "green", "succeeded": "bold green", "recovering": "yellow",
    "stopping": "yellow", "failed": "bold red", "stopped": "magenta",
}
EVENT_DETAIL_LINES = 5  # a failure's last log lines shown under its event
PROCESS_KINDS = ("process", "member")  # airvisor's own processes; those prime-rl's `rl` started
DEMO_NOTE = "demo: the real supervisor over simulated components"


def clock(ts: float | None) -> str:
    """A wall-clock time as the local HH:MM:SS ("-" for none)."""
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "-"


def ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{format_age(max(0.0, seconds))} ago"


def step_text(run: RunSummaryView) -> str:
    """The step as prime-rl prints it, and with max_steps the steps done of it (v0.4 counts
    from 0: its last step of 200 is `Step 199`, 200/200 done)."""
    step = "-" if run.step is None else str(run.step)
    if not run.max_steps:
        return step
    if run.steps_done is None or str(run.steps_done) == step:
        return f"{step}/{run.max_steps}"  # main counts from 1: the step is the count
    return f"{step} ({run.steps_done}/{run.max_steps} done)"


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def _strip_ansi(line: str) -> str:
    return strip_ansi(line)


# -- events ----------------------------------------------------------------------------------
def event_line(event: EventView) -> Text:
    """`HH:MM:SS [component] message`, the form every view prints an event in."""
    text = Text()
    text.append(f"{clock(event.at)} ", style="dim")
    if event.component:
        text.append(f"[{event.component}] ", style="cyan")
    text.append(event.message)
    return text


def event_detail(event: EventView) -> list[Text]:
    """The last log lines a failure event carries, to print under it."""
    lines = event.data.get("last_lines")
    if not isinstance(lines, list):
        return []
    return [Text(f"           | {_strip_ansi(str(line))}", style="dim")
            for line in lines[-EVENT_DETAIL_LINES:]]


# -- the live progress line ----------------------------------------------------------------------
def progress_line(run: RunView) -> Text:
    """`[state] attempt N step S/M | inference=running trainer=running ...`"""
    text = Text("[")
    text.append_text(_state(run.state))
    text.append(f"] attempt {run.attempt} step {step_text(run)}")
    states = [f"{c.name}={c.state}" for c in run.components if c.kind in PROCESS_KINDS]
    if states:
        text.append(" | " + " ".join(states))
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


# -- status ------------------------------------------------------------------------------------
def _restarts(run: RunView) -> str:
    if not run.restart_history:
        return str(run.restarts)
    kinds = Counter(r.kind for r in run.restart_history)
    counted = sum(r.counted for r in run.restart_history)
    spread = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return f"{run.restarts} ({spread}; {counted} toward the crash-loop limit)"


def _supervisor(run: RunView) -> str | None:
    if run.supervisor_kind == "daemon":
        where = f" at {run.supervisor_address}" if run.supervisor_address else ""
        pid = f" (pid {run.supervisor_pid})" if run.supervisor_pid else ""
        return f"daemon{where}{pid}"
    if run.supervisor_kind == "foreground":
        return "foreground `airvisor start`" + (
            f" (pid {run.supervisor_pid})" if run.supervisor_pid else "")
    if run.supervisor_pid:
        return f"pid {run.supervisor_pid}"
    return None


def supervisor_gone(run: RunView) -> bool:
    """The run's state is live but the supervisor recorded for it is not running any more."""
    return run.supervisor_alive is False and not run.live


GONE_HINT = ("nobody supervises it: a daemon adopts it when it starts (`airvisor daemon`); "
             "`airvisor stop {id}` stops what is left of it")


def _header(run: RunView, now: float) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    title = Text(run.id)
    title.append(f"  (profile {run.profile_name})", style="dim")
    if run.demo:
        title.append(f"  {DEMO_NOTE}", style="dim")
    grid.add_row("run", title)
    state = _state(run.state)
    if run.phase and run.phase != run.state:
        state.append(f"  (phase {run.phase})", style="dim")
    if supervisor_gone(run):
        state.append("  not live: its supervisor is gone", style="bold red")
    grid.add_row("state", state)
    grid.add_row("attempt", f"{run.attempt}   restarts {_restarts(run)}")
    if run.last_progress_at is None:
        progress = "-"
    elif run.live:
        progress = ago(now - run.last_progress_at)
    else:
        progress = f"at {clock(run.last_progress_at)}"
    grid.add_row("step", f"{step_text(run)}   last progress {progress}")
    grid.add_row("resumed", "-" if run.resume_step is None else f"from step {run.resume_step}")
    if run.gpus:
        grid.add_row("gpus", _cell(run.gpus))
    grid.add_row("output", run.run_dir)
    supervisor = _supervisor(run)
    if supervisor_gone(run):
        gone = Text(f"{supervisor or 'its supervisor'}: gone (not running). ", style="red")
        gone.append(GONE_HINT.format(id=run.id))
        grid.add_row("supervisor", gone)
    elif supervisor:
        grid.add_row("supervisor", supervisor)
    if run.containment:
        grid.add_row("contained", run.containment)
    tracker = run.details.get("tracker")
    if isinstance(tracker, dict) and tracker:
        grid.add_row("tracker", ", ".join(f"{k} {v}" for k, v in tracker.items()))
    if run.slurm is not None:
        slurm = f"job {_cell(run.slurm.job_id)}"
        if run.slurm.nodes:
            slurm += f" on {_cell(run.slurm.nodes)}"
        if run.slurm.state:
            slurm += f" ({run.slurm.state})"
        grid.add_row("slurm", slurm)
    if run.last_error:
        grid.add_row("last error", Text(run.last_error, style="red"))
    return grid


def _components(run: RunView) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name, justify in (("COMPONENT", "left"), ("STATE", "left"), ("PID", "right"),
                          ("GPUS", "left"), ("EXIT", "right"), ("RESTARTS", "right"),
                          ("HEALTH", "left"), ("CONTAINER", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in run.components:
        table.add_row(c.name, _state(c.state), _cell(c.pid), _cell(c.gpus), _cell(c.exit_code),
                      str(c.restarts), _cell(c.health), _cell((c.container_id or "")[:12]))
    return table


def scope_cell(attempt: AttemptView) -> str:
    """How the recovery that launched an attempt was scoped (issue 22): `kept inference`
    (only the rest relaunched against the kept server) or `full`, with the policy's reason;
    "-" for a first attempt."""
    if attempt.scope is None:
        return "-"
    what = "kept inference" if attempt.scope == "keep_inference" else "full"
    reason = attempt.scope_reason
    return f"{what} ({reason})" if reason and reason != "kept" else what


def _attempts(run: RunView) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in ("ATTEMPT", "STARTED", "CAUSE", "SCOPE", "RESUMED FROM", "OUTCOME", "REASON"):
        table.add_column(name, overflow="fold")
    for a in run.attempts:
        table.add_row(str(a.number), clock(a.started_at), _cell(a.cause), scope_cell(a),
                      _cell(a.resume_step), _cell(a.outcome), _cell(a.reason))
        across = a.details.get("stacks_summary")
        if isinstance(across, str) and across:
            # One line across the ranks: which wait where, which one is elsewhere.
            table.add_row("", "", "", "", "", "", Text(f"hang: {across}", style="dim"))
        stacks = a.details.get("stacks")
        for line in stacks if isinstance(stacks, list) else []:
            # Where each process was when the attempt hung (airvisor.stacks).
            table.add_row("", "", "", "", "", "", Text(f"stuck: {line}", style="dim"))
    return table


def render_run(run: RunView, *, now: float | None = None) -> RenderableType:
    """A run's status (what `airvisor status` prints), with or without a daemon."""
    now = time.time() if now is None else now
    parts: list[RenderableType] = [_header(run, now)]
    if run.components:
        parts += [Text(""), _components(run)]
    if len(run.attempts) > 1:
        parts += [Text(""), Text("attempts:"), _attempts(run)]
    if run.recent_events:
        parts += [Text(""), Text("recent events:")]
        for event in run.recent_events:
            parts.append(Text("  ") + event_line(event))
    return Group(*parts)


# -- the list of runs (`airvisor runs`) ----------------------------------------------------------
def stamp(ts: float | None) -> str:
    """A wall-clock time with its date, local ("-" for none): a list spans days."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def listed_state(run: RunSummaryView) -> Text:
    """A run's state in a list; a live state whose run is not live says its supervisor is
    gone (a row must not read "running" for a run nobody supervises)."""
    text = _state(run.state)
    if run.state in LIVE_STATES and not run.live:
        text.append(" (supervisor gone)", style="bold red")
    return text


def render_runs(runs: list[RunSummaryView]) -> RenderableType:
    """The runs as `airvisor runs` lists them, newest first: one row each."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name, justify in (("RUN", "left"), ("PROFILE", "left"), ("STATE", "left"),
                          ("STEP", "right"), ("ATTEMPTS", "right"), ("RESTARTS", "right"),
                          ("STARTED", "left"), ("ENDED", "left")):
        table.add_column(name, justify=justify,  # type: ignore[arg-type]
                         no_wrap=name in ("RUN", "STARTED", "ENDED"))
    for run in runs:
        table.add_row(run.id, run.profile_name, listed_state(run), step_text(run),
                      str(run.attempt), str(run.restarts), stamp(run.created_at),
                      stamp(run.ended_at))
    return table


def to_text(renderable: RenderableType, *, width: int = 100) -> str:
    """Plain text of a renderable (no colour), as a terminal of `width` columns shows it."""
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False,
            highlight=False).print(renderable)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
