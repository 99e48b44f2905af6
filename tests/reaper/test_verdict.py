"""The pure verdicts: which process facts make a stale candidate, and which never do."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.proc._facts import ProcessFacts
from airvisor.proc._marker import Marker
from airvisor.reaper import ReapContext, build_candidates, classify, judge_all, parse_program
from airvisor.reaper._verdict import known_kind

ROOT = 0
CONTEXT = ReapContext(live_run_ids=frozenset({"live-run"}), protected_pids=frozenset({100, 99}),
                      own_uid=ROOT, profile_gpus=frozenset({0}), now=1000.0)


def facts(argv: list[str], **overrides: object) -> ProcessFacts:
    base = ProcessFacts(
        pid=500, ppid=1, create_time=900.0, uid=ROOT, username="root", exe="", argv=tuple(argv),
        comm=(argv[0].rsplit("/", 1)[-1] if argv else "")[:15], status="sleeping", pgid=500,
        marker=None, ancestors=(1,),
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


PY = "/opt/venv/bin/python3"


@pytest.mark.parametrize(("argv", "kind"), [
    ([PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm-api-server"),
    ([PY, "/opt/venv/bin/vllm", "serve", "Qwen/Qwen3-8B"], "vllm-api-server"),
    (["vllm", "serve", "/models/tiny", "--port", "8000"], "vllm-api-server"),
    ([PY, "-m", "vllm.entrypoints.cli.main", "serve", "m"], "vllm-api-server"),
    (["VLLM::EngineCore"], "vllm-engine"),
    (["VLLM::Worker_TP0"], "vllm-worker"),
    (["VLLM::DPCoordinator"], "vllm-process"),
    (["/usr/local/bin/vllm-router", "--port", "8000"], "vllm-router"),
    ([PY, "-m", "vllm_router.launch_router"], "vllm-router"),
    ([PY, "/opt/venv/bin/torchrun", "--nproc-per-node=2", "-m", "prime_rl.trainer.rl.train"],
     "torchrun"),
    ([PY, "-u", "-m", "torch.distributed.run", "train.py"], "torchrun"),
    ([PY, "-m", "prime_rl.trainer.rl.train", "@", "t.toml"], "prime-rl"),
    ([PY, "/opt/venv/bin/orchestrator", "@", "orch.toml"], "prime-rl"),
    (["/opt/venv/bin/inference", "@", "infer.toml"], "prime-rl"),
    ([PY, "/opt/venv/bin/rl", "@", "rl.toml"], "prime-rl"),
    (["/opt/venv/bin/env-server", "--port", "5000"], "prime-rl"),
    ([PY, "-m", "airvisor.demo", "orchestrator", "@", "o.toml"], "airvisor-demo"),
    ([PY, "-X", "dev", "-W", "ignore", "-m", "prime_rl.orchestrator.orchestrator"], "prime-rl"),
])
def test_known_kinds(argv: list[str], kind: str) -> None:
    match = known_kind(facts(argv))
    assert match is not None and match[0] == kind


def test_title_is_matched_on_comm_too() -> None:
    # The kernel's comm keeps 15 characters of the title: "VLLM::EngineCor".
    match = known_kind(facts(["python3", "-c", "x"], comm="VLLM::EngineCor"))
    assert match is not None and match[0] == "vllm-engine"


def test_torchrun_worker_by_its_environment() -> None:
    worker = facts([PY, "-u", "train.py", "--lr", "1e-5"], torchelastic_worker=True)
    match = known_kind(worker)
    assert match is not None and match[0] == "torchrun-worker"
    assert known_kind(replace(worker, torchelastic_worker=False)) is None


@pytest.mark.parametrize("argv", [
    ["vim", "orchestrator.py"],
    ["/usr/bin/nvim", "src/prime_rl/orchestrator/orchestrator.py"],
    ["tail", "-f", "outputs/logs/orchestrator.stdout"],
    ["less", "outputs/logs/inference.stdout"],
    ["grep", "-r", "vllm", "."],
    ["/bin/bash"],
    ["bash", "-c", "vllm serve m"],  # a shell that will start vLLM is not vLLM itself
    [PY, "orchestrator.py"],
    [PY, "-c", "import vllm; print(vllm.__version__)"],
    [PY, "-m", "pytest", "tests/test_vllm.py"],
    ["ssh", "host", "torchrun", "train.py"],
    [PY, "-m", "prime_rl_tools"],  # another package whose name merely starts alike
    ["uv", "run", "orchestrator", "@", "o.toml"],  # the uv wrapper; its child is the match
    [],
])
def test_decoys_are_no_known_kind(argv: list[str]) -> None:
    assert known_kind(facts(argv)) is None


def test_a_shell_in_a_directory_named_vllm_is_no_candidate() -> None:
    assert classify(facts(["bash"], cwd="/home/u/vllm", exe="/usr/bin/bash"), CONTEXT) is None


def test_parse_program_peels_the_interpreter() -> None:
    p = parse_program(("/usr/bin/python3.11", "-u", "-X", "importtime", "/v/bin/trainer", "@",
                       "t.toml"))
    assert (p.interpreter, p.name, p.module, p.args) == (True, "trainer", None, ("@", "t.toml"))
    assert parse_program(("python", "-mvllm.entrypoints.api_server")).module == \
        "vllm.entrypoints.api_server"
    assert parse_program(("python",)).name == ""
    assert parse_program(("pythonista", "x")).interpreter is False


def test_marker_of_a_dead_run_makes_any_process_a_candidate() -> None:
    f = facts(["sleep", "100"], marker=Marker("old-run", "trainer"))
    verdict = classify(f, CONTEXT)
    assert verdict is not None and verdict.stale
    assert "old-run" in verdict.reason and "trainer" in verdict.reason


def test_processes_of_live_runs_are_never_candidates() -> None:
    live = Marker("live-run", "inference")
    assert classify(facts(["VLLM::EngineCore"], marker=live), CONTEXT) is None
    # Retitled: no marker of its own, but its session's, or an ancestor's.
    assert classify(facts(["VLLM::EngineCore"], session_marker=live), CONTEXT) is None
    assert classify(facts(["VLLM::Worker"], ancestor_markers=(live,)), CONTEXT) is None


def test_session_marker_of_a_dead_run_is_the_reason() -> None:
    verdict = classify(facts(["VLLM::EngineCore"], session_marker=Marker("gone")), CONTEXT)
    assert verdict is not None and verdict.kind == "vllm-engine"
    assert "session" in verdict.reason and "gone" in verdict.reason


def test_the_caller_and_its_ancestors_are_never_candidates() -> None:
    for pid in (100, 99):
        assert classify(facts([PY, "-m", "airvisor.demo", "trainer"], pid=pid,
                              marker=Marker("old")), CONTEXT) is None


def test_kept_pids_and_their_descendants_are_never_candidates() -> None:
    context = replace(CONTEXT, kept_pids=frozenset({700}))
    assert classify(facts(["VLLM::EngineCore"], pid=700), context) is None
    assert classify(facts(["VLLM::Worker"], pid=701, ancestors=(700, 1)), context) is None
    assert classify(facts(["VLLM::Worker"], pid=702, ancestors=(1,)), context) is not None


def test_zombies_and_unknown_processes_are_never_candidates() -> None:
    assert classify(facts(["VLLM::EngineCore"], status="zombie"), CONTEXT) is None
    assert classify(facts(["sleep", "10"]), CONTEXT) is None


def test_other_users_are_kept_unless_allowed() -> None:
    f = facts(["VLLM::EngineCore"], uid=1000, username="alice")
    verdict = classify(f, CONTEXT)
    assert verdict is not None and not verdict.stale
    assert "alice" in (verdict.blocked_by or "")
    allowed = classify(f, replace(CONTEXT, allow_other_users=True))
    assert allowed is not None and allowed.stale


def test_gpu_memory_on_a_profile_gpu_is_in_the_reason() -> None:
    f = facts(["VLLM::Worker"], gpu_memory={0: 40 * 2**30, 1: 2**30})
    verdict = classify(f, CONTEXT)
    assert verdict is not None
    assert "40.0 GiB on GPU 0" in verdict.reason and "profile uses GPU 0" in verdict.reason


def test_resource_tracker_is_stale_only_with_a_stale_relative() -> None:
    tracker_argv = [PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(7)"]
    engine = facts(["VLLM::EngineCore"], pid=11, pgid=10)
    orphan_tracker = facts(tracker_argv, pid=12, pgid=10)
    lonely_tracker = facts(tracker_argv, pid=22, pgid=20)
    child_tracker = facts(tracker_argv, pid=13, ppid=11, pgid=10, ancestors=(11, 1))
    all_facts = {f.pid: f for f in (engine, orphan_tracker, lonely_tracker, child_tracker)}
    judged = judge_all(all_facts, CONTEXT)
    assert [j.facts.pid for j in judged.stale] == [11, 12, 13]
    assert "stale pid 11" in judged.stale[1].verdict.reason
    # Alone, a resource tracker is nobody's business.
    assert judge_all({22: lonely_tracker}, CONTEXT).stale == []


def test_candidates_form_a_forest() -> None:
    engine = facts(["VLLM::EngineCore"], pid=11, ppid=1, ancestors=(1,))
    worker = facts(["VLLM::Worker"], pid=12, ppid=11, ancestors=(11, 1))
    helper = facts(["bash"], pid=13, ppid=12, ancestors=(12, 11, 1))
    all_facts = {f.pid: f for f in (engine, worker, helper)}
    candidates = build_candidates(judge_all(all_facts, CONTEXT).stale, all_facts, now=1000.0)
    assert [(c.pid, c.depth, c.children) for c in candidates] == [(11, 0, (12,)),
                                                                   (12, 1, (13,))]
    assert candidates[0].age == 100.0


@given(program=st.sampled_from(["vim", "/usr/bin/tail", "grep", "less", "bash", "ssh", "cat"]),
       args=st.lists(st.sampled_from([
           "orchestrator", "trainer", "inference", "rl", "vllm", "serve", "torchrun",
           "VLLM::EngineCore", "-m", "prime_rl.trainer", "airvisor.demo", "-f", "x.py",
       ]) | st.text(max_size=20), max_size=6))
def test_words_in_the_arguments_never_make_a_kind(program: str, args: list[str]) -> None:
    # Whatever the arguments of a program that is no training process say, it is none.
    assert known_kind(facts([program, *args])) is None
