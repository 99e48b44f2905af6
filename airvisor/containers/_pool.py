"""The MLGym task-container pool of one run: preflight, up, health checks with recreation, down,
status; and the reaper of containers whose run is gone."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker

from airvisor.containers._docker import DockerEngine
from airvisor.containers._policy import (
    COMPONENT,
    COMPONENT_LABEL,
    INDEX_LABEL,
    OWNER_LABEL,
    RESTARTS_LABEL,
    RUN_LABEL,
    OrphanVerdict,
    Verdict,
    assess,
    assign_gpus,
    build_spec,
    container_name,
    decide,
    is_airvisor_container,
    judge_container,
    label_int,
    parse_memory,
)
from airvisor.containers._types import (
    ContainerError,
    ContainerEvent,
    ContainerFacts,
    ContainerSpec,
    ContainerStatus,
    ProbeResult,
)
from airvisor.proc import own_state_dir
from airvisor.profile._schema import ContainerSection


@dataclass
class _Slot:
    """What the pool knows about one index between engine calls."""

    index: int
    name: str
    gpus: tuple[int, ...]
    container_id: str | None = None
    restarts: int = 0
    health: str = "unknown"
    gave_up: bool = False


class ContainerPool:
    """`section.count` task containers of one run, named and labelled from the run."""

    def __init__(
        self,
        section: ContainerSection,
        *,
        run_id: str,
        run_name: str,
        gpus: list[int],
        client: docker.DockerClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        owner: str | None = None,
    ) -> None:
        self._section = section
        # The owning airvisor (its resolved state dir), carried in every container's labels.
        self._owner = owner or _own_state_dir()
        self._attempt: int | None = None
        self._run_id = run_id
        self._run_name = run_name
        self._engine = DockerEngine(client)
        self._clock = clock
        self._last_check: float | None = None
        # Serializes up/check/down; status() reads the slots under the state lock only, so it
        # never waits for a slow health check.
        self._op_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._slots = [
            _Slot(index=i, name=container_name(run_name, run_id, i), gpus=gpu_set)
            for i, gpu_set in enumerate(assign_gpus(gpus, section.count))
        ]

    # -- public API ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The container names, index order (what the orchestrator's env args receive)."""
        return [slot.name for slot in self._slots]

    @property
    def gave_up(self) -> bool:
        """Whether some index exceeded max_recreates (the run must fail)."""
        with self._state_lock:
            return any(slot.gave_up for slot in self._slots)

    def preflight(self) -> None:
        """Engine reachable, profile values usable, image present (pulled when a registry
        answers); a ContainerError saying what to do otherwise."""
        if self._section.memory is not None:
            parse_memory(self._section.memory)
        for position, mount in enumerate(self._section.mounts):
            if not Path(mount.source).is_absolute():
                raise ContainerError(
                    f"[containers] mounts[{position}].source = {str(mount.source)!r} is not an "
                    "absolute path: give the full host path"
                )
            if not Path(mount.source).exists():
                raise ContainerError(
                    f"[containers] mounts[{position}].source {mount.source} does not exist: "
                    "create it or fix the path (e.g. your MLGym checkout's data directory)"
                )
        self._engine.ping()
        image = self._section.image
        if self._engine.image_present(image):
            return
        try:
            self._engine.pull(image)
        except ContainerError as error:
            raise ContainerError(
                f"image {image} is not present and could not be pulled ({error.message}). "
                f"Load it (`docker load -i mlgym-agent.tar`, after `docker pull {image}` and "
                f"`docker save {image} -o mlgym-agent.tar` on a connected machine), or set "
                "[containers] image to an image this engine has (see `docker images`)"
            ) from None
        if not self._engine.image_present(image):
            raise ContainerError(f"pulling image {image} reported success but it is not present")

    def up(self, attempt: int | None = None) -> list[ContainerStatus]:
        """Create and start every container; an index whose container of this run already runs
        and answers is adopted as is (after a supervisor restart). On failure the containers this
        call created are removed and a ContainerError says why. `attempt` (the run's attempt
        being prepared) is recorded in the labels of the containers made from now on."""
        with self._op_lock:
            if attempt is not None:
                self._attempt = attempt
            existing = {slot.index: self._engine.inspect(slot.name) for slot in self._slots}
            for slot in self._slots:
                facts = existing[slot.index]
                if facts is not None and facts.labels.get(RUN_LABEL) != self._run_id:
                    raise ContainerError(
                        f"a container named {slot.name} already exists and is not one of run "
                        f"{self._run_id}'s task containers (labels {dict(facts.labels)}): remove "
                        "it yourself (airvisor never touches it) or rename the run"
                    )
            running = [
                f.container_id
                for i, f in existing.items()
                if f is not None
                and f.state == "running"
                and self._matches_profile(self._slots[i], f)
            ]
            probes = self._probe(running)
            to_create: list[_Slot] = []
            for slot in self._slots:
                facts = existing[slot.index]
                if facts is not None:
                    with self._state_lock:
                        slot.restarts = label_int(facts.labels, RESTARTS_LABEL, 0)
                    if self._matches_profile(slot, facts) and assess(
                        facts, probes.get(facts.container_id)
                    ).healthy:
                        with self._state_lock:
                            slot.container_id = facts.container_id
                            slot.health = "healthy"
                        continue
                    self._engine.remove(facts.container_id, grace=0)
                with self._state_lock:
                    slot.container_id = None
                to_create.append(slot)
            try:
                for slot in to_create:
                    self._create_and_start(slot)
                self._verify_started(to_create)
            except ContainerError:
                for slot in to_create:  # created (maybe not started) by this call
                    self._discard(slot)
                raise
            return self._statuses()

    def check(self) -> list[ContainerEvent]:
        """Health of every container; unhealthy ones are recreated (up to max_recreates per
        index, then given up). Returns what happened, for the run's event log.

        Raises ContainerError when the engine itself cannot be asked: that is no verdict on the
        containers, so nothing is recreated or counted; the caller decides (retry, fail)."""
        with self._op_lock:
            self._last_check = self._clock()
            facts = {slot.index: self._engine.inspect(slot.name) for slot in self._slots}
            for index, current in facts.items():
                if current is not None and current.labels.get(RUN_LABEL) != self._run_id:
                    facts[index] = None  # a stranger took the name: never touched, ours is missing
            probes = self._probe(
                [f.container_id for f in facts.values() if f is not None and f.state == "running"]
            )
            events: list[ContainerEvent] = []
            for slot in self._slots:
                current = facts[slot.index]
                verdict = assess(current, probes.get(current.container_id) if current else None)
                events.extend(self._apply(slot, current, verdict))
            return events

    def check_due(self) -> bool:
        """Whether health_interval has passed since the last check (per the injected clock)."""
        if self._last_check is None:
            return True
        return self._clock() - self._last_check >= self._section.health_interval

    def down(self) -> None:
        """Stop and remove this run's containers, found by label (also ones an earlier
        supervisor process created)."""
        with self._op_lock:
            found = self._engine.list_labelled(
                {RUN_LABEL: self._run_id, COMPONENT_LABEL: COMPONENT}
            )
            ours = [
                f for f in found
                if is_airvisor_container(f.labels) and f.labels.get(RUN_LABEL) == self._run_id
                and f.labels.get(OWNER_LABEL) in (None, self._owner)
            ]
            _remove_all(self._engine, ours, grace=self._section.stop_grace)
            with self._state_lock:
                for slot in self._slots:
                    slot.container_id = None
                    if not slot.gave_up:
                        slot.health = "unknown"

    def status(self) -> list[ContainerStatus]:
        """One entry per index; never raises (state "unknown" when the engine cannot answer)."""
        return self._statuses()

    def close(self) -> None:
        self._engine.close()

    # -- internals ----------------------------------------------------------------------------
    def _spec(self, slot: _Slot) -> ContainerSpec:
        return build_spec(
            self._section,
            run_id=self._run_id,
            run_name=self._run_name,
            index=slot.index,
            gpu_ids=slot.gpus,
            restarts=slot.restarts,
            owner=self._owner,
            attempt=self._attempt,
        )

    def _matches_profile(self, slot: _Slot, facts: ContainerFacts) -> bool:
        """Whether an existing container was made from this profile (image, GPUs), so it may be
        adopted; one made before the profile changed is recreated instead."""
        return facts.image == self._section.image and facts.gpu_ids == tuple(
            str(gpu) for gpu in slot.gpus
        )

    def create_only(self, index: int) -> ContainerStatus:
        """Create the container of `index` without starting it, to inspect what up() would run
        (e.g. its GPU device requests on a machine without the GPU runtime); down() removes it."""
        with self._op_lock:
            facts = self._create(self._slots[index])
            return _status_of_facts(facts, "unknown")

    def _create(self, slot: _Slot) -> ContainerFacts:
        facts = self._engine.create(self._spec(slot))
        with self._state_lock:
            slot.container_id = facts.container_id
        return facts

    def _create_and_start(self, slot: _Slot) -> None:
        facts = self._create(slot)
        self._engine.start(facts.container_id, slot.name)

    def _verify_started(self, slots: list[_Slot]) -> None:
        """Each freshly started container must run and answer a command before up() returns."""
        ids = [slot.container_id for slot in slots if slot.container_id is not None]
        probes = self._probe(ids)
        for slot in slots:
            facts = self._engine.inspect(slot.container_id or slot.name)
            verdict = assess(facts, probes.get(slot.container_id or ""))
            if not verdict.healthy:
                raise ContainerError(
                    f"container {slot.name} ({self._section.image}) started but is not "
                    f"healthy: {verdict.reason}. Check [containers] command/user/workdir and "
                    f"`docker logs {slot.name}`"
                )
            with self._state_lock:
                slot.health = "healthy"

    def _discard(self, slot: _Slot) -> None:
        if slot.container_id is not None:
            with contextlib.suppress(ContainerError):  # down() and the reaper find it by label
                self._engine.remove(slot.container_id, grace=0)
        with self._state_lock:
            slot.container_id = None

    def _probe(self, container_ids: list[str]) -> dict[str, ProbeResult]:
        if not container_ids:
            return {}
        return self._engine.probe_many(
            container_ids,
            list(self._section.health_command),
            user=self._section.user,
            timeout=self._section.exec_timeout,
        )

    def _apply(
        self, slot: _Slot, current: ContainerFacts | None, verdict: Verdict
    ) -> list[ContainerEvent]:
        if verdict.healthy:
            with self._state_lock:
                slot.container_id = current.container_id if current else None
                slot.health = "healthy"
            return []
        if slot.gave_up:
            return []  # reported once; the run is failing
        events = [ContainerEvent("container_unhealthy", slot.index, slot.name, verdict.reason)]
        action = decide(
            verdict, recreates=slot.restarts, max_recreates=self._section.max_recreates
        )
        if action == "give_up":
            with self._state_lock:
                slot.gave_up = True
                slot.health = "gave_up"
            events.append(
                ContainerEvent(
                    "container_gave_up",
                    slot.index,
                    slot.name,
                    f"{verdict.reason}; recreated {slot.restarts} times already "
                    f"(max_recreates = {self._section.max_recreates})",
                )
            )
            return events
        with self._state_lock:
            slot.restarts += 1
            slot.health = "unhealthy"
        try:
            if current is not None:
                self._engine.remove(current.container_id, grace=0)
            self._create_and_start(slot)
            self._verify_started([slot])
        except ContainerError as error:
            # Counted against max_recreates; the next check sees the index missing or dead.
            events.append(
                ContainerEvent(
                    "container_unhealthy", slot.index, slot.name, f"recreate failed: {error}"
                )
            )
            return events
        events.append(
            ContainerEvent(
                "container_recreated",
                slot.index,
                slot.name,
                f"{verdict.reason} (recreate {slot.restarts} of {self._section.max_recreates})",
            )
        )
        return events

    def _statuses(self) -> list[ContainerStatus]:
        with self._state_lock:  # a consistent snapshot; the engine is asked without the lock
            slots = [dataclasses.replace(slot) for slot in self._slots]
        statuses = []
        for slot in slots:
            try:
                facts = self._engine.inspect(slot.container_id or slot.name)
            except ContainerError:
                state, container_id = "unknown", slot.container_id
            else:
                if facts is not None and facts.labels.get(RUN_LABEL) != self._run_id:
                    facts = None
                state = facts.state if facts is not None else "missing"
                container_id = facts.container_id if facts is not None else None
            statuses.append(
                ContainerStatus(
                    container_id=container_id,
                    name=slot.name,
                    index=slot.index,
                    state=state,
                    health=slot.health,
                    restarts=slot.restarts,
                    gpus=slot.gpus,
                )
            )
        return statuses


def _remove_all(engine: DockerEngine, containers: list[ContainerFacts], *, grace: float) -> None:
    """Stop and remove concurrently, so stopping N shells that ignore SIGTERM (a PID 1 bash)
    takes one grace period, not N."""
    if not containers:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(containers))) as workers:
        futures = [workers.submit(engine.remove, f.container_id, grace=grace) for f in containers]
        errors = [future.exception() for future in futures]
    failures = [str(error) for error in errors if error is not None]
    if failures:
        raise ContainerError("could not remove every container: " + "; ".join(failures))


def _status_of_facts(facts: ContainerFacts, health: str) -> ContainerStatus:
    return ContainerStatus(
        container_id=facts.container_id,
        name=facts.name,
        index=label_int(facts.labels, INDEX_LABEL, -1),
        state=facts.state,
        health=health,
        restarts=label_int(facts.labels, RESTARTS_LABEL, 0),
        gpus=tuple(int(g) for g in facts.gpu_ids if g.isdigit()),
    )


def _own_state_dir() -> str:
    return own_state_dir()


@dataclass(frozen=True)
class JudgedContainer:
    """One task container the orphan reaper looked at, with its verdict."""

    status: ContainerStatus
    run_id: str
    owner: str | None
    reason: str
    blocked_by: str | None = None  # set on containers left alone


@dataclass(frozen=True)
class OrphanReport:
    removed: list[JudgedContainer]  # removed (a dry run: would be removed)
    left: list[JudgedContainer]  # not ours, or their owner cannot say: left alone


def judge_orphan_containers(
    live_run_ids: set[str],
    *,
    dry_run: bool,
    client: docker.DockerClient | None = None,
    grace: float = 2.0,
    state_dir: str | None = None,
    reap_all: bool = False,
    live_runs_of: Callable[[str], frozenset[str] | None] | None = None,
) -> OrphanReport:
    """Task containers whose run is not live: this airvisor's (the owner label names
    `state_dir`, default ours) are stopped and removed; other airvisors' and unlabelled owners'
    are listed as not ours and removed only with `reap_all` (see `judge_container`).
    `live_runs_of(state_dir)` reads another airvisor's live runs (None: unreadable; without
    it, no other airvisor's store can be read). A dry run only lists.

    Selected by label on the server and checked again here: a container without airvisor's
    labels is never touched.
    """
    own = state_dir or _own_state_dir()
    engine = DockerEngine(client)
    try:
        found = engine.list_labelled({COMPONENT_LABEL: COMPONENT, RUN_LABEL: None})
        owners = {f.labels.get(OWNER_LABEL) for f in found} - {None, "", own}
        foreign_live = {o: (live_runs_of(o) if live_runs_of is not None else None)
                        for o in owners if o}
        removed: list[JudgedContainer] = []
        left: list[JudgedContainer] = []
        to_remove: list[ContainerFacts] = []
        for facts in found:
            verdict: OrphanVerdict | None = judge_container(
                facts.labels, own_state_dir=own, live_run_ids=live_run_ids,
                foreign_live=foreign_live, reap_all=reap_all)
            if verdict is None:
                continue
            judged = JudgedContainer(
                _status_of_facts(facts, "orphaned"), facts.labels[RUN_LABEL], verdict.owner,
                verdict.reason, verdict.blocked_by)
            if verdict.action == "remove":
                removed.append(judged)
                to_remove.append(facts)
            else:
                left.append(judged)
        if not dry_run:
            _remove_all(engine, to_remove, grace=grace)
        return OrphanReport(removed, left)
    finally:
        if client is None:  # a connection of our own
            engine.close()


def reap_orphan_containers(
    live_run_ids: set[str],
    *,
    dry_run: bool,
    client: docker.DockerClient | None = None,
    grace: float = 2.0,
    state_dir: str | None = None,
) -> list[ContainerStatus]:
    """This airvisor's task containers whose run is not live: stopped and removed (only listed
    in a dry run). Others' are never touched (see `judge_orphan_containers`)."""
    report = judge_orphan_containers(live_run_ids, dry_run=dry_run, client=client, grace=grace,
                                     state_dir=state_dir)
    return [judged.status for judged in report.removed]
