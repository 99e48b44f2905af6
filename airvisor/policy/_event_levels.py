"""The log level of each run event, so the journal's priorities mean something:
`journalctl -p warning -u airvisor` lists failures, restarts and give-ups, not every step."""

from __future__ import annotations

import logging

_LEVELS = {
    "failure": logging.WARNING,  # a component died, hung or failed its health check
    "restart_scheduled": logging.WARNING,
    "abandoned": logging.WARNING,
    "stacks": logging.WARNING,  # where each process was when the run hung (airvisor.stacks)
    "machine_condition": logging.WARNING,  # a full or read-only disk: the run waits
    "node_check_failed": logging.WARNING,  # a Slurm node failed the job's GPU check
    "slurm_unreachable": logging.WARNING,  # Slurm did not answer a poll of the job
    "rollout_errors": logging.WARNING,  # the environment could not serve episodes
    "needs_person": logging.ERROR,  # errored rollouts in a row: the run stops for a person
    "gave_up": logging.ERROR,
    "internal_error": logging.ERROR,
}


def event_log_level(kind: str, message: str) -> int:
    if kind == "state" and message == "run failed":
        return logging.ERROR
    return _LEVELS.get(kind, logging.INFO)
