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
    if mode == "cgroup":
        # The cgroup names the holders too, whatever they did to title and session.
        assert all(found[r] and "cgroup" in found[r] and "r-crash" in found[r]
                   for r in ("holder-child", "holder-grandchild")), found
        assert result["crash_alive_after_reap"] == [], result["crash_reap_out"]
    else:
        # The fallback's known limit: with its supervisor gone, a detached holder whose
        # environment is wiped re-parents to init and nothing names it any more.
        assert found["holder-child"] is None and found["holder-grandchild"] is None
        assert set(result["crash_alive_after_reap"]) == {"holder-child", "holder-grandchild"}
    assert result["crash_reap_rc"] == 0, result["crash_reap_out"]
    # A restarted supervisor (same state dir) stops a crashed run's processes by its cgroup.
    assert result["restart_stop_rc"] == 0
    if mode == "cgroup":
        assert result["restart_alive"] == []
    else:
        assert sorted(result["restart_alive"]) == ["holder-child", "holder-grandchild"]

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
    if mode == "cgroup":
        assert after["b"] == [], result["reap_dead_b_out"]
    else:
        assert sorted(after["b"]) == ["holder-child", "holder-grandchild"]
