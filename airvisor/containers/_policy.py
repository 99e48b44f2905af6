"""Pure decisions about task containers: names, labels, the create spec, health and recreation.

Functions of plain data only (no Docker, no clock), so every rule is unit-tested directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from airvisor.containers._types import (
    ContainerError,
    ContainerFacts,
    ContainerSpec,
    MountSpec,
    ProbeResult,
)
from airvisor.profile._schema import ContainerSection, Profile

COMPONENT = "mlgym"
RUN_LABEL = "airvisor.run"
COMPONENT_LABEL = "airvisor.component"
INDEX_LABEL = "airvisor.index"
RUN_NAME_LABEL = "airvisor.run_name"
# How often this index was recreated before this container was made: carried on the container so
# a supervisor that restarts and adopts the containers keeps counting against max_recreates.
RESTARTS_LABEL = "airvisor.restarts"
# The owning airvisor: its state directory (resolved, as markers and cgroups record it), so two
# airvisors on one Docker engine (two users, a daemon and a foreground `start`) each judge only
# their own task containers; and the attempt that made the container.
OWNER_LABEL = "airvisor.owner"
ATTEMPT_LABEL = "airvisor.attempt"

# Docker's container-name grammar: [a-zA-Z0-9][a-zA-Z0-9_.-]+
_NAME_INVALID = re.compile(r"[^a-zA-Z0-9_.-]+")
_RUN_NAME_MAX = 40
# A run id as new_run_id (runs/_manager.py) makes it: `<run name>-<YYYYmmdd-HHMMSS>-<4 hex>`.
# The name prefix is the same for every run of a profile, so only what follows it tells two runs
# apart (two airvisors running one profile on one Docker engine). The name keeps its time of
# day and random suffix: two runs of one name alive at once that started at the same second of
# the day and drew the same suffix are not worth the date's 9 characters, which would cut the
# container's index off the 100-column `airvisor status` (the run id is whole in RUN_LABEL, and
# a name another run holds is refused, never taken: pool.up).
_RUN_ID_UNIQUE_PART = re.compile(r"-\d{8}-(\d{6}-[0-9a-f]{4})$")


def sanitize_name_part(text: str, *, fallback: str) -> str:
    """`text` reduced to Docker's name charset: invalid runs become one '-', no leading/trailing
    punctuation; `fallback` when nothing is left."""
    cleaned = _NAME_INVALID.sub("-", text).strip("-_.")
    return cleaned or fallback


def run_id_unique_part(run_id: str) -> str:
    """What tells this run apart from the other runs of its name: the start time (HHMMSS) and
    random suffix of a run id new_run_id made; any other run id whole (never shortened: a
    prefix of it may be shared), reduced to Docker's name charset."""
    match = _RUN_ID_UNIQUE_PART.search(run_id)
    if match is not None:
        return match.group(1)
    return sanitize_name_part(run_id, fallback="x")


def container_name(run_name: str, run_id: str, index: int) -> str:
    """`airvisor-<run name>-<the run id's unique part>-mlgym-<index>`: readable (the run's name
    and start time), and unique per run, so two runs of one profile (two users, two state dirs)
    on one Docker engine never claim the same name."""
    name_part = sanitize_name_part(run_name, fallback="run")[:_RUN_NAME_MAX].rstrip("-_.") or "run"
    return f"airvisor-{name_part}-{run_id_unique_part(run_id)}-{COMPONENT}-{index}"


def container_labels(
    run_id: str, run_name: str, index: int, restarts: int, *, owner: str | None = None,
    attempt: int | None = None,
) -> dict[str, str]:
    labels = {
        RUN_LABEL: run_id,
        COMPONENT_LABEL: COMPONENT,
        INDEX_LABEL: str(index),
        RUN_NAME_LABEL: run_name,
        RESTARTS_LABEL: str(restarts),
    }
    if owner is not None:
        labels[OWNER_LABEL] = owner
    if attempt is not None:
        labels[ATTEMPT_LABEL] = str(attempt)
    return labels


def is_airvisor_container(labels: Mapping[str, str]) -> bool:
    """Whether a container carries airvisor's task-container labels (anything else is never
    touched, whatever the server-side filter returned)."""
    return labels.get(COMPONENT_LABEL) == COMPONENT and bool(labels.get(RUN_LABEL))


def label_int(labels: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(labels.get(key, ""))
    except ValueError:
        return default


def assign_gpus(gpus: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """The GPUs of each container: with at least as many GPUs as containers the GPUs are split
    (container i gets every count-th GPU starting at i, so one container gets them all); with
    fewer, containers share them round-robin, one GPU each (MLGym's `--gpus device=N`)."""
    if not gpus:
        return [() for _ in range(count)]
    if len(gpus) >= count:
        return [tuple(gpus[i::count]) for i in range(count)]
    return [(gpus[i % len(gpus)],) for i in range(count)]


def container_gpus(profile: Profile) -> list[int]:
    """The task containers' GPUs: `[containers] gpus`, else the profile's `[gpus] containers`."""
    return list(profile.containers.gpus or profile.gpus.containers)


_MEMORY = re.compile(r"^(\d+(?:\.\d+)?) ?([kmgtp])?i?b?$", re.IGNORECASE)
_MEMORY_UNITS = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_memory(text: str) -> int:
    """Bytes of a `docker run --memory` value ("16g", "512m", "1.5GiB", "1073741824"); binary
    units as the Docker CLI uses them."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ContainerError(
            f"[containers] memory = {text!r} is not a Docker memory size: "
            "write a number with a unit, e.g. \"16g\" or \"512m\""
        )
    unit = match.group(2).lower() if match.group(2) else None
    value = int(float(match.group(1)) * _MEMORY_UNITS[unit])
    if value < 6 * (1 << 20):
        raise ContainerError(
            f"[containers] memory = {text!r} is below Docker's minimum of 6m: raise it"
        )
    return value


def build_spec(
    section: ContainerSection,
    *,
    run_id: str,
    run_name: str,
    index: int,
    gpu_ids: Sequence[int],
    restarts: int,
    owner: str | None = None,
    attempt: int | None = None,
) -> ContainerSpec:
    return ContainerSpec(
        name=container_name(run_name, run_id, index),
        image=section.image,
        command=tuple(section.command),
        labels=container_labels(run_id, run_name, index, restarts, owner=owner,
                                attempt=attempt),
        env=dict(section.env),
        user=section.user,
        working_dir=section.workdir,
        network_mode=section.network,
        nano_cpus=round(section.cpus * 1e9) if section.cpus is not None else None,
        mem_limit=parse_memory(section.memory) if section.memory is not None else None,
        mounts=tuple(
            MountSpec(source=str(m.source), target=m.target, read_only=m.read_only)
            for m in section.mounts
        ),
        gpu_ids=tuple(gpu_ids),
    )


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    reason: str = ""


def assess(facts: ContainerFacts | None, probe: ProbeResult | None) -> Verdict:
    """Health of one container from what the engine reports and from the exec round-trip
    (`probe` is None when no probe ran, which only a running container gets)."""
    if facts is None:
        return Verdict(False, "container is missing (removed from outside)")
    if facts.state != "running":
        return Verdict(False, describe_not_running(facts))
    if probe is None:
        return Verdict(False, "container was not probed")
    if not probe.ok:
        return Verdict(False, f"command round-trip failed: {probe.detail}")
    return Verdict(True)


def describe_not_running(facts: ContainerFacts) -> str:
    if facts.state in ("exited", "dead"):
        how = f"exit code {facts.exit_code}" if facts.exit_code is not None else "no exit code"
        if facts.oom_killed:
            how += ", killed by the out-of-memory killer: raise [containers] memory"
        elif facts.exit_code == 137:
            how += ", killed by SIGKILL"
        if facts.error:
            how += f", {facts.error}"
        return f"container {facts.state} ({how})"
    if facts.state == "paused":
        return "container is paused (frozen): it cannot run commands"
    return f"container is {facts.state}, not running"


Action = Literal["keep", "recreate", "give_up"]


def decide(verdict: Verdict, *, recreates: int, max_recreates: int) -> Action:
    """Keep a healthy container; recreate an unhealthy one while this index has been recreated
    fewer than `max_recreates` times; then give up (the run fails)."""
    if verdict.healthy:
        return "keep"
    if recreates < max_recreates:
        return "recreate"
    return "give_up"


OrphanAction = Literal["remove", "leave"]
NOT_OURS_CONTAINER = "not ours, left alone (removed only with --all)"


@dataclass(frozen=True)
class OrphanVerdict:
    """What the orphan reaper does with one task container, and why (shown to the user)."""

    action: OrphanAction
    owner: str | None  # the owning airvisor's state dir (None: no owner label)
    reason: str
    blocked_by: str | None = None  # set when left alone


def judge_container(
    labels: Mapping[str, str],
    *,
    own_state_dir: str,
    live_run_ids: frozenset[str] | set[str],
    foreign_live: Mapping[str, frozenset[str] | None],
    reap_all: bool = False,
) -> OrphanVerdict | None:
    """The orphan reaper's verdict on one container; None when it is not listed at all (no
    airvisor task-container labels, or a container of a live run).

    Ours (the owner label names our state dir): removed when its run is not live. Another
    airvisor's (another state dir), or one without an owner label (an older airvisor's, or
    labelled by hand): listed as not ours and removed only with `reap_all` (`--all`), and even
    then only when its owner's store shows the run is not live (`foreign_live`: that store's
    live runs by state dir, None where it cannot be read: never removed, nobody can show it is
    stale).
    """
    if not is_airvisor_container(labels):
        return None
    run_id = labels[RUN_LABEL]
    owner = labels.get(OWNER_LABEL) or None
    if owner == own_state_dir:
        if run_id in live_run_ids:
            return None
        return OrphanVerdict("remove", owner, f"run {run_id} of this airvisor is not live")
    if owner is None:
        if run_id in live_run_ids:
            return None  # a live run of ours made it before owner labels existed
        reason = (f"run {run_id}; no owner label (made by an airvisor before owner labels, "
                  "or by hand)")
        if reap_all:
            return OrphanVerdict("remove", None, reason + " (removed because of --all)")
        return OrphanVerdict("leave", None, reason, NOT_OURS_CONTAINER)
    live = foreign_live.get(owner)
    if live is not None and run_id in live:
        return None
    whose = f"run {run_id} of the airvisor at {owner}"
    if live is None:
        return OrphanVerdict("leave", owner, whose, "its owner's store cannot be read, so "
                             "whether the run is live is unknown; left alone")
    if reap_all:
        return OrphanVerdict("remove", owner, f"{whose}, which is not live there (removed "
                             "because of --all)")
    return OrphanVerdict("leave", owner, f"{whose}, which is not live there",
                         NOT_OURS_CONTAINER)
