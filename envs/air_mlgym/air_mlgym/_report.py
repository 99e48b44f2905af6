"""Telling the supervisor how each episode ended: one JSON line per finished episode.

An errored rollout (an episode the environment could not serve) reaches prime-rl as an error,
which it leaves out of training; nothing in prime-rl tells a person. airvisor passes a file in
`AIRVISOR_EPISODE_LOG` to every process it starts (the orchestrator or env-server that loads
this environment inherits it) and reads it: a run of errored episodes becomes a warning in the
run's events, and too many in a row stop the run as needing a person (airvisor's
`policy/_rollouts.py` has the contract). Without the variable nothing is written.

Each record is written with one `write` on a descriptor opened with O_APPEND, so lines of
concurrent episodes (threads, processes) never interleave; a record is kept well under a page.
Reporting never fails an episode: a file that cannot be written is logged once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

logger = logging.getLogger(__name__)

EPISODE_LOG_ENV = "AIRVISOR_EPISODE_LOG"
SCHEMA = 1
_ERROR_MAX = 1000  # characters of the reason (the record stays one short write)
_warned: set[str] = set()
_lock = threading.Lock()


def episode_record(
    *, ok: bool, task: str | None, error: str | None, container: str | None,
    episode_id: str | None = None, end_reason: str | None = None,
    agent_failure: str | None = None,
) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "at": time.time(),
        "ok": ok,
        "task": task,
        "error": error[:_ERROR_MAX] if error else None,
        "container": container,
        "episode": episode_id,
        "end_reason": end_reason,
        # an evaluation failed because of the agent (a failure reward, not an error): why
        "agent_failure": agent_failure[:_ERROR_MAX] if agent_failure else None,
        "source": "air_mlgym",
        "pid": os.getpid(),
    }


def report_episode(
    *, ok: bool, task: str | None, error: str | None, container: str | None = None,
    episode_id: str | None = None, end_reason: str | None = None,
    agent_failure: str | None = None,
) -> None:
    """Append the episode's record to `$AIRVISOR_EPISODE_LOG`, if set. Never raises."""
    path = os.environ.get(EPISODE_LOG_ENV)
    if not path:
        return
    record = episode_record(ok=ok, task=task, error=error, container=container,
                            episode_id=episode_id, end_reason=end_reason,
                            agent_failure=agent_failure)
    data = (json.dumps(record, default=str) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        with _lock:
            if path in _warned:
                return
            _warned.add(path)
        logger.warning("air-mlgym: cannot report episodes to %s (%s=%s): %s; the supervisor "
                       "will not see errored rollouts", path, EPISODE_LOG_ENV, path, e)
