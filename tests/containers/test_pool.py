"""The pool against the real Docker engine, with the locally built test image."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from airvisor.containers import (
    ContainerError,
    ContainerPool,
    judge_orphan_containers,
    reap_orphan_containers,
)
from airvisor.profile._schema import ContainerSection, Mount
from airvisor.runs._manager import new_run_id

pytestmark = pytest.mark.docker

PoolFactory = Callable[..., ContainerPool]


def remove_run_containers(client: docker.DockerClient, run_id: str) -> None:
    for container in containers_of(client, run_id):
        container.remove(force=True)


def containers_of(client: docker.DockerClient, run_id: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"airvisor.run={run_id}"})


def test_pool_comes_up_named_and_labelled_from_the_run(
    make_pool: PoolFactory, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    (tmp_path / "task.txt").write_text("data\n")
    tmp_path.chmod(0o755)  # readable by the container's user
    run_id = f"t{uuid.uuid4().hex}"
    pool = make_pool(
        run_id=run_id, run_name="demo run/1", count=2, cpus=0.5, memory="256m",
        env={"MLGYM_ENV_TIMEOUT": "30"}, network="none",
        mounts=[Mount(source=tmp_path, target="/home/agent/data", read_only=True)],
    )
    pool.preflight()
    statuses = pool.up()

    assert pool.names == [
        f"airvisor-demo-run-1-{run_id}-mlgym-0", f"airvisor-demo-run-1-{run_id}-mlgym-1"]
    assert [(s.name, s.index, s.state, s.health, s.restarts) for s in statuses] == [
        (pool.names[0], 0, "running", "healthy", 0), (pool.names[1], 1, "running", "healthy", 0)]
    for index, name in enumerate(pool.names):
        container = docker_client.containers.get(name)
        assert container.id == statuses[index].container_id
        assert container.labels["airvisor.run"] == run_id
        assert container.labels["airvisor.component"] == "mlgym"
        assert container.labels["airvisor.index"] == str(index)
        assert container.labels["airvisor.run_name"] == "demo run/1"
        config, host = container.attrs["Config"], container.attrs["HostConfig"]
        # MLGym's `docker run -i`: stdin open, no tty, a long-lived login shell.
        assert config["OpenStdin"] is True and config["Tty"] is False
        assert config["Cmd"] == ["/bin/bash", "-l"]
        assert config["User"] == "agent" and config["WorkingDir"] == "/home/agent"
        assert "MLGYM_ENV_TIMEOUT=30" in config["Env"]
        assert host["NetworkMode"] == "none"
        assert host["NanoCpus"] == 500_000_000 and host["Memory"] == 256 << 20
        assert not host.get("DeviceRequests")
        # The mount is there and really read-only.
        # Checked by exit status: docker-py's exec_run now and then returns an exec's output
        # empty (docker/docker-py#2042), its exit code never.
        code, _ = container.exec_run(["grep", "-qx", "data", "/home/agent/data/task.txt"],
                                     user="agent")
        assert code == 0
        code, _ = container.exec_run(["touch", "/home/agent/data/x"], user="root")
        assert code != 0
    assert not pool.check()

    pool.down()
    assert containers_of(docker_client, run_id) == []
    assert [s.state for s in pool.status()] == ["missing", "missing"]


def test_up_adopts_healthy_containers_of_the_same_run(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    run_id = f"t{uuid.uuid4().hex}"
    first = make_pool(run_id=run_id, count=2)
    first.up()
    docker_client.containers.get(first.names[1]).kill()
    assert [e.kind for e in first.check()] == ["container_unhealthy", "container_recreated"]
    before = first.status()
    # A new supervisor process (same run id) comes up after a daemon restart.
    after = make_pool(run_id=run_id, count=2).up()
    assert [s.container_id for s in after] == [s.container_id for s in before]
    assert [s.restarts for s in after] == [0, 1]  # carried on the container's labels
    assert len(containers_of(docker_client, run_id)) == 2


def test_up_replaces_a_container_made_from_another_image(
    make_pool: PoolFactory, docker_client: docker.DockerClient, test_image: str
) -> None:
    run_id = f"t{uuid.uuid4().hex}"
    old_id = make_pool(run_id=run_id).up()[0].container_id
    tag = f"changed-{uuid.uuid4().hex[:8]}"
    docker_client.images.get(test_image).tag("airvisor-test/mlgym", tag)
    try:
        new = make_pool(run_id=run_id, image=f"airvisor-test/mlgym:{tag}").up()[0]
        assert new.container_id != old_id and new.health == "healthy"
        assert [c.id for c in containers_of(docker_client, run_id)] == [new.container_id]
    finally:
        remove_run_containers(docker_client, run_id)
        docker_client.images.remove(f"airvisor-test/mlgym:{tag}")  # the tag only


def first_run_id(client: docker.DockerClient, name: str) -> str:
    return str(client.containers.get(name).labels["airvisor.run"])


def test_down_finds_containers_an_earlier_process_created(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    run_id = f"t{uuid.uuid4().hex}"
    make_pool(run_id=run_id, count=2).up()
    make_pool(run_id=run_id, count=2).down()  # a fresh pool object knows nothing but the run id
    assert containers_of(docker_client, run_id) == []


def test_killed_container_is_recreated(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    pool = make_pool(count=2)
    old_id = pool.up()[0].container_id
    docker_client.containers.get(pool.names[0]).kill()

    events = pool.check()

    assert [(e.kind, e.index) for e in events] == [
        ("container_unhealthy", 0), ("container_recreated", 0)]
    assert "exit code 137" in events[0].reason
    replacement = docker_client.containers.get(pool.names[0])
    assert replacement.id != old_id and replacement.status == "running"
    assert replacement.labels["airvisor.restarts"] == "1"
    status = pool.status()[0]
    assert (status.container_id, status.state, status.health, status.restarts) == (
        replacement.id, "running", "healthy", 1)
    assert pool.status()[1].restarts == 0
    assert not pool.check()


def test_frozen_container_is_recreated(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    pool = make_pool()
    old_id = pool.up()[0].container_id
    docker_client.containers.get(pool.names[0]).pause()

    events = pool.check()

    assert [e.kind for e in events] == ["container_unhealthy", "container_recreated"]
    assert "paused" in events[0].reason
    assert all(c.id != old_id for c in docker_client.containers.list(all=True))
    assert pool.status()[0].health == "healthy"


def test_container_whose_shell_hangs_is_recreated(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    # The health round-trip goes through the user's login shell, as MLGym's `bash -l` does; a
    # profile script that blocks makes that shell hang without the container exiting.
    pool = make_pool(health_command=["/bin/bash", "-lc", "echo ok"], exec_timeout=1.0)
    old_id = pool.up()[0].container_id
    container = docker_client.containers.get(pool.names[0])
    code, _ = container.exec_run(
        ["/bin/sh", "-c", "echo 'sleep 600' > /etc/profile.d/zz-hang.sh"], user="root")
    assert code == 0

    events = pool.check()

    assert [e.kind for e in events] == ["container_unhealthy", "container_recreated"]
    assert "no answer within 1s" in events[0].reason
    replacement = docker_client.containers.get(pool.names[0])
    assert replacement.id != old_id and replacement.status == "running"
    assert pool.status()[0].health == "healthy"
    # The probe stuck in the old container ended when that container was removed.
    deadline = time.monotonic() + 10
    while any(t.name.startswith("airvisor-probe-") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a probe thread outlived its container"
        time.sleep(0.05)


def test_recreate_limit_gives_up_once(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    pool = make_pool(count=2, max_recreates=1)
    pool.up()
    docker_client.containers.get(pool.names[1]).kill()
    assert [e.kind for e in pool.check()] == ["container_unhealthy", "container_recreated"]
    docker_client.containers.get(pool.names[1]).kill()

    events = pool.check()

    assert [(e.kind, e.index) for e in events] == [
        ("container_unhealthy", 1), ("container_gave_up", 1)]
    assert "max_recreates = 1" in events[1].reason
    assert pool.gave_up
    assert [s.health for s in pool.status()] == ["healthy", "gave_up"]
    assert pool.check() == []  # reported once; the engine fails the run


def test_reap_removes_only_containers_of_dead_runs(
    make_pool: PoolFactory, docker_client: docker.DockerClient, stranger: Callable[..., Any]
) -> None:
    crashed = make_pool(count=2)
    crashed.up()
    crashed_ids = {c.id for c in docker_client.containers.list(
        filters={"name": crashed.names[0]})} | {
        c.id for c in docker_client.containers.list(filters={"name": crashed.names[1]})}
    crashed_run = first_run_id(docker_client, crashed.names[0])
    del crashed  # the supervisor died without down()
    live = make_pool()
    live.up()
    live_run = first_run_id(docker_client, live.names[0])
    unlabelled = stranger()
    # Looks like ours but lacks airvisor.run: never touched either.
    half_labelled = stranger(labels={"airvisor.component": "mlgym"})
    # Containers of runs other sessions own on this engine count as live for this test.
    others = {
        c.labels["airvisor.run"]
        for c in docker_client.containers.list(all=True, filters={"label": "airvisor.run"})
    } - {crashed_run}
    assert live_run in others

    listed = reap_orphan_containers(others, dry_run=True, client=docker_client)
    assert {s.container_id for s in listed} == crashed_ids
    assert {s.index for s in listed} == {0, 1}
    assert all(s.health == "orphaned" for s in listed)
    assert len(containers_of(docker_client, crashed_run)) == 2  # a dry run removes nothing

    reaped = reap_orphan_containers(others, dry_run=False, client=docker_client)
    assert {s.container_id for s in reaped} == crashed_ids
    assert containers_of(docker_client, crashed_run) == []
    assert [s.state for s in live.status()] == ["running"]
    for container in (unlabelled, half_labelled):
        container.reload()
        assert container.status == "running"


def test_pool_never_touches_a_stranger_holding_its_name(
    make_pool: PoolFactory, docker_client: docker.DockerClient, stranger: Callable[..., Any]
) -> None:
    pool = make_pool()
    squatter = stranger(name=pool.names[0])
    with pytest.raises(ContainerError, match="not one of run"):
        pool.up()
    events = pool.check()
    assert [e.kind for e in events] == ["container_unhealthy", "container_unhealthy"]
    assert "recreate failed" in events[1].reason
    pool.down()
    squatter.reload()
    assert squatter.status == "running"
    assert not squatter.attrs["ExecIDs"]  # not even probed


def test_missing_image_fails_preflight_clearly(make_pool: PoolFactory) -> None:
    image = f"airvisor-test/missing-{uuid.uuid4().hex[:8]}:latest"
    pool = make_pool(image=image)
    with pytest.raises(ContainerError) as caught:
        pool.preflight()
    message = str(caught.value)
    assert f"image {image} is not present and could not be pulled" in message
    assert "docker load" in message and "[containers] image" in message
    assert "Traceback" not in message


def test_missing_mount_source_fails_preflight(make_pool: PoolFactory, tmp_path: Path) -> None:
    pool = make_pool(mounts=[Mount(source=tmp_path / "nope", target="/data")])
    with pytest.raises(ContainerError, match=r"mounts\[0\]\.source .*nope does not exist"):
        pool.preflight()


def test_unreachable_engine_says_where_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    socket = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    pool = ContainerPool(ContainerSection(), run_id="r", run_name="n", gpus=[])
    with pytest.raises(ContainerError) as caught:
        pool.preflight()
    assert str(caught.value).startswith(
        f"Docker engine not reachable at unix://{socket}: start dockerd / check permissions")
    assert pool.status()[0].state == "unknown"  # status never raises


def test_gpu_device_requests(make_pool: PoolFactory, docker_client: docker.DockerClient) -> None:
    pool = make_pool(count=2, gpus=[6, 7])
    for index, gpu in enumerate(["6", "7"]):
        created = pool.create_only(index)  # created, not started: no GPU runtime here
        assert (created.state, created.gpus, created.index) == ("created", (int(gpu),), index)
        assert created.container_id is not None
        requests = docker_client.containers.get(created.container_id).attrs["HostConfig"][
            "DeviceRequests"]
        assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in requests] == [
            ("nvidia", [gpu], [["gpu"]])]
    assert [s.gpus for s in pool.status()] == [(6,), (7,)]
    pool.down()
    assert [s.state for s in pool.status()] == ["missing", "missing"]


def test_up_without_gpu_runtime_fails_clearly_and_leaves_nothing(
    make_pool: PoolFactory, docker_client: docker.DockerClient
) -> None:
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    run_id = f"t{uuid.uuid4().hex}"
    pool = make_pool(run_id=run_id, gpus=[7])
    with pytest.raises(ContainerError) as caught:
        pool.up()
    message = str(caught.value)
    assert "no NVIDIA GPU runtime" in message and "NVIDIA Container Toolkit" in message
    assert containers_of(docker_client, run_id) == []


def test_check_is_due_after_the_health_interval() -> None:
    now = [100.0]
    pool = ContainerPool(
        ContainerSection(health_interval=15), run_id="r", run_name="n", gpus=[],
        clock=lambda: now[0],
    )
    assert pool.check_due()
    pool._last_check = now[0]
    now[0] += 14.9
    assert not pool.check_due()
    now[0] += 0.1
    assert pool.check_due()


def test_two_state_directories_each_reaper_leaves_the_others_containers_alone(
    make_pool: PoolFactory, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Two airvisors (two state dirs) on one engine, both supervisors gone without down():
    each reaper removes only its own containers and lists the other's as not ours."""
    dir_a, dir_b = str(tmp_path / "state-a"), str(tmp_path / "state-b")
    run_a, run_b = f"t{uuid.uuid4().hex}", f"t{uuid.uuid4().hex}"
    pool_a = make_pool(run_id=run_a, run_name="a", owner=dir_a)
    pool_b = make_pool(run_id=run_b, run_name="b", owner=dir_b)
    # Both supervisors "die" (no down()); make_pool removes whatever is left.
    pool_a.up(attempt=3)
    pool_b.up(attempt=1)
    labels_a = containers_of(docker_client, run_a)[0].labels
    assert labels_a["airvisor.owner"] == dir_a
    assert labels_a["airvisor.attempt"] == "3"
    assert containers_of(docker_client, run_b)[0].labels["airvisor.owner"] == dir_b

    def no_store(state_dir: str) -> frozenset[str] | None:
        return frozenset()  # neither store records a live run

    # A's reaper: A's run is not live (nothing is), B's container is not A's.
    report = judge_orphan_containers(set(), dry_run=False, client=docker_client,
                                     state_dir=dir_a, live_runs_of=no_store)
    assert [j.run_id for j in report.removed] == [run_a]
    left_b = [j for j in report.left if j.run_id == run_b]
    assert len(left_b) == 1 and left_b[0].owner == dir_b
    assert "not ours" in (left_b[0].blocked_by or "")
    assert containers_of(docker_client, run_a) == []
    assert [c.status for c in containers_of(docker_client, run_b)] == ["running"]

    # --all in a dry run would remove B's (its store shows no live run), removes nothing.
    report = judge_orphan_containers(set(), dry_run=True, client=docker_client,
                                     state_dir=dir_a, reap_all=True, live_runs_of=no_store)
    assert run_b in {j.run_id for j in report.removed}
    assert [c.status for c in containers_of(docker_client, run_b)] == ["running"]
    # ... but never while B's store says the run is live, nor when it cannot be read.
    for answer, listed in ((frozenset({run_b}), False), (None, True)):
        report = judge_orphan_containers(
            set(), dry_run=True, client=docker_client, state_dir=dir_a, reap_all=True,
            live_runs_of=lambda _dir, answer=answer: answer)  # type: ignore[misc]
        assert run_b not in {j.run_id for j in report.removed}
        assert (run_b in {j.run_id for j in report.left}) is listed

    # B's reaper removes B's own, and never looks at A's name space.
    assert [s.name for s in reap_orphan_containers(
        set(), dry_run=False, client=docker_client, state_dir=dir_b)] == pool_b.names
    assert containers_of(docker_client, run_b) == []


def test_two_runs_of_one_profile_from_two_state_directories_run_side_by_side(
    make_pool: PoolFactory, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Two airvisors (two users' state dirs) start the same profile (one run name) on one
    engine with run ids as the manager makes them: both come up at once, each under its own
    names, and each one's down() removes only its own containers."""
    ids: set[str] = set()
    while len(ids) < 2:  # two ids of one second may (1 in 65536) draw the same suffix
        ids.add(new_run_id("demo"))
    run_a, run_b = sorted(ids)
    pool_a = make_pool(run_id=run_a, run_name="demo", owner=str(tmp_path / "state-a"))
    pool_b = make_pool(run_id=run_b, run_name="demo", owner=str(tmp_path / "state-b"))
    assert set(pool_a.names).isdisjoint(pool_b.names)
    assert all(name.startswith("airvisor-demo-") for name in pool_a.names + pool_b.names)

    statuses_a, statuses_b = pool_a.up(attempt=1), pool_b.up(attempt=1)
    assert [(s.state, s.health) for s in statuses_a + statuses_b] == [
        ("running", "healthy"), ("running", "healthy")]
    assert [c.name for c in containers_of(docker_client, run_a)] == pool_a.names
    assert [c.name for c in containers_of(docker_client, run_b)] == pool_b.names

    pool_a.down()
    assert containers_of(docker_client, run_a) == []
    assert [c.status for c in containers_of(docker_client, run_b)] == ["running"]
    assert pool_b.check() == []  # still healthy: nothing recreated
    pool_b.down()
    assert containers_of(docker_client, run_b) == []
