"""The pure rules: names, labels, GPU split, memory sizes, create spec, health, recreation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.containers import ContainerError, ContainerStatus, container_gpus, container_name
from airvisor.containers._docker import _split_image
from airvisor.containers._policy import (
    Verdict,
    assess,
    assign_gpus,
    build_spec,
    container_labels,
    decide,
    is_airvisor_container,
    judge_container,
    parse_memory,
)
from airvisor.containers._types import ContainerFacts, ProbeResult
from airvisor.profile._schema import ContainerSection, Mount, Profile
from airvisor.runs._manager import new_run_id

DOCKER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def facts(state: str = "running", **kw: object) -> ContainerFacts:
    values: dict[str, object] = {
        "container_id": "abc", "name": "n", "state": state, "exit_code": None,
        "oom_killed": False, "error": "",
    }
    values.update(kw)
    return ContainerFacts(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("run_name", "run_id", "index", "expected"), [
    # A run id new_run_id made: its start time and random suffix, not its name prefix.
    ("demo", "demo-20261128-112833-3fa9", 2, "airvisor-demo-112833-3fa9-mlgym-2"),
    ("My run/1", "My-run-1-20261128-112833-00b1", 0, "airvisor-My-run-1-112833-00b1-mlgym-0"),
    # Any other run id whole: a prefix of it may be shared by another run.
    ("demo", "0123456789abcdef", 2, "airvisor-demo-0123456789abcdef-mlgym-2"),
    ("demo", "demo-20261128-3fa9", 0, "airvisor-demo-demo-20261128-3fa9-mlgym-0"),
])
def test_name_is_the_run_name_and_the_run_ids_unique_part(
    run_name: str, run_id: str, index: int, expected: str,
) -> None:
    assert container_name(run_name, run_id, index) == expected


def test_runs_of_one_name_get_different_names_from_the_engines_run_ids() -> None:
    """The run ids the manager makes begin with the run name; the names still differ by run."""
    ids: set[str] = set()
    while len(ids) < 2:  # two ids of one second may (1 in 65536) draw the same suffix
        ids.add(new_run_id("demo"))
    first, second = sorted(ids)
    assert container_name("demo", first, 0) != container_name("demo", second, 0)
    assert container_name("demo", first, 0).startswith("airvisor-demo-")


def test_name_replaces_characters_docker_refuses() -> None:
    assert container_name("My run/α 1", "r:1", 0) == "airvisor-My-run-1-r-1-mlgym-0"
    assert container_name("...", "---", 0) == "airvisor-run-x-mlgym-0"


@given(st.text(max_size=80), st.text(max_size=40), st.integers(min_value=0, max_value=999))
def test_names_always_fit_dockers_grammar(run_name: str, run_id: str, index: int) -> None:
    name = container_name(run_name, run_id, index)
    assert DOCKER_NAME.match(name), name
    assert name.endswith(f"-mlgym-{index}")


def test_labels_identify_run_component_and_index() -> None:
    labels = container_labels("rid", "demo", 3, restarts=1)
    assert labels == {
        "airvisor.run": "rid", "airvisor.component": "mlgym", "airvisor.index": "3",
        "airvisor.run_name": "demo", "airvisor.restarts": "1",
    }
    assert is_airvisor_container(labels)
    assert not is_airvisor_container({"airvisor.component": "mlgym"})
    assert not is_airvisor_container({"airvisor.run": "rid", "airvisor.component": "other"})
    assert not is_airvisor_container({})


@pytest.mark.parametrize(
    ("gpus", "count", "expected"),
    [
        ([], 2, [(), ()]),
        ([7], 1, [(7,)]),
        ([6, 7], 1, [(6, 7)]),
        ([4, 5, 6, 7], 2, [(4, 6), (5, 7)]),
        ([7], 3, [(7,), (7,), (7,)]),
        ([6, 7], 3, [(6,), (7,), (6,)]),
    ],
)
def test_gpu_assignment(gpus: list[int], count: int, expected: list[tuple[int, ...]]) -> None:
    assert assign_gpus(gpus, count) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("16g", 16 << 30), ("512m", 512 << 20), ("1.5GiB", 3 << 29), ("8GB", 8 << 30),
     ("104857600", 104857600), ("2 g", 2 << 30)],
)
def test_memory_sizes_in_docker_syntax(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["lots", "16x", "-1g", "", "1k"])
def test_bad_memory_sizes_say_what_to_write(text: str) -> None:
    with pytest.raises(ContainerError, match=r"\[containers\] memory"):
        parse_memory(text)


def test_spec_carries_the_profile_section() -> None:
    section = ContainerSection(
        image="img:1", cpus=1.5, memory="2g", env={"A": "1"}, network="bridge", user="agent",
        workdir="/w", command=["/bin/bash", "-l"],
        mounts=[Mount(source=Path("/data"), target="/home/agent/data")],
    )
    spec = build_spec(section, run_id="rid", run_name="demo", index=1, gpu_ids=(7,), restarts=0)
    assert spec.name == "airvisor-demo-rid-mlgym-1"
    assert spec.nano_cpus == 1_500_000_000
    assert spec.mem_limit == 2 << 30
    assert spec.mounts[0].read_only and spec.mounts[0].source == "/data"
    assert (spec.image, spec.user, spec.working_dir, spec.network_mode) == (
        "img:1", "agent", "/w", "bridge")
    assert spec.command == ("/bin/bash", "-l") and spec.gpu_ids == (7,)
    assert spec.labels["airvisor.index"] == "1"


def test_health_verdicts() -> None:
    assert assess(facts(), ProbeResult(True)).healthy
    assert "missing" in assess(None, None).reason
    killed = assess(facts("exited", exit_code=137), None)
    assert not killed.healthy and "SIGKILL" in killed.reason
    oom = assess(facts("exited", exit_code=137, oom_killed=True), None)
    assert "out-of-memory" in oom.reason and "[containers] memory" in oom.reason
    assert "paused" in assess(facts("paused"), None).reason
    hung = assess(facts(), ProbeResult(False, "no answer within 3s", timed_out=True))
    assert not hung.healthy and "no answer within 3s" in hung.reason


def test_recreate_until_the_limit_then_give_up() -> None:
    sick = Verdict(False, "exited")
    assert decide(Verdict(True), recreates=9, max_recreates=0) == "keep"
    assert decide(sick, recreates=0, max_recreates=2) == "recreate"
    assert decide(sick, recreates=1, max_recreates=2) == "recreate"
    assert decide(sick, recreates=2, max_recreates=2) == "give_up"
    assert decide(sick, recreates=0, max_recreates=0) == "give_up"


def test_status_as_dict() -> None:
    status = ContainerStatus("id", "n", 0, "running", "healthy", 1, (7,))
    assert status.as_dict() == {
        "container_id": "id", "name": "n", "index": 0, "state": "running",
        "health": "healthy", "restarts": 1, "gpus": [7],
    }


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("aigym/mlgym-agent", ("aigym/mlgym-agent", "latest")),
        ("aigym/mlgym-agent:v2", ("aigym/mlgym-agent", "v2")),
        ("localhost:5000/mlgym", ("localhost:5000/mlgym", "latest")),
        ("localhost:5000/mlgym:v1", ("localhost:5000/mlgym", "v1")),
        ("img@sha256:ab", ("img@sha256:ab", None)),
    ],
)
def test_image_reference_split_for_pull(image: str, expected: tuple[str, str | None]) -> None:
    assert _split_image(image) == expected


def test_container_gpus_default_to_the_profiles_gpu_split() -> None:
    base = {"run": {"name": "r", "output_dir": "/tmp/r"},
            "prime_rl": {"version": "main", "args": ["@", "rl.toml"]}}
    split = Profile.model_validate({**base, "gpus": {"containers": [7]}})
    assert container_gpus(split) == [7]
    own = Profile.model_validate({**base, "gpus": {"containers": [7]}, "containers": {"gpus": [5]}})
    assert container_gpus(own) == [5]


OURS, OTHER = "/var/lib/airvisor", "/home/ann/.local/state/airvisor"


def task_labels(run_id: str, owner: str | None) -> dict[str, str]:
    return container_labels(run_id, "r", 0, 0, owner=owner, attempt=2)


@pytest.mark.parametrize(
    ("labels", "live", "foreign_live", "reap_all", "expected"),
    [
        # Ours: removed when the run is not live, not listed while it is.
        (task_labels("dead", OURS), set(), {}, False, ("remove", None)),
        (task_labels("alive", OURS), {"alive"}, {}, False, None),
        # Another airvisor's: not ours, whatever its run; removed only with --all, and only
        # when its own store shows the run is not live.
        (task_labels("x", OTHER), set(), {OTHER: frozenset()}, False, ("leave", "not ours")),
        (task_labels("x", OTHER), {"x"}, {OTHER: frozenset()}, False, ("leave", "not ours")),
        (task_labels("x", OTHER), set(), {OTHER: frozenset()}, True, ("remove", None)),
        (task_labels("x", OTHER), set(), {OTHER: frozenset({"x"})}, True, None),
        (task_labels("x", OTHER), set(), {OTHER: frozenset({"x"})}, False, None),
        (task_labels("x", OTHER), set(), {OTHER: None}, True, ("leave", "cannot be read")),
        (task_labels("x", OTHER), set(), {}, True, ("leave", "cannot be read")),
        # No owner label (an older airvisor's): not ours unless its run is one of our live ones.
        (task_labels("old", None), set(), {}, False, ("leave", "not ours")),
        (task_labels("old", None), set(), {}, True, ("remove", None)),
        (task_labels("old", None), {"old"}, {}, True, None),
        # Not a task container of airvisor's at all: never listed.
        ({"airvisor.run": "x", "airvisor.owner": OURS}, set(), {}, True, None),
        ({"com.example": "1"}, set(), {}, True, None),
    ],
)
def test_orphan_containers_are_judged_by_owner(
    labels: dict[str, str], live: set[str], foreign_live: dict[str, frozenset[str] | None],
    reap_all: bool, expected: tuple[str, str | None] | None,
) -> None:
    verdict = judge_container(labels, own_state_dir=OURS, live_run_ids=live,
                              foreign_live=foreign_live, reap_all=reap_all)
    if expected is None:
        assert verdict is None
        return
    assert verdict is not None
    action, why = expected
    assert verdict.action == action
    if why is None:
        assert verdict.blocked_by is None
    else:
        assert why in (verdict.blocked_by or "")
    assert verdict.owner == labels.get("airvisor.owner")


def test_labels_carry_owner_and_attempt() -> None:
    labels = container_labels("run", "name", 1, 0, owner=OURS, attempt=4)
    assert labels["airvisor.owner"] == OURS
    assert labels["airvisor.attempt"] == "4"
    assert "airvisor.owner" not in container_labels("run", "name", 1, 0)
