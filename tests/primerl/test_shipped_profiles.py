"""The shipped profiles for prime-rl main keep the inference server across a trainer crash (issue
30, "Done when"), run as a user runs them: the profile airvisor ships (`airvisor start mlgym`:
the RunManager with that file), prime-rl main's own `rl` launcher and config code from the test
venv (tests/launchers.py: only the GPU programs it starts are the demo's stand-ins), the task
containers on the real Docker engine. Swapped is only what cannot run here: how prime-rl is
reached and where it runs (the profile says EDIT THIS), the GPU counts (this box has none:
`CUDA_VISIBLE_DEVICES` names two), the run's length and pace (max_steps, the stand-ins' step
times, the health probe's interval), the checkpoint size for the disk check, the server's port,
the task image and the MLGym checkout (no registry here: the test image laid out like MLGym's
official one); and the trainer stand-in crashes once. The weight broadcast stays the profile's:
none is set, so prime-rl main's default applies, NCCL with an inference server (configs/rl.py
`auto_setup_weight_broadcast`), and the test reads it back from prime-rl's own resolution.

Which profiles: every shipped profile whose `[prime_rl] version` is "main" is either run here
through a trainer crash (KEPT) or listed with the backend prime-rl's resolution gives it and the
reason that backend states for never keeping the server (REFUSED: the Slurm profile, a job
resubmitted whole). A new shipped main profile fails `test_every_shipped_main_profile_is_covered`
until it is added to one or the other. One run covers the kept case (the only one: mlgym).

(This module supervises marked processes and creates labelled task containers, as tests/box
does; scripts/test.sh runs tests/primerl in its "isolated" group. Another group's reaper leaves
them alone: they name this test's state dir, whose store shows the run live.)

Every wait is for a condition, bounded by BOUND (a bound on a stuck run, never a timing claim).
"""

from __future__ import annotations

import contextlib
import json
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import psutil
import pytest

from airvisor._paths import shipped_profiles
from airvisor.box._supervisor import RunSupervisor
from airvisor.demo._weights import INIT_BROADCASTER, Served, WeightCall, fetch_calls, fetch_served
from airvisor.policy import RunState
from airvisor.primerl import prepare_run
from airvisor.profile import Profile, load_profile
from airvisor.runs import RunManager
from airvisor.slurm import SlurmRunSupervisor
from airvisor.store import Store

from ..box.conftest import Harness, free_port, harness  # noqa: F401  (the fixture, shared)
from ..launchers import launcher_python, missing_launcher, real_launcher

ROOT = Path(__file__).resolve().parents[2]
MLGYM = ROOT.parent / "shared" / "third_party" / "MLGym"
IMAGE = "airvisor-test/mlgym-official:latest"  # tests/images/build_mlgym_official_image.sh
BOUND = 180.0

# Shipped main profiles run through a trainer crash here: (crash step, its resume step by the
# profile's own [ckpt] interval).
KEPT = {"mlgym": (9, 5)}
# Shipped main profiles whose server cannot be kept: prime-rl's resolution gives them the Slurm
# backend (a [slurm] table), which states why (core/_executor.py `_scope_refusals`: a recovery
# resubmits the whole job).
REFUSED = {"slurm": "slurm: the run is a Slurm job"}


def shipped_main_profiles() -> dict[str, Path]:
    shipped = shipped_profiles()
    assert shipped is not None, "no shipped profiles in the package"
    found = {}
    for path in sorted(shipped.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        if data.get("prime_rl", {}).get("version") == "main":
            found[path.stem] = path
    return found


def need_main_launcher() -> None:
    missing = missing_launcher("main")
    if missing is not None:
        pytest.skip(missing)  # a failure in CI (tests/conftest.py)


def test_every_shipped_main_profile_is_covered() -> None:
    found = shipped_main_profiles()
    assert "mlgym" in found  # (the discovery itself reads the shipped files)
    assert set(found) == set(KEPT) | set(REFUSED), (
        "a shipped profile for prime-rl main is neither run through a trainer crash here (KEPT) "
        "nor listed with the reason its server cannot be kept (REFUSED)")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_shipped_main_profile_that_cannot_keep_says_why(name: str, tmp_path: Path) -> None:
    """prime-rl main resolves the shipped profile (as `airvisor check` and `start` do) to its
    default NCCL broadcast, and to a backend that refuses to keep the server, saying why."""
    need_main_launcher()
    profile = load_profile(shipped_main_profiles()[name], {
        "prime_rl.command_prefix": [], "prime_rl.python": [str(launcher_python("main"))],
        "prime_rl.workdir": str(tmp_path)})
    prepared = prepare_run(profile, machine=False)
    assert prepared.ok, prepared.problems
    assert prepared.resolution is not None and prepared.resolution.checked_by_prime_rl
    assert prepared.resolution.components["trainer"]["weight_broadcast"]["type"] == "nccl"
    assert prepared.resolution.components["orchestrator"]["weight_broadcast"]["type"] == "nccl"
    manager = RunManager(Store(tmp_path / "state" / "airvisor.sqlite3"))
    try:
        supervisor = manager._new_supervisor("shipped", prepared.profile)
        assert isinstance(supervisor, SlurmRunSupervisor)
        refusals = supervisor._scope_refusals()
        assert refusals and refusals[0].startswith(REFUSED[name]), refusals
    finally:
        manager.shutdown(stop_runs=False)


def shipped_profile_here(name: str, tmp: Path, crash_at_step: int) -> Profile:
    """The shipped profile with only what cannot run on this box swapped (see the module's
    docstring), and the trainer stand-in's crash."""
    need_main_launcher()
    port = free_port()
    path = shipped_main_profiles()[name]
    # The profile's own environment source, with the MLGym checkout and task image of this box.
    config = tomllib.loads((path.parent / name / "rl.toml").read_text())
    sources = config["orchestrator"]["train"]["source"]
    for source in sources:
        source["env"]["taskset"] |= {"mlgym_path": str(MLGYM), "image": IMAGE}
    return load_profile(path, {
        # What the profile says to edit: how prime-rl is reached, where it runs.
        "prime_rl.command_prefix": [],
        "prime_rl.venv": str(real_launcher(tmp / "prime-rl-main", "main")),
        "prime_rl.workdir": str(tmp),  # the config's relative output_dir lands here
        "prime_rl.env": {"CUDA_VISIBLE_DEVICES": "0,1"},  # this box's GPUs (it has none)
        "prime_rl.overrides": {
            "max_steps": 20,
            "deployment": {"num_infer_gpus": 1, "num_train_gpus": 1},
            "inference": {"server": {"port": port}},
            "orchestrator": {"model": {"client": {"base_url": f"http://localhost:{port}/v1"}},
                             "train": {"source": sources}},
        },
        "containers.image": IMAGE,
        "containers.mounts": [{"source": str(MLGYM), "target": "/opt/MLGym",
                               "read_only": True}],
        "gpus.containers": [],
        "checkpoint.size_gib": 0,
        # The stand-ins' pace and fault (AIRVISOR_DEMO), and no reaping of other tests' runs.
        "run.demo": True,
        "run.on_existing": "replace",
        "demo": {"inference": {"startup_delay": 0.3},
                 "trainer": {"step_time": 0.1, "crash_at_step": crash_at_step, "exit_code": 3},
                 "orchestrator": {"step_time": 0.05}},
        "health.probe_interval": 0.5,
        "reaper.enabled": False,
    })


class Seen:
    """What the test saw while driving the run: the server's weight record (read while it
    runs: it is gone once the run ends), the task containers that ran."""

    def __init__(self) -> None:
        self.calls: list[WeightCall] = []
        self.served: list[Served] = []
        self.containers: set[str] = set()
        self.members: set[str] = set()  # prime-rl's processes, by their titles


def drive(h: Harness, sup: RunSupervisor, what: str, check: Callable[[], Any],
          also: Callable[[], None] = lambda: None) -> Any:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        h.manager.tick(0.1)
        also()
        value = check()
        if value:
            return value
    said = "\n".join(f"{e.kind} {e.component or ''}: {e.message}"
                     for e in h.store.events(sup.run_id))
    raise AssertionError(f"no {what} within {BOUND:g} s (run {sup.state}):\n{said}")


@pytest.fixture(scope="module")
def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine or no {IMAGE} "
                    f"(scripts/setup.d/45-mlgym-official-image.sh): {exc}")
    return client


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(KEPT))
def test_a_shipped_main_profile_keeps_the_server_across_a_trainer_crash(
        name: str, harness: Harness, docker_client: docker.DockerClient) -> None:  # noqa: F811
    crash_at, resume = KEPT[name]
    profile = shipped_profile_here(name, harness.tmp, crash_at)
    record = harness.manager.submit(profile)
    harness.run_ids.append(record.id)
    run_id = record.id
    sup = harness.manager.supervisor(run_id)
    assert isinstance(sup, RunSupervisor)
    port = sup.profile.inference.port
    assert port is not None
    root = f"http://127.0.0.1:{port}"
    seen = Seen()

    def watch() -> None:
        seen.members |= set(sup.members) | set(sup.components)
        seen.containers |= {c.name for c in harness.store.components(run_id)
                            if c.kind == "container" and c.state == "running"}
        if sup.attempt == 2 and not sup.state.terminal:
            # (Once the run ends the server is stopped: the last record read stands.)
            with contextlib.suppress(OSError):
                seen.calls, seen.served = fetch_calls(root), fetch_served(root)

    def attempt_row(number: int) -> dict[str, Any]:
        return next(a for a in harness.store.attempts(run_id) if a["number"] == number)

    def server(number: int) -> tuple[int, float]:
        comp = next(c for c in harness.store.components(run_id, number)
                    if c.name == "inference")
        assert comp.pid is not None and comp.create_time is not None
        return comp.pid, comp.create_time

    drive(harness, sup, "the first attempt running",
          lambda: sup.attempt == 1 and sup.state == RunState.RUNNING, watch)
    first = attempt_row(1)["details"]
    assert first["split"] is True and first["keep_refusals"] == [], first
    # The broadcast is the profile's: prime-rl main's own resolution of it, the halves as
    # prime-rl derived them (the files the first attempt started the server and the rest with).
    attempt_dir = sup.attempt_dir_of(1)
    rest = json.loads((attempt_dir / "rl-rest.json").read_text())
    assert rest["trainer"]["weight_broadcast"]["type"] == "nccl"
    assert rest["orchestrator"]["weight_broadcast"]["type"] == "nccl"
    kept = server(1)

    drive(harness, sup, "the second attempt training past its resume step",
          lambda: sup.attempt == 2 and sup.state == RunState.RUNNING
          and (sup.step or 0) >= resume + 2, watch)
    # The same server process (pid and start time), alive, recorded as attempt 2's member.
    assert server(2) == kept
    assert psutil.Process(kept[0]).create_time() == kept[1]
    failure = harness.events(run_id, "failure")[0]
    assert failure.component == "trainer", failure.message
    second = attempt_row(2)
    assert second["resume_step"] == resume
    details = second["details"]
    assert details["scope"] == "keep_inference" and details["scope_reason"] == "kept", details
    kept_events = harness.events(run_id, "inference_kept")
    assert [e.data["pid"] for e in kept_events] == [kept[0]]
    assert f"inference server kept (pid {kept[0]}" in kept_events[0].message
    started = [e.component for e in harness.events(run_id, "component_started")]
    assert started == ["inference", "launcher", "launcher"]  # no second server

    drive(harness, sup, "the run's end", lambda: sup.state.terminal, watch)
    said = "\n".join(f"{e.kind} {e.component or ''}: {e.message}"
                     for e in harness.store.events(run_id))
    assert sup.state == RunState.SUCCEEDED, said
    assert [a["resume_step"] for a in harness.store.attempts(run_id)] == [None, resume], said
    run = harness.store.get_run(run_id)
    assert run is not None and run.step == 20

    # A new NCCL group: each orchestrator posted /init_broadcaster to the one server, the
    # relaunched one after its attempt began (main orchestrator.py:281-290).
    began = float(second["started_at"])
    groups = [c for c in seen.calls if c.route == INIT_BROADCASTER]
    assert len(groups) == 2, seen.calls
    assert groups[0].client != groups[1].client and groups[1].at >= began, groups
    # The first rollout of the new attempt was generated with the resume step's policy (the
    # kept server held the crashed attempt's newer one until the relaunched orchestrator's
    # startup sync, main orchestrator.py:332-350), and none with a policy newer than what the
    # new attempt's trainer can have made by then (main: v{N} after step N).
    served = [s for s in seen.served if s.at >= began and s.step is not None]
    assert served, "no completion of the new attempt was served"
    assert served[0].weight_step == resume, served[:3]
    assert all(s.step is not None and resume <= s.weight_step <= max(resume, s.step - 1)
               for s in served), served
    # (Which is no accident: the kept server had served a newer policy before the crash.)
    assert max(s.weight_step for s in seen.served if s.at < began) > resume, seen.served

    # main's members by their titles (the env server of the profile's source included), and
    # the task containers, which ran and of which none is left behind.
    assert {"inference", "orchestrator", "env-server", "trainer"} <= seen.members, seen.members
    assert len(seen.containers) >= profile.containers.count
    left = docker_client.containers.list(all=True, filters={"label": f"airvisor.run={run_id}"})
    assert left == []
