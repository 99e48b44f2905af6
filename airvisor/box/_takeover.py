"""Boot takeover: what the logs say happened while no supervisor watched, and the commands the
API accepted that the previous daemon did not carry out.

- A run whose trainer and orchestrator finished while the daemon was stopped is recorded as
  succeeded at its real step instead of being relaunched (a model load on a GPU box).
- An adopted run's step and time of last progress come from its logs before the first answer.
- Stop and restart requests are recorded when accepted, so a daemon killed by the watchdog
  before acting on them leaves them to the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from airvisor._logfile import tail_lines
from airvisor.box._stop import launcher_report
from airvisor.policy import CheckpointHalves, Phase
from airvisor.policy._machine_json import MachineBlobError, decode_machine
from airvisor.policy._transition import status_said, with_status
from airvisor.primerl import (
    FINISH_MILESTONES,
    LAUNCHER,
    child_failure_from_line,
    milestone_from_log_line,
    run_layout,
    step_base_of,
    step_from_log_line,
)
from airvisor.proc import ProcessIdentity, read_marker, terminate_tree
from airvisor.profile._schema import Profile
from airvisor.store import ComponentRecord, RunRecord, Store

# The end of a log is where a run's last step and its "finished" lines are.
LOG_TAIL_LINES = 20_000
LAUNCHER_LINES = 200  # of the launcher's log's end, looked at for a child's failure line
ACCEPTED_KIND = "command_accepted"
# What the supervisor records when it acts on a command.
CARRIED_OUT_KINDS = {"stop": "stop_requested", "restart": "restart_requested"}
# Processes that may still run after training finished: the inference server (the supervisor
# stops it on success), and prime-rl's launcher while it cleans up (see finish_if_completed).
OUTLIVE_TRAINING = frozenset({"inference"})


@dataclass(frozen=True)
class LogFacts:
    step: int | None  # the trainer's newest `Step N`
    finished: frozenset[str]  # components whose log says they finished
    last_write: float | None  # newest modification time of the trainer/orchestrator logs


def facts_from_lines(lines_by_component: Mapping[str, list[str]],
                     mtimes: Mapping[str, float]) -> LogFacts:
    step: int | None = None
    finished: set[str] = set()
    for name, lines in lines_by_component.items():
        for line in lines:
            found = step_from_log_line(line)
            if found is not None:
                if name == "trainer":
                    step = max(step or 0, found)
                continue
            if name in FINISH_MILESTONES and \
                    milestone_from_log_line(line) == FINISH_MILESTONES[name]:
                finished.add(name)
    relevant = [t for name, t in mtimes.items() if name in FINISH_MILESTONES]
    return LogFacts(step=step, finished=frozenset(finished),
                    last_write=max(relevant) if relevant else None)


def completed_step(facts: LogFacts, max_steps: int | None, step_base: int) -> int | None:
    """The final step of a run whose logs show it completed (trainer and orchestrator both
    said they finished, or the trainer printed its last step: max_steps - 1 + the version's
    first step number, v0.4 counting from 0 and main from 1); None otherwise."""
    if facts.step is None:
        return None
    both_finished = set(FINISH_MILESTONES) <= facts.finished
    reached = max_steps is not None and facts.step >= max_steps - 1 + step_base
    return facts.step if both_finished or reached else None


def _tail_lines(path: Path) -> list[str]:
    try:
        lines, _ = tail_lines(path, LOG_TAIL_LINES)
    except OSError:
        return []
    return [line.rstrip("\n") for line in lines]


def read_log_facts(logs: Mapping[str, Path]) -> LogFacts:
    mtimes: dict[str, float] = {}
    for name, path in logs.items():
        try:
            mtimes[name] = path.stat().st_mtime
        except OSError:
            continue
    return facts_from_lines({name: _tail_lines(path) for name, path in logs.items()}, mtimes)


def _process_logs(store: Store, run: RunRecord, profile: Profile | None = None
                  ) -> dict[str, Path]:
    """The logs of the run's processes; in launcher mode (prime-rl's `rl` started the trainer
    and orchestrator) theirs are where that prime-rl version writes them."""
    logs = {c.name: Path(c.log_path) for c in store.components(run.id, run.attempt)
            if c.kind in ("process", "member") and c.log_path}
    if profile is not None and profile.resolved is not None:
        try:
            layout = run_layout(profile)
        except Exception:  # an unknown layout: the recorded logs are all there is
            return logs
        for name in FINISH_MILESTONES:
            path = layout.log_file(name)  # type: ignore[arg-type]
            if name not in logs and path is not None:
                logs[name] = path
    return logs


def component_alive(comp: ComponentRecord, run_id: str) -> bool:
    """A recorded process of the run still runs: by pid and start time (pids are reused); a
    launcher's member recorded without its start time (by an earlier version) by its marker."""
    if not comp.pid:
        return False
    if comp.create_time:
        return ProcessIdentity(comp.pid, comp.create_time).alive()
    marker = read_marker(comp.pid)  # a launcher's member: recorded without its start time
    return marker is not None and marker.run_id == run_id


def ended_by_a_reboot(create_time: float | None, boot_time: float) -> bool:
    """A recorded process, gone at the takeover, is one the machine's reboot ended: it started
    before the current boot (`create_time` is psutil's, the boot time plus its start ticks,
    so every process of this boot started at or after `boot_time`). A process that started
    in this boot and is gone died while the machine ran: a crash, not a reboot. Its start
    unrecorded: taken for a reboot (the uncounted resume; nothing tells otherwise)."""
    return create_time is None or create_time < boot_time


def finish_if_completed(store: Store, run: RunRecord, profile: Profile,
                        claim: Callable[[str], None] | None = None) -> bool:
    """At boot, before adopting or relaunching a run whose supervisor died: when its logs show
    the run completed and its trainer and orchestrator are gone, stop what is left of it (the
    inference server; prime-rl's launcher in its clean-up once both said they finished), by
    the run's marker, record it as succeeded at its real step and return True."""
    comps = [c for c in store.components(run.id, run.attempt)
             if c.kind in ("process", "member")]
    facts = read_log_facts(_process_logs(store, run, profile))
    step = completed_step(facts, profile.run.max_steps, step_base_of(profile.prime_rl.version))
    if step is None:
        return False
    both_finished = set(FINISH_MILESTONES) <= facts.finished
    if not both_finished and _launcher_named_a_failure(comps):
        return False  # its last step was printed, but it died after (a final checkpoint's)
    if not both_finished and final_checkpoint_unfinished(_checkpoints(profile),
                                                         profile.run.max_steps):
        # Its last step was printed and the final checkpoint begun, never finished (the
        # trainer says it finished only after writing it): it died writing it, and its
        # launcher's line, if it was to come, never did (a reboot, the launcher killed too).
        # The run resumes from its newest complete checkpoint instead (a sweep's seed 809).
        return False
    for comp in comps:
        cleaning_up = comp.name in OUTLIVE_TRAINING or (comp.name == LAUNCHER and both_finished)
        if not cleaning_up and component_alive(comp, run.id):
            return False
    report = terminate_tree([], pgids=[], marker_run_id=run.id,
                            grace=profile.restart.stop_grace, identities={})
    for comp in comps:
        if comp.state in ("running", "starting"):
            store.upsert_component(run.id, run.attempt, comp.name, state="exited")
    # Recorded whole: phase with state (never "succeeded (phase running)"), the attempt's
    # outcome and end; the supervisor (this daemon, which closed it) claims it first.
    if claim is not None:
        claim(run.id)
    store.end_attempt(run.id, run.attempt, "succeeded", None)
    store.set_phase(run.id, Phase.SUCCEEDED, step=step, last_progress_at=facts.last_write)
    stopped = f"; stopped what was left ({len(report.terminated) + len(report.killed)} " \
              "processes)" if report.terminated or report.killed else ""
    store.add_event(run.id, "finished_unsupervised",
                    f"the run completed at step {step} while no supervisor watched (its logs "
                    f"say so): recorded as succeeded, not relaunched{stopped}",
                    data={"step": step})
    _read_earlier_statuses(store, run)
    return True


def _read_earlier_statuses(store: Store, run: RunRecord) -> None:
    """The failures of earlier attempts still waiting for the status their launcher was to say
    (a stop that did not wait for it: `RunMachine.earlier`, persisted with the run) get it
    from that launcher's log: the run closed here never reaches the run machine that reads
    them at its next looks (the simulation's seed 2980: attempt 1's launcher said "exit code 3"
    while no daemon watched, and attempt 2 then finished training)."""
    if run.machine_json is None:
        return
    try:
        machine = decode_machine(run.machine_json, now=time.monotonic(), wall=time.time())
    except MachineBlobError:
        return  # (said when the run was taken over: `core._persist`)
    for number, failure in machine.earlier:
        if failure.component is None or failure.status_known:
            continue
        launcher = next((c for c in store.components(run.id, number)
                         if c.name == LAUNCHER and c.log_path), None)
        child = None if launcher is None or launcher.log_path is None \
            else launcher_report(Path(launcher.log_path), failure.component)
        if child is None:
            continue
        known = with_status(failure, child.component, child.code)
        store.amend_failure(run.id, number, known.reason)
        said = status_said(known, child.component, child.code)
        store.add_event(run.id, said.kind, said.message, component=said.component,
                        data=dict(said.data))


def final_checkpoint_unfinished(checkpoints: Mapping[int, CheckpointHalves],
                                max_steps: int | None) -> bool:
    """A checkpoint of the final step (at or past max_steps) was begun, and none is complete:
    the trainer died writing it."""
    if max_steps is None:
        return False
    finals = [halves for step, halves in checkpoints.items() if step >= max_steps]
    return bool(finals) and not any(halves.complete for halves in finals)


def _checkpoints(profile: Profile) -> Mapping[int, CheckpointHalves]:
    try:
        return run_layout(profile).scan()
    except Exception:  # an unknown layout: no checkpoint to go by (the logs decide)
        return {}


def _launcher_named_a_failure(comps: list[ComponentRecord]) -> bool:
    """prime-rl's launcher's log says the trainer or the orchestrator failed ("<Name> failed
    with exit code N"): training did not end, whatever step its log printed last."""
    for comp in comps:
        if comp.name != LAUNCHER or not comp.log_path:
            continue
        for line in _tail_lines(Path(comp.log_path))[-LAUNCHER_LINES:]:
            child = child_failure_from_line(line)
            if child is not None and child.component in FINISH_MILESTONES:
                return True
    return False


def refresh_adopted(store: Store, run: RunRecord) -> int | None:
    """Right after adopting a live run: its step and time of last progress from the logs
    written while nobody read them, so the first answer is not stale. Returns the step."""
    try:
        profile: Profile | None = Profile.model_validate(run.profile)
    except ValueError:
        profile = None
    facts = read_log_facts(_process_logs(store, run, profile))
    step = max(facts.step or 0, run.step or 0) if facts.step or run.step else None
    fields: dict[str, object] = {"step": step}
    if facts.last_write is not None and step is not None and step != run.step:
        fields["last_progress_at"] = facts.last_write
    store.update_run(run.id, **fields)
    return step


def record_accepted(store: Store, run_id: str, action: str) -> None:
    """Persist a stop/restart the API accepted, before the main loop acts on it."""
    store.add_event(run_id, ACCEPTED_KIND, f"{action} accepted", data={"action": action})


def pending_commands(kinds_and_actions: list[tuple[str, str | None]]) -> list[str]:
    """Accepted commands not carried out, oldest first, from a run's events in order as
    (kind, data action) pairs: an accepted stop is done once a `stop_requested` follows it."""
    pending: list[str] = []
    for kind, action in kinds_and_actions:
        if kind == ACCEPTED_KIND and action in CARRIED_OUT_KINDS:
            pending.append(action)
        for wanted, done in CARRIED_OUT_KINDS.items():
            if kind == done and wanted in pending:
                pending.remove(wanted)
    # A stop makes a restart pointless; one of each is enough.
    if "stop" in pending:
        return ["stop"]
    return sorted(set(pending), key=pending.index)


def unfinished_commands(store: Store, run_id: str) -> list[str]:
    events = store.events(run_id, limit=100_000)
    return pending_commands([(e.kind, e.data.get("action")) for e in events])
