"""Pure decisions: no I/O, no clock reads; callers pass the facts and the time."""

from airvisor.policy._backoff import (
    COUNTED_KINDS,
    GiveUp,
    Restart,
    RestartKind,
    RestartPolicy,
    backoff_delay,
    decide_restart,
)
from airvisor.policy._progress import (
    ComponentProgress,
    StalledComponent,
    StallRule,
    stall_message,
    stalled_component,
    stalled_for,
)
from airvisor.policy._resume import CheckpointHalves, ResumeChoice, choose_resume_step
from airvisor.policy._runmachine import RunMachine, transition
from airvisor.policy._state import (
    LIVE,
    STOP_TARGET,
    TERMINAL,
    InvalidTransition,
    Phase,
    RunState,
    advance,
    edges,
    phase_of_record,
)
from airvisor.policy._stop import StopDecision, StopRoute, decide_stop_route
from airvisor.policy._takeover import BootAction, decide_takeover
from airvisor.policy._transition import Failure, phase_transition

__all__ = [
    "COUNTED_KINDS",
    "LIVE",
    "STOP_TARGET",
    "TERMINAL",
    "BootAction",
    "CheckpointHalves",
    "ComponentProgress",
    "Failure",
    "GiveUp",
    "InvalidTransition",
    "Phase",
    "Restart",
    "RestartKind",
    "RestartPolicy",
    "ResumeChoice",
    "RunMachine",
    "RunState",
    "StallRule",
    "StalledComponent",
    "StopDecision",
    "StopRoute",
    "advance",
    "backoff_delay",
    "choose_resume_step",
    "decide_restart",
    "decide_stop_route",
    "decide_takeover",
    "edges",
    "phase_of_record",
    "phase_transition",
    "stall_message",
    "stalled_component",
    "stalled_for",
    "transition",
]
