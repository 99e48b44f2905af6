"""`airvisor check`'s look at the task image a profile names: present in the local engine,
and, for each air_mlgym environment of the prime-rl config, able to serve its episodes
(airvisor.containers._image_check has the rules). Problems name the profile field, the image
and the fix; Docker trouble is a problem too, never a traceback. Nothing is pulled and nothing
is left behind (one throwaway container per environment, removed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airvisor.containers._docker import DockerEngine
from airvisor.containers._image_check import (
    air_mlgym_sources,
    image_problems,
    kernel_freeze_problem,
    needs_of_sources,
    parse_probe,
    probe_argv,
)
from airvisor.containers._types import ContainerError
from airvisor.profile._checks import profile_where
from airvisor.profile._problems import Problem
from airvisor.profile._schema import Profile

PROBE_TIMEOUT = 120.0  # seconds: importing a task's packages (pandas, torch) takes a while
PROBE_LABEL = "airvisor.check"
HOST_CGROUP = Path("/sys/fs/cgroup")  # the kernel freeze's hierarchy (air_mlgym README "Freeze")


def _where(profile: Profile, field: str) -> str:
    if field.startswith("containers."):
        return profile_where(profile, ("containers", field.split(".", 1)[1]))
    # The environment's args live in the prime-rl config the profile names.
    return f"{profile_where(profile, ('prime_rl', 'args'))}: air_mlgym {field}"


def task_image_problems(profile: Profile, config: Mapping[str, Any] | None,
                        engine: DockerEngine | None = None) -> list[Problem]:
    """Everything `check` finds wrong with `[containers] image` (only when containers are
    enabled), given the resolved (or read) prime-rl config."""
    section = profile.containers
    if not section.enabled:
        return []
    image = section.image
    engine = engine or DockerEngine()
    image_where = profile_where(profile, ("containers", "image"))
    try:
        present = engine.image_present(image)
    except ContainerError as error:
        return [Problem(image_where, f"cannot look at task image {image}: {error.message}",
                        "start the Docker engine or give this user access to it")]
    if not present:
        return [Problem(image_where, f"task image {image} is not present in the local Docker "
                        "engine", f"`docker pull {image}` (or `docker load -i` a saved copy "
                        "on a machine without a registry), or set [containers] image to an "
                        "image `docker images` lists")]
    mounts = [(str(m.source), m.target) for m in section.mounts if m.source.exists()]
    problems: list[Problem] = []
    sources = air_mlgym_sources(config or {})
    if sources and section.user not in ("root", "0"):
        problems.append(Problem(
            profile_where(profile, ("containers", "user")),
            f"the task containers' pid 1 would run as {section.user!r}: air_mlgym refuses a "
            "container whose pid 1 the agent owns (it cannot be frozen during an evaluation "
            "nor killed at a reset), so every episode would be an errored rollout",
            'user = "root" with air_mlgym\'s init as command (see the shipped profile '
            "configs/mlgym.toml, or air_mlgym._containers.INIT_COMMAND)"))
    for needs in needs_of_sources(sources):
        host = kernel_freeze_problem(needs, HOST_CGROUP, os.uname().release)
        if host is not None:
            problems.append(Problem(_where(profile, host.field), host.message, host.fix))
        try:
            status, output = engine.run_once(image, probe_argv(needs), mounts=mounts,
                                             labels={PROBE_LABEL: "image-probe"},
                                             timeout=PROBE_TIMEOUT)
        except ContainerError as error:
            problems.append(Problem(image_where, f"cannot run a container of task image "
                                    f"{image} to inspect it: {error.message}",
                                    "check the image runs: `docker run --rm -it "
                                    f"--entrypoint /bin/sh {image}`"))
            continue
        facts = parse_probe(output)
        if status != 0 and facts.uid is None and facts.evaluator is None:
            problems.append(Problem(image_where, f"task image {image} could not be inspected "
                                    f"(exit {status}: {output.strip()[-300:]})",
                                    "the image needs /bin/sh and coreutils (MLGym's image "
                                    "has them)"))
            continue
        for found in image_problems(image, needs, facts):
            problems.append(Problem(_where(profile, found.field), found.message, found.fix))
    return problems
