"""Progress signals of prime-rl components and the stall (hang) rule."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# loguru output with colours forced on: strip CSI sequences before matching.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# `SUCCESS Step 12 | Time: ...` (trainer and orchestrator alike).
_STEP_LINE = re.compile(r"\bStep (\d+)\s*\|")

MILESTONES = {
    "Starting training loop": "training_loop_started",
    "RL trainer finished!": "trainer_finished",
    "Orchestrator finished.": "orchestrator_finished",
    # prime-rl's `rl` once trainer and orchestrator both exited 0 (v0.4 rl.py:804, main
    # entrypoints/rl.py:403); it then stops the inference server.
    "RL training finished!": "training_finished",
    "Training finished!": "training_finished",
}


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def step_from_log_line(line: str) -> int | None:
    match = _STEP_LINE.search(strip_ansi(line))
    return int(match.group(1)) if match else None


def milestone_from_log_line(line: str) -> str | None:
    clean = strip_ansi(line)
    for text, name in MILESTONES.items():
        if text in clean:
            return name
    return None


def step_from_metrics_row(row: str) -> int | None:
    try:
        data = json.loads(row)
    except ValueError:
        return None  # a row being written right now, or foreign text
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


@dataclass(frozen=True)
class StallRule:
    stall_timeout: float  # seconds without a step advance once steps have started
    first_step_grace: float  # seconds allowed before the first step of an attempt


def stalled_for(rule: StallRule, *, now: float, attempt_started_at: float,
                last_progress_at: float | None) -> float | None:
    """Seconds past the allowed silence, or None when the run is still within its budget."""
    if last_progress_at is None:
        overdue = now - attempt_started_at - rule.first_step_grace
    else:
        overdue = now - last_progress_at - rule.stall_timeout
    return overdue if overdue > 0 else None
