"""The recovery scope (issue 22): a table of facts -> keep the inference server, or restart all."""

from __future__ import annotations

from typing import Any

import pytest

from airvisor.policy._scope import (
    InferenceHealth,
    ScopeRecord,
    decide_scope,
)

HEALTHY = InferenceHealth(tree_alive=True, health_ok=True, models_ok=True)
NOW = 10_000.0
WINDOW = 3600.0

BASE: dict[str, Any] = {
    "failed": "trainer", "mode": "crash", "inference": HEALTHY, "refusals": (),
    "setting": "auto", "recent": (), "now": NOW, "window": WINDOW,
}

CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # (id, facts that differ from BASE, scope, reason)
    ("trainer crash, healthy server", {}, "keep_inference", "kept"),
    ("trainer stall", {"mode": "stall"}, "keep_inference", "kept"),
    ("orchestrator crash", {"failed": "orchestrator"}, "keep_inference", "kept"),
    ("env server crash", {"failed": "env_server"}, "keep_inference", "kept"),
    ("setting all", {"setting": "all"}, "full", "setting_all"),
    ("setting all wins over everything", {"setting": "all", "failed": "inference"},
     "full", "setting_all"),
    ("nccl refused", {"refusals": ("nccl_weight_broadcast: weight_broadcast.type = 'nccl'",)},
     "full", "unsupported"),
    ("slurm refused", {"refusals": ("slurm: the run is submitted to Slurm",)},
     "full", "unsupported"),
    ("inference crashed", {"failed": "inference"}, "full", "inference_failed"),
    ("inference stalled", {"failed": "inference", "mode": "stall"}, "full", "inference_failed"),
    ("launcher died", {"failed": "launcher"}, "full", "component_unknown"),
    ("unknown process", {"failed": "unknown"}, "full", "component_unknown"),
    ("health not probed", {"inference": None}, "full", "health_unknown"),
    ("tree not whole",
     {"inference": InferenceHealth(False, True, True, detail="VLLM::EngineCore is gone")},
     "full", "inference_dead"),
    ("health 503", {"inference": InferenceHealth(True, False, True, detail="HTTP 503")},
     "full", "inference_unhealthy"),
    ("models down", {"inference": InferenceHealth(True, True, False)},
     "full", "inference_unhealthy"),
    ("error in its log",
     {"inference": InferenceHealth(True, True, True, log_error="ERROR EngineDeadError")},
     "full", "inference_log_error"),
    ("engine stuck in a receive: /health answers, /liveness does not",
     {"inference": InferenceHealth(True, True, True, engine_ok=False,
                                   detail="GET /liveness: HTTP 503")},
     "full", "inference_unresponsive"),
    ("kept once within the window",
     {"recent": (ScopeRecord("keep_inference", NOW - 120),)}, "full", "repeated"),
    ("kept once, just inside the window",
     {"recent": (ScopeRecord("keep_inference", NOW - WINDOW),)}, "full", "repeated"),
    ("kept once, outside the window",
     {"recent": (ScopeRecord("keep_inference", NOW - WINDOW - 1),)}, "keep_inference", "kept"),
    ("only full restarts within the window",
     {"recent": (ScopeRecord("full", NOW - 60), ScopeRecord("full", NOW - 30))},
     "keep_inference", "kept"),
    ("two kept allowed per window", {"recent": (ScopeRecord("keep_inference", NOW - 60),),
                                     "kept_per_window": 2}, "keep_inference", "kept"),
]


@pytest.mark.parametrize(("facts", "scope", "reason"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_scope_table(facts: dict[str, Any], scope: str, reason: str) -> None:
    decision = decide_scope(**{**BASE, **facts})
    assert (decision.scope, decision.reason) == (scope, reason), decision.detail
    assert decision.keep_inference == (scope == "keep_inference")
    assert decision.detail


def test_reason_names_what_failed_and_why() -> None:
    decision = decide_scope(**{**BASE, "failed": "orchestrator", "mode": "stall",
                               "refusals": ("slurm: the run is submitted to Slurm",)})
    assert decision.detail.startswith("orchestrator stalled")
    assert "slurm: the run is submitted to Slurm" in decision.detail
    repeated = decide_scope(**{**BASE, "recent": (ScopeRecord("keep_inference", NOW - 120),)})
    assert "120 s after" in repeated.detail
