"""Launching an attempt on this box: the preflight on a worker (the machine, the containers,
prime-rl's plan, the split's halves), then the launch of its components, their log views
and the inference prober; a machine that cannot host it now is waited for, uncounted.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from pathlib import Path

from airvisor._logfile import LogTail
from airvisor.box._base import BoxSupervisorBase
from airvisor.box._hooks import INFERENCE, VIEWED, ComponentHandle, pool_status
from airvisor.box._probe import inference_base_url
from airvisor.box._rollouts import RolloutWatcher
from airvisor.core import ComponentExited, InferenceReady, LogView, Task, TaskDone
from airvisor.policy import Phase
from airvisor.policy._transition import (
    AttemptBegins,
    Launched,
    MachineBusy,
    PreparationEnded,
    Preparing,
)
from airvisor.primerl import LAUNCHER, AttemptError, PreparedAttempt, prepare_attempt, run_layout
from airvisor.primerl._split import (
    SplitPlan,
    component_keep_refusals,
    plan_split,
    resolve_split,
    split_of,
)


@dataclass(frozen=True)
class MachineCondition:
    """What a preflight reports when the machine cannot host the attempt now: not a crash of
    the run, so not counted; the run waits and tries again."""

    reason: str


MACHINE_RETRY_MAX = 60.0  # seconds between looks while waiting for the machine


@dataclass(frozen=True)
class SplitPrepared:
    """A preflight's attempt with its split (issue 22): `plan` when the inference server runs
    as its own supervised process beside prime-rl's `rl` without [inference], else why not
    (`refusals`, as the scope policy reads them)."""

    prepared: PreparedAttempt
    plan: SplitPlan | None
    refusals: tuple[str, ...]
    prl_run_id: str | None = None


def _plan_split(prepared: PreparedAttempt, attempt_dir: Path,
                prl_run_id: str | None, container_names: list[str]) -> SplitPrepared:
    """The attempt's two halves, derived by prime-rl (`resolve_split`), their files written;
    or the refusals (the attempt then runs exactly as before: the one `rl`)."""
    profile = prepared.profile
    assert prepared.plan is not None
    resolution = prepared.plan.resolution  # resolved with the halves (`prepare_attempt`)
    if resolution.split is None:
        resolution = resolve_split(profile, resume_step=prepared.choice.step,
                                   scratch=attempt_dir)
    split = split_of(resolution, mode=profile.prime_rl.mode)
    if not split.supported:
        return SplitPrepared(prepared, None, tuple(str(r) for r in split.refusals)
                             or ("not_resolved: no halves",))
    # main: the kept server and every rest share one PRL_RUN_ID (the tracker's, when set).
    run_id = prl_run_id or profile.prime_rl.env.get("PRL_RUN_ID") or uuid.uuid4().hex
    plan = plan_split(profile, split, attempt_dir=attempt_dir, prl_run_id=run_id,
                      container_names=container_names)
    for spec in (plan.inference, plan.rest):
        for path, text in spec.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return SplitPrepared(prepared, plan, (), run_id)


class Launching(BoxSupervisorBase):
    """Preflight and launch of an attempt (and of a component of it)."""

    def _relaunch(self, cause: str) -> None:
        self._begin_preflight()

    def _relaunch_rest(self, cause: str) -> None:
        self._begin_preflight(keep_inference=True)

    def begin(self) -> None:
        """Start the first attempt (after preflight)."""
        if self.phase in (Phase.PENDING, Phase.TAKEOVER):
            self._begin_preflight()

    def _begin_preflight(self, *, keep_inference: bool = False) -> None:
        kept = self._kept_server() if keep_inference else None
        self._decide(Preparing(keep_inference=kept is not None))
        profile, run_id = self.profile, self.run_id
        live = self._hooks.live_run_ids() - {run_id}
        want_split = profile.prime_rl.mode == "launcher" and profile.restart.scope == "auto"
        # Component mode keeps its own server unless prime-rl's split derivation refuses:
        # both are resolved with the halves, in the attempt's one run of prime-rl's resolver.
        with_halves = profile.restart.scope == "auto"
        prl_run_id = self._prl_run_id if kept is not None else None
        machine_profile = profile
        self._adopt_old_launchers()  # (a new daemon's: those an earlier one left)
        # The failed attempts' launchers, left to say their status and exit by themselves
        # (their members are gone or held): not the preflight's to reap meanwhile.
        own: frozenset[int] = frozenset(
            old.handle.identity.pid for old in self._old_launchers.values()
            if old.handle.identity.alive())
        if kept is not None:
            # The kept server is the run's own: never reaped, and its GPUs' memory is in use by
            # it (the GPU wait is for the rest's GPUs).
            own = own | {kept.identity.pid}
            machine_profile = profile.model_copy(update={"gpus": profile.gpus.model_copy(
                update={"inference": []})})
        number = self.attempt + 1
        attempt_dir = self.attempt_dir_of(number)
        layout = self.layout
        pool_factory = (self._hooks.container_pool
                        if profile.containers.enabled else None)
        if pool_factory is not None and self._pool is None:
            self._pool = pool_factory(profile, run_id)  # constructing it does no I/O
        pool, pool_lock = self._pool, self._pool_lock

        def job() -> PreparedAttempt | SplitPrepared | MachineCondition:
            summary = (self._hooks.prepare_machine(machine_profile, run_id, live, own_pids=own)
                       if own else self._hooks.prepare_machine(machine_profile, run_id, live))
            names: list[str] = []
            if pool is not None:
                with pool_lock:
                    pool.preflight()
                    pool.up(attempt=number)
                names = list(pool.names)
                summary += f"; {len(names)} container(s) up"
            try:
                prepared = prepare_attempt(profile, layout, number=number,
                                           attempt_dir=attempt_dir, container_names=names,
                                           summary=summary, split=with_halves)
            except AttemptError as exc:
                if not exc.machine:
                    raise
                if pool is not None:  # nothing of the attempt stays up while it waits
                    with pool_lock:
                        pool.down()
                return MachineCondition(str(exc))
            prepared = dataclasses.replace(prepared, containers=pool_status(pool))
            if not want_split or prepared.complete or prepared.plan is None:
                return prepared
            return _plan_split(prepared, attempt_dir, prl_run_id, names)

        self._run_task(Task.PREFLIGHT, job)

    def _launch_attempt(self, prepared: PreparedAttempt,
                        split: SplitPrepared | None = None) -> None:
        machine = self.machine
        cause = machine.failure.kind if machine.failure is not None else "first"
        scope = machine.scope
        kept = self._kept_server() if machine.keep_next else None
        # (The recovery is over; the failed attempt's number: its launcher may say its
        # failure's status after this launch.)
        self._decide(AttemptBegins(failed=self.attempt or None))
        self.attempt = prepared.number
        self.profile = prepared.profile
        self.layout = run_layout(prepared.profile)
        self.run_dir = self.layout.run_dir
        choice = prepared.choice
        assert prepared.plan is not None  # a complete run is never launched
        self._repoint_earlier_logs(prepared.number - 1, prepared.kept_logs)
        self.store.start_attempt(self.run_id, self.attempt, choice.step, cause=cause)
        self.store.merge_run_details(self.run_id, recovery=None)
        self._event("attempt", f"attempt {self.attempt}: {choice.describe()}",
                    attempt=self.attempt, resume_step=choice.step, cause=cause,
                    skipped=[list(s) for s in choice.skipped],
                    checked_by=prepared.plan.resolution.source)
        if self.attempt == 1 or self._containment is None:
            self._containment = self._hooks.containment()
            self._event("containment", f"processes contained by {self._containment}",
                        mode=self._containment.split(" ", 1)[0])
        plan = split.plan if split is not None else None
        if self.mode == "components":
            # airvisor starts the server itself: kept unless prime-rl's settings forbid it.
            self._split_refusals = tuple(
                str(r) for r in component_keep_refusals(prepared.plan.resolution))
        else:
            self._split_refusals = split.refusals if split is not None and plan is None else (
                () if plan is not None else ("not_resolved: the split was not asked for "
                                             f"(restart.scope = {self.profile.restart.scope!r})",))
        self._split = plan
        if plan is not None:
            self._prl_run_id = split.prl_run_id if split is not None else None
            self._specs = {INFERENCE: plan.inference, LAUNCHER: plan.rest}
        else:
            self._specs = dict(prepared.plan.processes)
        self.components = {INFERENCE: kept} if kept is not None else {}
        self._record_scope(scope, cause, kept)
        self._on_terminal()  # (the last attempt's views)
        self.views = {}
        self._attempt_started = self._clock()
        self._new_attempt_progress(choice.step)
        self._members = {}
        self._member_ids = {}
        self._next_member_scan = 0.0
        self._close_death_watch()  # the last attempt's members (their deaths are expected)
        metrics = self.layout.metrics_file()
        self._metrics = LogTail(metrics, from_end=True) if metrics is not None else None
        self._rollouts = RolloutWatcher.for_attempt(self.attempt_dir, self.profile,
                                                    clock=self._clock)
        self._decide(Launched())
        if plan is not None:
            if kept is None:
                self._start_component(INFERENCE)
            else:
                self._carry_kept_server(kept)
            self._start_component(LAUNCHER)
            layout = self.layout
            for name in ("trainer", "orchestrator"):
                self.views[name] = LogView(
                    lambda name=name: layout.log_file(name))  # type: ignore[misc]
        elif self.mode == "launcher":
            self._start_component(LAUNCHER)
            layout = self.layout
            for name in VIEWED:
                # Before the launch: whatever the path names now is an earlier attempt's file.
                self.views[name] = LogView(
                    lambda name=name: layout.log_file(name))  # type: ignore[misc]
        else:
            # The trainer loads its model while the inference server starts; the orchestrator
            # starts only once the server answers /health and /v1/models (a kept one at once).
            if kept is not None:
                self._carry_kept_server(kept)
            for name in ("inference", "trainer"):
                if name in self._specs and name not in self.components:
                    self._start_component(name)
        self._start_prober()
        self._record_containers(prepared.containers)

    def _repoint_earlier_logs(self, earlier: int, kept: tuple[tuple[Path, Path], ...]) -> None:
        """The earlier attempt's components name log paths this launch rewrites (v0.4's
        `logs/*.stdout`): point them at the copies kept aside, so `airvisor logs --attempt N`
        and the API serve attempt N's own lines."""
        moved = {str(old): str(new) for old, new in kept}
        if not moved or earlier < 1:
            return
        for comp in self.store.components(self.run_id, earlier):
            if comp.log_path in moved:
                self.store.upsert_component(self.run_id, earlier, comp.name,
                                            log_path=moved[comp.log_path])

    def _start_prober(self) -> None:
        if self.profile.inference.port is None:
            # `rl` starts no inference server (the user runs one elsewhere): nothing to gate on.
            self._post(InferenceReady(self.run_id, self.attempt, self._wall()))
            return
        self._prober = self._hooks.prober(
            run_id=self.run_id, attempt=self.attempt,
            base_url=inference_base_url(self.profile.inference.host, self.profile.inference.port),
            interval=self.profile.health.probe_interval,
            failures=self.profile.health.probe_failures, post=self._post,
        )
        self._prober.start()

    def _start_component(self, name: str) -> None:
        spec = self._specs[name]
        log_path = self.attempt_dir / f"{name}.log"
        launched = self._hooks.launch(spec.argv, env=spec.env, cwd=spec.cwd, log_path=log_path,
                                      run_id=self.run_id, component=name)
        gpus = (sorted({*([] if self._split is not None else self.profile.gpus.inference),
                        *self.profile.gpus.trainer})
                if name == LAUNCHER else list(getattr(self.profile.gpus, name, [])))
        handle = ComponentHandle(
            name=name, identity=launched.identity, pgid=launched.pid,
            log=LogTail(log_path), argv=list(spec.argv), gpus=gpus, launched=launched,
            since=self.attempt,
        )
        self.components[name] = handle
        self.store.upsert_component(
            self.run_id, self.attempt, name, kind="process", state="running",
            pid=launched.pid, pgid=launched.pid, create_time=launched.identity.create_time,
            argv=list(spec.argv), gpus=gpus, log_path=str(log_path), exit_code=None,
        )
        self._event("component_started", f"{name} started (pid {launched.pid})",
                    component=name, pid=launched.pid)
        attempt = self.attempt

        def wait_for_exit() -> None:
            code = launched.wait()
            self._post(ComponentExited(self.run_id, attempt, name, code, self._wall()))

        self._background(f"wait-{name}-{self.run_id}", wait_for_exit)

    def _after_preflight(self, event: TaskDone) -> None:
        if self.phase.stopping:
            self._decide(PreparationEnded())  # a stop arrived while preparing: undo it now
            return
        if self.phase != Phase.PREFLIGHT:
            return
        if event.error is not None:
            # (hopeless when nothing ever ran: the core's one rule)
            self._preparation_failed(f"preflight failed: {event.error}")
            return
        if isinstance(event.result, MachineCondition):
            self._wait_for_machine(event.result.reason)
            return
        split: SplitPrepared | None = None
        if isinstance(event.result, SplitPrepared):
            split = event.result
            prepared: PreparedAttempt = split.prepared
        else:
            prepared = event.result
        if prepared.summary:
            self._event("preflight", f"preflight: {prepared.summary}")
        if self.machine.keep_next and self.mode == "launcher" \
                and (split is None or split.plan is None) and not prepared.complete:
            # The rest cannot be planned apart from the kept server any more (prime-rl now
            # refuses the split): a failure of this preflight (keeping nothing), whose full
            # stop takes the kept server too, then a full relaunch.
            why = "; ".join(split.refusals) if split is not None else "no split was planned"
            self._fail(f"the rest could not be planned against the kept inference server: "
                       f"{why}", INFERENCE)
            return
        if prepared.complete:
            self._succeed(f"the newest complete checkpoint, step {prepared.choice.step}, is the "
                          f"final one (max_steps = {self.profile.run.max_steps}): run complete, "
                          "nothing relaunched")
            return
        try:
            self._launch_attempt(prepared, split)
        except OSError as exc:
            # ENOENT / EACCES when spawning: a failure of this attempt, with the reason.
            self._fail(f"launch failed: {exc.strerror or exc} ({exc.filename or ''})", None)

    def _wait_for_machine(self, reason: str) -> None:
        """The machine cannot host the next attempt now (a full or read-only disk): not a
        crash of the run. Said once per cause (a warning event, `last_error`), then the
        preflight is tried again every restart.backoff_max, uncounted, until it passes or
        the run is stopped."""
        # (Whether it is new, and the scope the wait keeps: the machine's.)
        self._decide(MachineBusy(reason, self._machine_retry()))

    def _machine_retry(self) -> float:
        """How often a waiting run looks again: restart.backoff_max, at most a minute (a
        person who freed the disk should not wait long)."""
        r = self.profile.restart
        return max(min(r.backoff_max, MACHINE_RETRY_MAX), r.backoff_initial)
