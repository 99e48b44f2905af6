"""prime-rl's log vocabulary: the lines airvisor reads progress and failures from.

Step lines and milestones are what the trainer, orchestrator and `rl` print (both versions
alike); the launcher's failure line names the child that failed first. Every supervisor (the
box, Slurm, takeover, the run page) reads logs through these functions only.
"""

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
# The component whose own "finished" line says its part of training is done.
FINISH_MILESTONES = {"trainer": "trainer_finished", "orchestrator": "orchestrator_finished"}
TRAINING_FINISHED = "training_finished"

# prime-rl's launchers name the child that failed first: v0.4 rl.py:539-552,782 and main's
# utils/process.py monitor_process: f"{process_name.capitalize()} failed with exit code {code}".
_CHILD_FAILED = re.compile(r"\b(Inference|Trainer|Orchestrator|Teacher_inference|Env[-_ ]server\S*)"
                           r" failed with exit code (-?\d+)")


@dataclass(frozen=True)
class ChildFailure:
    """The launcher's line naming the child that failed first."""

    component: str  # "inference", "trainer", "orchestrator", "teacher-inference", "env-server.."
    code: str

    def describe(self) -> str:
        return f"{self.component} exited with status {self.code}"


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


def child_failure_from_line(line: str) -> ChildFailure | None:
    match = _CHILD_FAILED.search(strip_ansi(line))
    if match is None:
        return None
    return ChildFailure(match.group(1).lower().replace("_", "-"), match.group(2))


def step_from_metrics_row(row: str) -> int | None:
    try:
        data = json.loads(row)
    except ValueError:
        return None  # a row being written right now, or foreign text
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
