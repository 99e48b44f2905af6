"""The pure verdicts: which process facts make a stale candidate, and which never do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.proc._cgroup import CgroupRun, instance_id, parse_run_path
from airvisor.proc._facts import ProcessFacts
from airvisor.proc._marker import Marker
from airvisor.reaper import ReapContext, build_candidates, classify, judge_all, parse_program
from airvisor.reaper._verdict import known_kind, owner_instance

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
    # Programs named like prime-rl's entry points that are no Python interpreter running them:
    ["/opt/venv/bin/inference", "@", "infer.toml"],
    ["/usr/local/bin/orchestrator", "--config", "o.yaml"],
    ["/opt/venv/bin/env-server", "--port", "5000"],
    [],
])
def test_decoys_are_no_known_kind(argv: list[str]) -> None:
    assert known_kind(facts(argv)) is None


# prime-rl's console scripts as pip / uv write them import `main` from these modules
# ([project.scripts] of prime-rl main and v0.4.0).
@pytest.mark.parametrize(("script", "module"), [
    ("rl", "prime_rl.entrypoints.rl"),
    ("sft", "prime_rl.entrypoints.sft"),
    ("inference", "prime_rl.entrypoints.inference"),
    ("trainer", "prime_rl.entrypoints.trainer"),
    ("orchestrator", "prime_rl.entrypoints.orchestrator"),
    ("evals", "prime_rl.entrypoints.evals"),
    ("env-server", "prime_rl.entrypoints.env_server"),
    ("trainer", "prime_rl.trainer.rl.train"),
    ("sft", "prime_rl.trainer.sft.train"),
    ("inference", "prime_rl.inference.server"),
])
def test_prime_rl_entry_points_run_by_python(script: str, module: str) -> None:
    match = known_kind(facts([PY, f"/proj/.venv/bin/{script}", "@", "x.toml"],
                             script_module=module))
    assert match is not None and match[0] == "prime-rl" and module in match[1]


def test_an_entry_point_name_of_another_package_is_no_kind() -> None:
    # Another package's `inference` console script, run by Python: not prime-rl's.
    assert known_kind(facts([PY, "/opt/other/bin/inference", "--port", "1"],
                            script_module="other_pkg.cli")) is None
    # A script that could not be read (or is no console script) proves nothing.
    assert known_kind(facts([PY, "/opt/venv/bin/sft", "@", "x.toml"])) is None
    assert known_kind(facts([PY, "/opt/venv/bin/sft"], script_module="prime_rl_tools.x")) is None


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
    assert classify(facts(["VLLM::Worker"], pid=702, ancestors=(1,),
                          marker=Marker("gone")), context) is not None


def test_zombies_and_unknown_processes_are_never_candidates() -> None:
    assert classify(facts(["VLLM::EngineCore"], status="zombie"), CONTEXT) is None
    assert classify(facts(["sleep", "10"]), CONTEXT) is None


def test_other_users_are_kept_unless_allowed() -> None:
    f = facts(["VLLM::EngineCore"], uid=1000, username="alice", marker=Marker("gone"))
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
    engine = facts(["VLLM::EngineCore"], pid=11, pgid=10, gpu_memory={0: 2**30})
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
    gone = Marker("gone")
    engine = facts(["VLLM::EngineCore"], pid=11, ppid=1, ancestors=(1,), marker=gone)
    worker = facts(["VLLM::Worker"], pid=12, ppid=11, ancestors=(11, 1), session_marker=gone)
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


# --- ownership, not resemblance ----------------------------------------------------------------

OURS = "/var/lib/airvisor"
THEIRS = "/home/colleague/.local/state/airvisor"
OWNED = replace(CONTEXT, own_instance=owner_instance(OURS), profile_ports=frozenset({8000}))


def test_unowned_training_processes_are_left_alone_unless_all() -> None:
    # A colleague's vLLM server on GPU 1, no marker: the profile uses GPU 0.
    colleague = facts(["vllm", "serve", "m", "--port", "9000"], gpu_memory={1: 30 * 2**30},
                      listening_ports=(9000,))
    verdict = classify(colleague, OWNED)
    assert verdict is not None and not verdict.stale
    assert "not ours" in (verdict.blocked_by or "") and "--all" in (verdict.blocked_by or "")
    forced = classify(colleague, replace(OWNED, reap_unowned=True))
    assert forced is not None and forced.stale and "--all" in forced.reason


def test_unowned_training_processes_in_the_profiles_way_are_stale() -> None:
    on_gpu = classify(facts(["VLLM::Worker"], gpu_memory={0: 2**30}), OWNED)
    assert on_gpu is not None and on_gpu.stale and "GPU 0, which the profile needs" in \
        on_gpu.reason
    on_port = classify(facts(["vllm", "serve", "m"], listening_ports=(8000,)), OWNED)
    assert on_port is not None and on_port.stale and "port 8000" in on_port.reason
    # Not a training kind: never stopped, whatever it holds.
    assert classify(facts(["blender"], gpu_memory={0: 2**30}, listening_ports=(8000,)),
                    OWNED) is None


def test_the_run_cgroup_decides_whatever_the_title() -> None:
    ours = owner_instance(OURS)
    dead = CgroupRun(ours, "old-run", 2, "trainer", OURS)
    holder = facts(["holder"], cgroup=f"/airvisor/{ours}/run-old-run/attempt-2/trainer",
                   cgroup_run=dead)
    verdict = classify(holder, OWNED)
    assert verdict is not None and verdict.stale and verdict.kind == "airvisor-run"
    assert "cgroup" in verdict.reason and "old-run" in verdict.reason
    live = replace(holder, cgroup_run=replace(dead, run_id="live-run"))
    assert classify(live, OWNED) is None


def test_two_airvisors_leave_each_others_live_runs_alone() -> None:
    theirs = owner_instance(THEIRS)
    their_live = facts(["VLLM::EngineCore"], marker=Marker("their-run", "inference", THEIRS))
    context = replace(OWNED, foreign_live={theirs: frozenset({"their-run"})})
    # Not live for *us* (our store does not know it), live for its own airvisor.
    assert classify(their_live, context) is None
    dead = classify(their_live, replace(OWNED, foreign_live={theirs: frozenset()},
                                        foreign_known={theirs: frozenset({"their-run"})}))
    assert dead is not None and dead.stale and THEIRS in dead.reason
    unknown = classify(their_live, replace(OWNED, foreign_live={theirs: None}))
    assert unknown is not None and not unknown.stale
    assert "cannot be read" in (unknown.blocked_by or "")
    # Its cgroup says the same without any marker.
    in_cgroup = facts(["holder"], cgroup_run=CgroupRun(theirs, "their-run", 1, "trainer",
                                                       THEIRS))
    assert classify(in_cgroup, context) is None


def test_instance_ids_agree_between_the_proc_and_reaper_sides(tmp_path: Path) -> None:
    # The launcher records the resolved state dir; the reaper hashes what it reads.
    (tmp_path / "state").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "state")
    assert instance_id(tmp_path / "link") == owner_instance(str((tmp_path / "state").resolve()))
    assert owner_instance(OURS) != owner_instance(THEIRS)


def test_processes_in_another_pid_namespace_are_kept() -> None:
    # vLLM as pid 1 of a container: Docker's business, never signalled from the host.
    container = facts(["vllm", "serve", "m"], pid=4242, pid_namespace=777,
                      gpu_memory={0: 2**30})
    verdict = classify(container, replace(OWNED, own_pid_namespace=1))
    assert verdict is not None and not verdict.stale
    assert "PID namespace" in (verdict.blocked_by or "")


def test_uv_launcher_shares_its_entry_points_verdict() -> None:
    uv = facts(["uv", "run", "sft", "@", "x.toml"], pid=40, ppid=1, ancestors=(1,))
    sft = facts([PY, "/proj/.venv/bin/sft", "@", "x.toml"], pid=41, ppid=40,
                ancestors=(40, 1), script_module="prime_rl.entrypoints.sft",
                gpu_memory={0: 2**30})
    judged = judge_all({40: uv, 41: sft}, OWNED)
    assert [j.facts.pid for j in judged.stale] == [40, 41]
    assert "uv launcher of pid 41" in judged.stale[0].verdict.reason
    # Left alone together when the entry point is not ours.
    idle = replace(sft, gpu_memory={})
    judged = judge_all({40: uv, 41: idle}, OWNED)
    assert judged.stale == [] and {j.facts.pid for j in judged.blocked} == {40, 41}


def test_parse_run_path_reads_the_layout() -> None:
    run = parse_run_path("/system.slice/airvisor.service/sv-0123456789ab/run-r1/attempt-3/"
                         "inference", None)
    assert run == CgroupRun("sv-0123456789ab", "r1", 3, "inference", None)
    assert parse_run_path("/user.slice/session-1.scope", None) is None
    assert parse_run_path("/airvisor/sv-0123456789ab/run-r2", None) == \
        CgroupRun("sv-0123456789ab", "r2", None, None, None)


def test_an_unowned_tree_in_the_way_goes_whole_through_its_process_group() -> None:
    # Only vLLM's worker holds GPU 0; its engine core (same process group) goes with it, a
    # colleague's vLLM elsewhere (another group) does not.
    engine = facts(["VLLM::EngineCore"], pid=11, pgid=10)
    worker = facts(["VLLM::Worker"], pid=12, ppid=11, pgid=10, ancestors=(11, 1),
                   gpu_memory={0: 2**30})
    colleague = facts(["VLLM::EngineCore"], pid=21, pgid=20)
    judged = judge_all({f.pid: f for f in (engine, worker, colleague)}, OWNED)
    assert [j.facts.pid for j in judged.stale] == [11, 12]
    assert "process group of pid 12" in judged.stale[0].verdict.reason
    assert [j.facts.pid for j in judged.blocked] == [21]


def test_a_run_its_own_store_does_not_know_is_not_shown_dead() -> None:
    # A marker and cgroup naming a state dir whose store never recorded the run (a test
    # harness's store elsewhere, a wiped state dir): nothing shows it is stale.
    ours = owner_instance(OURS)
    stray = facts(["holder"], cgroup_run=CgroupRun(ours, "elsewhere-run", 1, "trainer", OURS))
    context = replace(OWNED, known_run_ids=frozenset({"old-run"}))
    verdict = classify(stray, context)
    assert verdict is not None and not verdict.stale
    assert "not recorded in the store" in (verdict.blocked_by or "")
    forced = classify(stray, replace(context, reap_unowned=True))
    assert forced is not None and forced.stale and "--all" in forced.reason
    known = classify(replace(stray, cgroup_run=CgroupRun(ours, "old-run", 1, None, OURS)),
                     context)
    assert known is not None and known.stale
    theirs = owner_instance(THEIRS)
    foreign = facts(["holder"], marker=Marker("x-run", "trainer", THEIRS))
    unknown = classify(foreign, replace(OWNED, foreign_live={theirs: frozenset()}))
    assert unknown is not None and not unknown.stale
