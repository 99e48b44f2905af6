"""Recovery scope (issue 22): keep the inference server, or restart everything.

Most failures of a run are in the trainer or the orchestrator; restarting a healthy inference
server costs a model load, CUDA graph capture and compilation (minutes for a large model) and
buys nothing: prime-rl's orchestrator puts the server on the resumed step's weights itself when
it starts. So a recovery keeps the server when, and only when, all of these hold:

- `restart.scope` is "auto" (the default; "all" opts out);
- the run's prime-rl version and settings allow the split (no refusal from
  `airvisor.primerl._split`: not NIXL weight broadcast, not multi-node/disaggregated, not Slurm);
- what failed is the trainer, the orchestrator or an env server, not the server itself, nor
  something airvisor cannot place (the launcher, an unknown process);
- the server is healthy now: its process tree alive, `/health` and `/v1/models` answering, its
  engine answering in time (prime-rl main's `/liveness`, v0.4 a one-token completion: a worker
  stuck in a weight receive from the dead trainer answers neither), and no error in its log
  since the failure;
- no earlier kept-scope recovery within `window` seconds: when keeping the server did not cure
  the run, the next recovery restarts everything (the server may be what is wrong after all).

Pure: the caller passes the facts (health probed by
`airvisor.box._probe.probe_kept_server`) and the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scope = Literal["keep_inference", "full"]
ScopeSetting = Literal["auto", "all"]
SCOPE_SETTINGS: tuple[ScopeSetting, ...] = ("auto", "all")
FailedComponent = Literal["trainer", "orchestrator", "env_server", "inference", "launcher",
                          "unknown"]
FailureMode = Literal["crash", "stall"]
ScopeReason = Literal[
    "kept",  # keep-inference: every condition holds
    "setting_all",  # restart.scope = "all"
    "unsupported",  # the version or the settings do not allow the split
    "inference_failed",  # the server itself crashed or stalled
    "component_unknown",  # the launcher or an unplaced process failed
    "health_unknown",  # the server's health was not probed
    "inference_dead",  # its process tree is gone (in part)
    "inference_unhealthy",  # /health or /v1/models does not answer 200
    "inference_unresponsive",  # its engine does not answer in time (stuck in a collective)
    "inference_log_error",  # an error in its log since the failure
    "repeated",  # a kept-scope recovery within the window did not cure the run
    "probing",  # not settled yet: the rest stops while the server's health is probed
]
# What can be relaunched without the server (prime-rl's `rl` without [inference] starts them).
KEEPABLE: frozenset[str] = frozenset({"trainer", "orchestrator", "env_server"})


@dataclass(frozen=True)
class InferenceHealth:
    """The kept server's health after the failure (`airvisor.box._probe.probe_kept_server`)."""

    tree_alive: bool  # every recorded process of its tree still runs (pid + start time)
    health_ok: bool  # GET /health answered 200
    models_ok: bool  # GET /v1/models answered 200
    log_error: str | None = None  # the first error line in its log since the failure
    detail: str = ""  # what failed, for the reason
    # Its engine answered within the probe's timeout (main GET /liveness; v0.4 a one-token
    # completion). Always set by the probe; the default only spares table tests of other rules.
    engine_ok: bool = True

    @property
    def healthy(self) -> bool:
        return (self.tree_alive and self.health_ok and self.models_ok and self.engine_ok
                and self.log_error is None)


@dataclass(frozen=True)
class ScopeRecord:
    """An earlier recovery: its scope and when (wall-clock seconds) it was decided."""

    scope: Scope
    at: float


@dataclass(frozen=True)
class ScopeDecision:
    scope: Scope
    reason: ScopeReason
    detail: str

    @property
    def keep_inference(self) -> bool:
        return self.scope == "keep_inference"

    @property
    def settled(self) -> bool:
        """Decided on the server's health (or without needing it); False while it is probed."""
        return self.reason != "probing"


def probing(unknown: ScopeDecision) -> ScopeDecision:
    """The scope while the kept server's health is probed (`unknown`: `decide_scope` without
    it, "health_unknown"). The rest must stop in either scope, so its stop begins at once (a
    death is acted on within milliseconds, not after the probe's HTTP round trips); the server
    is spared until the probe settles the scope: kept if healthy, stopped too if not."""
    detail = unknown.detail.removesuffix("; the inference server's health is unknown")
    return ScopeDecision("keep_inference", "probing",
                         f"{detail}; the rest is stopped at once while the inference server's "
                         "health is probed: it is kept only if healthy")


def resumed_scope(restored: ScopeDecision | None, *, server_alive: bool, can_probe: bool,
                  unprobed: ScopeDecision) -> ScopeDecision | None:
    """The scope of a recovery a new daemon takes over in the middle of its stop: the one the
    last daemon decided (`restored`, persisted with its run machine), so the takeover leads to
    the outcome the run would have had without the daemon's death, except where the new
    daemon cannot keep to it:

    - none restored (an older airvisor's run, a recovery whose scope was never decided: an
      operator's restart, a resume): None, everything restarts, as before;
    - a full scope: the same, with its reason;
    - a kept server (settled): kept while it runs (`server_alive`: its recorded process, by
      pid and start time); gone, there is nothing to keep: full, and only then;
    - still probing (the last daemon's probe died with it): probed again when the server can
      be (`can_probe`: it runs and has a port), the rest's stop beginning at once as on a live
      failure; else `unprobed` (`decide_scope` without its health, as a live failure whose
      server cannot be probed: full, its health unknown).
    """
    if restored is None or not restored.keep_inference:
        return restored
    if restored.settled:
        if server_alive:
            return restored
        return _full("inference_dead", f"{restored.detail}; the kept inference server was gone "
                                       "when a new daemon took the recovery over")
    return restored if can_probe else unprobed


def _full(reason: ScopeReason, detail: str) -> ScopeDecision:
    return ScopeDecision("full", reason, detail)


def decide_scope(
    *,
    failed: FailedComponent,
    mode: FailureMode,
    inference: InferenceHealth | None,
    refusals: Sequence[str],
    setting: ScopeSetting,
    recent: Sequence[ScopeRecord],
    now: float,
    window: float,
    kept_per_window: int = 1,
) -> ScopeDecision:
    """The scope of the recovery from one failure; the first rule that says "full" wins.

    `refusals`: why the split cannot be faithful for this run (`str()` of each
    `primerl._split.Refusal`; empty when the version supports it). `recent`: the run's earlier
    recoveries (any order). `kept_per_window`: kept-scope recoveries allowed within `window`
    seconds before a failure escalates to a full restart.
    """
    what = f"{failed.replace('_', ' ')} {'crashed' if mode == 'crash' else 'stalled'}"
    if setting == "all":
        return _full("setting_all", f'{what}; restart.scope = "all": every recovery restarts '
                                    "everything")
    if refusals:
        return _full("unsupported", f"{what}; the inference server cannot be kept for this run: "
                                    + "; ".join(refusals))
    if failed == "inference":
        return _full("inference_failed", f"{what}: the server itself is restarted")
    if failed not in KEEPABLE:
        return _full("component_unknown", f"{what}: not the trainer, orchestrator or an env "
                                          "server, so nothing smaller than the run is known "
                                          "to be at fault")
    if inference is None:
        return _full("health_unknown", f"{what}; the inference server's health is unknown")
    if not inference.tree_alive:
        return _full("inference_dead", f"{what}; the inference server's process tree is not "
                                       f"whole{_colon(inference.detail)}")
    if not (inference.health_ok and inference.models_ok):
        return _full("inference_unhealthy", f"{what}; the inference server does not answer"
                                            f"{_colon(inference.detail)}")
    if not inference.engine_ok:
        return _full("inference_unresponsive", f"{what}; the inference server's engine does not "
                                               f"answer in time, so it is not kept"
                                               f"{_colon(inference.detail)}")
    if inference.log_error is not None:
        return _full("inference_log_error", f"{what}; the inference server logged an error "
                                            f"since: {inference.log_error}")
    kept = sorted(r.at for r in recent if r.scope == "keep_inference" and now - r.at <= window)
    if len(kept) >= kept_per_window:
        return _full("repeated", f"{what} again {now - kept[-1]:.0f} s after a recovery that "
                                 f"kept the inference server (within restart.window = "
                                 f"{window:g} s): everything is restarted")
    return ScopeDecision("keep_inference", "kept",
                         f"{what}; the inference server is healthy and is kept: only the rest "
                         "(prime-rl's rl without [inference], or v0.4's trainer and "
                         "orchestrator in component mode) is relaunched")


def _colon(detail: str) -> str:
    return f": {detail}" if detail else ""
