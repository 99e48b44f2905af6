"""The image check's pure parts: which air_mlgym sources a prime-rl config has, what the probe's
lines say, and the problem (with its fix) for each thing missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.containers._image_check import (
    ImageFacts,
    TaskData,
    TaskNeeds,
    air_mlgym_sources,
    image_problems,
    kernel_freeze_problem,
    needs_of,
    parse_probe,
)

CHECKOUT = Path(__file__).resolve().parents[1] / "fixtures" / "mlgym"


def test_sources_of_both_prime_rl_versions() -> None:
    v04 = {"orchestrator": {"env": [{"id": "air-mlgym", "args": {"task": "titanic"}},
                                    {"id": "reverse-text", "args": {}}]}}
    main = {"orchestrator": {"train": {"source": [
        {"name": "a", "env": {"taskset": {"id": "air_mlgym", "tasks": ["blotto"]}}},
        {"name": "b", "env": {"taskset": {"id": "air_mlgym", "tasks": ["blotto"]}}}]}}}
    assert air_mlgym_sources(v04) == [{"task": "titanic"}]
    assert air_mlgym_sources(main) == [{"tasks": ["blotto"]}]  # the same args once
    assert air_mlgym_sources({"orchestrator": {"env": [{"id": "other"}]}}) == []


def test_needs_from_the_args_and_the_checkout() -> None:
    needs = needs_of({"mlgym_path": str(CHECKOUT), "tasks": ["battleOfSexes", "titanic", "nope"],
                      "mlgym_mount": "/opt/MLGym", "conda_env": "mine"})
    assert needs.python_envs == ("/home/agent/miniconda3/envs/mine", "/home/agent/miniconda3")
    # the evaluation's imports, its own modules (strategy, target) left out
    assert needs.imports["json"] == ("battleOfSexes", "titanic")
    assert "strategy" not in needs.imports and "target" not in needs.imports
    [data] = needs.data
    assert (data.task, data.data_path, data.on_host) == ("titanic", "data/titanic", True)
    assert needs.data_in_container(data) == "/opt/MLGym/data/titanic"
    assert needs.problems == (f"task 'nope' is not in {CHECKOUT / 'configs' / 'tasks'}",)
    assert needs_of({"python_env": "/e", "admin_python": "/usr/bin/python3"}).python_envs == ("/e",)


def test_probe_lines() -> None:
    facts = parse_probe("user-uid 999\nevaluator snapshot /h/env/bin/python3\nimport-ok json\n"
                        "import-missing numpy ModuleNotFoundError: No module named 'numpy'\n"
                        "data-missing /opt/MLGym/data/titanic\nnoise\n")
    assert facts.uid == 999 and facts.evaluator == "/h/env/bin/python3"
    assert facts.evaluator_kind == "snapshot" and facts.imported == {"json"}
    assert facts.missing_imports == {"numpy": "ModuleNotFoundError: No module named 'numpy'"}
    assert facts.data_missing == {"/opt/MLGym/data/titanic"}
    assert parse_probe("user-missing\nevaluator none\n") == ImageFacts(
        raw="user-missing\nevaluator none\n")


NEEDS = TaskNeeds(python_envs=("/home/agent/miniconda3",), mlgym_path="/m", mlgym_mount="/o",
                  imports={"numpy": ("blotto",)},
                  data=(TaskData("titanic", "/m/configs/datasets/titanic.yaml", "data/t", True),))
GOOD = ImageFacts(uid=999, evaluator="/usr/bin/python3", evaluator_kind="system",
                  imported=frozenset({"numpy"}))


@pytest.mark.parametrize(("needs", "facts", "expected"), [
    (NEEDS, GOOD, []),
    (NEEDS, ImageFacts(evaluator="/usr/bin/python3"),
     [("containers.image", "image I has no user 'agent'")]),
    (NEEDS, ImageFacts(uid=1), [("containers.image", "image I has no Python to evaluate with: "
                                 "no agent environment (/home/agent/miniconda3) and no "
                                 "/usr/bin/python3")]),
    (NEEDS, ImageFacts(uid=1, untrusted="/usr/bin/python3.11 is owned by uid 999 with mode 755"),
     [("containers.image", "and /usr/bin/python3 is not root's alone (/usr/bin/python3.11 is "
                           "owned by uid 999 with mode 755)")]),
    (TaskNeeds(admin_python="/opt/py"), ImageFacts(uid=1, explicit_missing="/opt/py"),
     [("containers.image", "the env arg admin_python names an interpreter, and it has no "
                           "/opt/py")]),
    (NEEDS, ImageFacts(uid=1, evaluator="/usr/bin/python3", evaluator_kind="system",
                       missing_imports={"numpy": "ModuleNotFoundError: x"}),
     [("containers.image", "the evaluator /usr/bin/python3 cannot import numpy, which the "
                           "evaluation of blotto imports (numpy: ModuleNotFoundError: x)")]),
    (NEEDS, ImageFacts(uid=1, evaluator="/p", data_missing=frozenset({"/o/data/t"})),
     [("containers.mounts", "task titanic's dataset is not at /o/data/t in the containers of "
                            "image I (the env arg mlgym_mount = /o says")]),
    (TaskNeeds(mlgym_path="/m", data=(TaskData("titanic", "/m/d.yaml", "data/t", False),)),
     GOOD, [("env arg mlgym_path", "task titanic's dataset data/t (/m/d.yaml: data_path) is not "
                                   "in the MLGym checkout /m")]),
])
def test_problems(needs: TaskNeeds, facts: ImageFacts, expected: list[tuple[str, str]]) -> None:
    found = image_problems("I", needs, facts)
    assert len(found) == len(expected), found
    for problem, (field, text) in zip(found, expected, strict=True):
        assert problem.field == field and text in problem.message, problem
        assert problem.fix


@pytest.mark.parametrize(("layout", "release", "freeze", "said"), [
    ("v2", "6.8.0-45-generic", "kernel", None),
    ("hybrid", "6.18.44-fc-v857", "kernel", None),  # this machine's: v1 beside a v2 part
    ("v1", "6.8.0", "kernel", "has none (cgroup v1 only)"),
    ("v2", "5.10.0-28-amd64", "kernel", "this host runs Linux 5.10.0-28-amd64"),
    ("v2", "5.14.0", "kernel", None),
    ("v2", "unreadable", "kernel", None),  # the environment's own probe says
    ("v1", "4.19.0", "auto", None),  # auto falls back to signals: nothing to refuse
    ("v1", "4.19.0", "signals", None),
])
def test_freeze_kernel_on_a_host_without_it(tmp_path: Path, layout: str, release: str,
                                            freeze: str, said: str | None) -> None:
    """`freeze = "kernel"` needs a cgroup v2 hierarchy and cgroup.kill (Linux 5.14): a host
    without them is a problem at `airvisor check`, on the env arg, with the fix."""
    root = tmp_path / "cgroup"
    (root / "freezer").mkdir(parents=True)  # a v1 controller's hierarchy: always there
    if layout == "v2":
        (root / "cgroup.controllers").write_text("cpu memory pids\n")
    if layout == "hybrid":
        (root / "unified").mkdir()
        (root / "unified" / "cgroup.controllers").write_text("\n")
    found = kernel_freeze_problem(needs_of({"freeze": freeze}), root, release)
    if said is None:
        assert found is None
    else:
        assert found is not None and found.field == "freeze" and said in found.message
        assert 'freeze = "auto"' in found.fix
