"""Containment with real supervisors, in both modes (the run's cgroup; the subreaper fallback
forced by AIRVISOR_CONTAINMENT=subreaper), each scenario in its own PID namespace."""

from __future__ import annotations

from typing import Any


def test_detached_retitled_holders_are_stopped_and_found(scenario: Any,
                                                         containment_env: dict[str, str]
                                                         ) -> None:
    result = scenario("containment", env=containment_env, timeout=240)
    mode = containment_env["AIRVISOR_CONTAINMENT"]
    assert result["mode"] == mode
    # The holder: detached (own session) and retitled, its marker gone.
    assert result["titles"] == {"holder-child": "holder", "holder-grandchild": "holder"}
    assert result["markers_visible"] == []
    assert result["detached"] == ["holder-child", "holder-grandchild"]

    # 1. Stopping the run stops both holders (child of the component, and of its child).
    assert result["stop_alive"] == [], result["stop_report"]
    assert result["stop_report"]["survivors"] == []

    # 2. After the supervisor is SIGKILLed, `processes` still names the run's processes.
    found = result["crash_found"]
    assert all(found[role] for role in ("root", "middle")), found
    # Whatever the holders did to title and session: the cgroup names them, or (fallback) the
    # process tree the supervisor recorded before it died.
    how = "cgroup" if mode == "cgroup" else "recorded in the run's process tree"
    assert all(found[r] and how in found[r] and "r-crash" in found[r]
               for r in ("holder-child", "holder-grandchild")), found
    assert result["crash_alive_after_reap"] == [], result["crash_reap_out"]
    assert result["crash_reap_rc"] == 0, result["crash_reap_out"]
    # A restarted supervisor (same state dir) stops a crashed run's processes: by its cgroup,
    # or (fallback) by the process tree the crashed supervisor recorded.
    assert result["restart_stop_rc"] == 0
    assert result["restart_alive"] == []

    # 3. Two airvisors on different state dirs leave each other's live runs alone.
    everyone = sorted(["root", "middle", "holder-child", "holder-grandchild"])
    for name in ("a", "b"):
        assert result[f"reap_{name}_rc"] == 0
        after = result[f"after_reap_{name}"]
        assert sorted(after["a"]) == everyone and sorted(after["b"]) == everyone, after
    assert result["a_lists_b"] == []
    # Once B's supervisor is dead, B's run is stale for A too (B's own store says so).
    dead_b = result["a_lists_dead_b"]
    assert dead_b["root"] and "not live" in dead_b["root"] and "state-b" in dead_b["root"]
    after = result["after_b_died"]
    assert sorted(after["a"]) == everyone, result["reap_dead_b_out"]
    # In the fallback, B's recorded tree (in B's state dir, named by B's markers) names B's
    # detached holders for A's reaper too.
    assert after["b"] == [], result["reap_dead_b_out"]


def test_a_retitled_child_with_a_fresh_environment_is_found_by_the_recorded_tree(
        scenario: Any) -> None:
    """Subreaper fallback, supervisor SIGKILLed: the component's detached child that replaced
    its environment and retitled itself is found through the tree the supervisor recorded,
    and the reap stops it and the component, and nothing else."""
    result = scenario("retitled_child", env={"AIRVISOR_CONTAINMENT": "subreaper"}, timeout=240)
    assert result["mode"] == "subreaper"
    # The child carries no marker, but a readable environment of its own (as vLLM's engine).
    assert result["child_marker"] is False
    assert "VLLM_HOST_IP=127.0.0.1" in result["child_environ"]
    # Detached from the component: re-parented to the subreaper supervisor, then to init.
    assert result["child_ppid_before"] == result["supervisor"]
    pids = result["pids"]
    child, root, stranger = (str(pids[k]) for k in ("child", "root", "stranger"))
    assert "recorded in the run's process tree" in result["candidates"][child]
    assert "r-retitled" in result["candidates"][child]
    assert "marker" in result["candidates"][root]
    assert stranger not in result["candidates"]
    assert "not started by airvisor" in result["kept"][stranger]
    assert result["reap_rc"] == 0, result["reap_out"]
    assert result["alive"] == {"root": False, "child": False, "stranger": True}, \
        result["reap_out"]
