"""Reading prime-rl's checkpoint layout from disk."""

from __future__ import annotations

import re
from pathlib import Path

from airvisor.policy import CheckpointHalves

_STEP_DIR = re.compile(r"^step_(\d+)$")


def scan_checkpoints(run_dir: Path) -> dict[int, CheckpointHalves]:
    """`checkpoints/step_N/trainer/.metadata` and `checkpoints/step_N/orchestrator/progress.pt`.

    The trainer half is a torch distributed checkpoint, complete once `.metadata` exists (it is
    written last); the orchestrator half is written to a temporary name and renamed.
    """
    root = run_dir / "checkpoints"
    found: dict[int, CheckpointHalves] = {}
    if not root.is_dir():
        return found
    for entry in root.iterdir():
        match = _STEP_DIR.match(entry.name)
        if not match or not entry.is_dir():
            continue
        found[int(match.group(1))] = CheckpointHalves(
            trainer_complete=(entry / "trainer" / ".metadata").is_file(),
            orchestrator_complete=(entry / "orchestrator" / "progress.pt").is_file(),
        )
    return found
