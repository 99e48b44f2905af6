"""prime-rl's run-directory layout, as the stand-ins write and read it.

    <output_dir>/checkpoints/step_N/trainer/          torch DCP shards, `.metadata` written last
    <output_dir>/checkpoints/step_N/orchestrator/progress.pt   written to a temp name, renamed
    <output_dir>/rollouts/step_N/                     the orchestrator's batch for trainer step N
    <output_dir>/broadcasts/step_N/STABLE             the trainer's weights after step N
    <output_dir>/metrics.jsonl                        one JSON row per step per component

The decisions (which steps to prune, which steps exist) are pure functions over listings.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

StepComponent = Literal["trainer", "orchestrator"]

STEP_DIR = re.compile(r"^step_(\d+)$")
TRAINER_MARKER = ".metadata"
TRAINER_SHARD = "__0_0.distcp"
ORCHESTRATOR_FILE = "progress.pt"
BROADCAST_MARKER = "STABLE"
ROLLOUTS_FILE = "rollouts.jsonl"


def checkpoints_dir(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def checkpoint_half(output_dir: Path, step: int, component: StepComponent) -> Path:
    return checkpoints_dir(output_dir) / f"step_{step}" / component


def completion_file(output_dir: Path, step: int, component: StepComponent) -> Path:
    """The file whose existence says this component's half of step N is complete."""
    half = checkpoint_half(output_dir, step, component)
    return half / (TRAINER_MARKER if component == "trainer" else ORCHESTRATOR_FILE)


def rollouts_dir(output_dir: Path, step: int) -> Path:
    return output_dir / "rollouts" / f"step_{step}"


def broadcast_marker(output_dir: Path, step: int) -> Path:
    return output_dir / "broadcasts" / f"step_{step}" / BROADCAST_MARKER


def metrics_file(output_dir: Path) -> Path:
    return output_dir / "metrics.jsonl"


def step_numbers(names: Iterable[str]) -> list[int]:
    """Steps named by `step_N` directory names, ascending; other names are ignored."""
    steps = []
    for name in names:
        match = STEP_DIR.match(name)
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def list_steps(parent: Path) -> list[int]:
    try:
        return step_numbers(entry.name for entry in os.scandir(parent) if entry.is_dir())
    except FileNotFoundError:
        return []


def steps_to_prune(
    own_complete: Iterable[int], own_present: Iterable[int], keep: int | None
) -> list[int]:
    """The steps whose own half to delete: everything older than the `keep` newest complete ones.

    Newer incomplete halves are never touched (they may be in the middle of being written).
    """
    if keep is None:
        return []
    complete = sorted(set(own_complete), reverse=True)
    if len(complete) <= keep:
        return []
    oldest_kept = complete[keep - 1]
    return sorted(step for step in set(own_present) if step < oldest_kept)


def resolve_resume_step(requested: int, present_steps: Iterable[int]) -> int | None:
    """prime-rl's `-1`: the highest `step_*` name, complete or not (that is its known flaw)."""
    if requested != -1:
        return requested
    steps = sorted(present_steps)
    return steps[-1] if steps else None


# ---------------------------------------------------------------------------------------------
# Writers (I/O)


def write_trainer_half(output_dir: Path, step: int, *, complete: bool, world_size: int) -> Path:
    """Shards first, `.metadata` last: a crash in between leaves an incomplete half."""
    half = checkpoint_half(output_dir, step, "trainer")
    half.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        (half / f"__{rank}_0.distcp").write_bytes(
            json.dumps({"step": step, "rank": rank, "demo": True}).encode()
        )
    if complete:
        (half / TRAINER_MARKER).write_bytes(json.dumps({"step": step, "demo": True}).encode())
    return half


def write_orchestrator_half(output_dir: Path, step: int, *, complete: bool) -> Path:
    """`progress.pt` goes to a temporary name and is renamed into place, as prime-rl does."""
    half = checkpoint_half(output_dir, step, "orchestrator")
    half.mkdir(parents=True, exist_ok=True)
    temporary = half / f".{ORCHESTRATOR_FILE}.tmp"
    temporary.write_bytes(json.dumps({"step": step, "demo": True}).encode())
    if complete:
        os.replace(temporary, half / ORCHESTRATOR_FILE)
    return half


def prune_checkpoints(output_dir: Path, component: StepComponent, keep: int | None) -> list[int]:
    """Delete this component's halves older than its `keep` newest complete ones."""
    present = [
        s
        for s in list_steps(checkpoints_dir(output_dir))
        if checkpoint_half(output_dir, s, component).is_dir()
    ]
    complete = [s for s in present if completion_file(output_dir, s, component).exists()]
    pruned = steps_to_prune(complete, present, keep)
    for step in pruned:
        shutil.rmtree(checkpoint_half(output_dir, step, component), ignore_errors=True)
        # The peer's half may still be there; then the step directory stays.
        with contextlib.suppress(OSError):
            (checkpoints_dir(output_dir) / f"step_{step}").rmdir()
    return pruned


def remove_steps_after(parent: Path, step: int) -> None:
    """Drop this component's stale outputs of steps after the one it starts from."""
    for stale in list_steps(parent):
        if stale > step:
            shutil.rmtree(parent / f"step_{stale}", ignore_errors=True)


def publish_dir_atomically(target: Path, files: Mapping[str, bytes]) -> None:
    """Write files into a temporary sibling directory and rename it to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    for name, data in files.items():
        (temporary / name).write_bytes(data)
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    os.replace(temporary, target)


def append_metrics(output_dir: Path, row: Mapping[str, Any]) -> None:
    """One line per call in a single O_APPEND write, so two components never interleave."""
    line = (json.dumps(dict(row), separators=(",", ":")) + "\n").encode()
    fd = os.open(metrics_file(output_dir), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def wait_for_file(path: Path, *, poll: float) -> None:
    """Block until `path` exists (a signal handler that raises ends the wait)."""
    while not path.exists():
        time.sleep(poll)
