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

# Docker's container-name grammar: [a-zA-Z0-9][a-zA-Z0-9_.-]+
_NAME_INVALID = re.compile(r"[^a-zA-Z0-9_.-]+")
_RUN_NAME_MAX = 40
_SHORT_ID_LEN = 8


def sanitize_name_part(text: str, *, fallback: str) -> str:
    """`text` reduced to Docker's name charset: invalid runs become one '-', no leading/trailing
    punctuation; `fallback` when nothing is left."""
    cleaned = _NAME_INVALID.sub("-", text).strip("-_.")
    return cleaned or fallback


def container_name(run_name: str, run_id: str, index: int) -> str:
    name_part = sanitize_name_part(run_name, fallback="run")[:_RUN_NAME_MAX].rstrip("-_.") or "run"
    id_part = sanitize_name_part(run_id, fallback="x")[:_SHORT_ID_LEN].rstrip("-_.") or "x"
    return f"airvisor-{name_part}-{id_part}-{COMPONENT}-{index}"


def container_labels(run_id: str, run_name: str, index: int, restarts: int) -> dict[str, str]:
    return {
        RUN_LABEL: run_id,
        COMPONENT_LABEL: COMPONENT,
        INDEX_LABEL: str(index),
        RUN_NAME_LABEL: run_name,
        RESTARTS_LABEL: str(restarts),
    }


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
) -> ContainerSpec:
    return ContainerSpec(
        name=container_name(run_name, run_id, index),
        image=section.image,
        command=tuple(section.command),
        labels=container_labels(run_id, run_name, index, restarts),
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
