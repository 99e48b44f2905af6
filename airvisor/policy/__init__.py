"""Pure decisions: no I/O, no clock reads; callers pass the facts and the time."""

from airvisor.policy._backoff import GiveUp, Restart, RestartPolicy, decide_restart
from airvisor.policy._progress import (
    StallRule,
    milestone_from_log_line,
    stalled_for,
    step_from_log_line,
    step_from_metrics_row,
    strip_ansi,
)
from airvisor.policy._resume import CheckpointHalves, ResumeChoice, choose_resume_step
from airvisor.policy._state import TERMINAL, InvalidTransition, RunState, transition

__all__ = [
    "TERMINAL",
    "CheckpointHalves",
    "GiveUp",
    "InvalidTransition",
    "Restart",
    "RestartPolicy",
    "ResumeChoice",
    "RunState",
    "StallRule",
    "choose_resume_step",
    "decide_restart",
    "milestone_from_log_line",
    "stalled_for",
    "step_from_log_line",
    "step_from_metrics_row",
    "strip_ansi",
    "transition",
]
