"""Where the trainer and orchestrator stand-ins write, per prime-rl version, and how.

Paths follow each version's code (the cited table is `airvisor/primerl/_layout.py`):

    v0.4  trainer (output_dir O)       O/checkpoints/step_N/trainer/{__R_0.distcp, .metadata}
                                       reads O/run_default/rollouts, writes O/run_default/broadcasts
          orchestrator (O/run_default) checkpoints/step_N/orchestrator/progress.pt (in place), then
                                       buffer/{easy_examples,hard_examples,rollout_buffer}.jsonl
                                       rollouts/step_N/, broadcasts/step_N/STABLE (the trainer's)
                                       no metrics.jsonl
    main  both (output_dir = run_dir)  checkpoints/step_N/trainer (ckpt.output_dir if set),
                                       checkpoints/step_N/orchestrator/progress.pt (temp + rename),
                                       rollouts/, broadcasts/, metrics.jsonl

The decisions (which steps keep_last deletes, which steps exist) are pure functions over listings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

StepComponent = Literal["trainer", "orchestrator"]
DemoVersion = Literal["0.4", "main"]
DEFAULT_VERSION: DemoVersion = "main"  # component mode without --prime-rl: one shared run dir

STEP_DIR = re.compile(r"^step_(\d+)$")
TRAINER_MARKER = ".metadata"
ORCHESTRATOR_FILE = "progress.pt"
V04_BUFFER_FILES = ("easy_examples.jsonl", "hard_examples.jsonl", "rollout_buffer.jsonl")
BROADCAST_MARKER = "STABLE"
ROLLOUTS_FILE = "rollouts.jsonl"
V04_ORCHESTRATOR_DIR = "run_default"


@dataclass(frozen=True)
class StepPaths:
    """What one trainer or orchestrator process reads and writes."""

    version: DemoVersion
    ckpt_dir: Path  # the `checkpoints` directory holding this component's halves
    rollouts: Path
    broadcasts: Path
    metrics: Path | None

    def half(self, step: int, component: StepComponent) -> Path:
        return self.ckpt_dir / f"step_{step}" / component

    def completion_file(self, step: int, component: StepComponent) -> Path:
        marker = TRAINER_MARKER if component == "trainer" else ORCHESTRATOR_FILE
        return self.half(step, component) / marker

    def rollouts_dir(self, step: int) -> Path:
        return self.rollouts / f"step_{step}"

    def broadcast_dir(self, step: int) -> Path:
        return self.broadcasts / f"step_{step}"


def trainer_paths(
    version: DemoVersion, output_dir: Path, ckpt_output_dir: Path | None
) -> StepPaths:
    if version == "0.4":
        # v0.4 trainer/rl: rollouts and broadcasts of the run under output_dir/run_*.
        run = output_dir / V04_ORCHESTRATOR_DIR
        return StepPaths(version, output_dir / "checkpoints", run / "rollouts",
                         run / "broadcasts", None)
    ckpt_root = ckpt_output_dir or output_dir
    return StepPaths(version, ckpt_root / "checkpoints", output_dir / "rollouts",
                     output_dir / "broadcasts", output_dir / "metrics.jsonl")


def orchestrator_paths(version: DemoVersion, output_dir: Path) -> StepPaths:
    metrics = None if version == "0.4" else output_dir / "metrics.jsonl"
    return StepPaths(version, output_dir / "checkpoints", output_dir / "rollouts",
                     output_dir / "broadcasts", metrics)


def checkpoints_dir(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def checkpoint_half(output_dir: Path, step: int, component: StepComponent) -> Path:
    """main's layout (component mode's default): both halves under output_dir/checkpoints."""
    return checkpoints_dir(output_dir) / f"step_{step}" / component


def completion_file(output_dir: Path, step: int, component: StepComponent) -> Path:
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


def steps_to_delete(
    tracked: Iterable[int], keep_last: int | None, keep_interval: int | None
) -> list[int]:
    """prime-rl's trainer `maybe_clean` (both versions, trainer/ckpt.py): keep the `keep_last`
    newest tracked steps and every multiple of `keep_interval`; delete the other tracked ones.
    Nothing is deleted when both are unset."""
    steps = sorted(set(tracked))
    if keep_last is None and keep_interval is None:
        return []
    keep: set[int] = set()
    if keep_last is not None:
        keep.update(steps[-keep_last:])
    if keep_interval is not None:
        keep.update(s for s in steps if s % keep_interval == 0)
    return [s for s in steps if s not in keep]


def resolve_resume_step(requested: int, present_steps: Iterable[int]) -> int | None:
    """prime-rl's `-1` / bare resume: the highest `step_*` name, complete or not (its known
    flaw); None when there is none."""
    if requested != -1:
        return requested
    steps = sorted(present_steps)
    return steps[-1] if steps else None


# ---------------------------------------------------------------------------------------------
# Writers (I/O)


def write_trainer_half(paths: StepPaths, step: int, *, complete: bool, world_size: int) -> Path:
    """DCP: every rank's shard first, `.metadata` last; a crash in between leaves no marker
    (v0.4 trainer/ckpt.py:156 `dcp_save`)."""
    half = paths.half(step, "trainer")
    half.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        (half / f"__{rank}_0.distcp").write_bytes(
            json.dumps({"step": step, "rank": rank, "demo": True}).encode()
        )
    if complete:
        (half / TRAINER_MARKER).write_bytes(json.dumps({"step": step, "demo": True}).encode())
    return half


def write_orchestrator_half(paths: StepPaths, step: int, *, complete: bool) -> Path:
    """v0.4 (orchestrator/ckpt.py:41-46): progress.pt written in place, then the buffer files;
    `complete=False` stops after progress.pt. main (orchestrator/ckpt.py:36-40): progress.pt to
    a temporary name, renamed; `complete=False` leaves only the temporary file."""
    half = paths.half(step, "orchestrator")
    half.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"step": step, "demo": True}).encode()
    if paths.version == "0.4":
        (half / ORCHESTRATOR_FILE).write_bytes(payload)
        if complete:
            (half / "buffer").mkdir(exist_ok=True)
            for name in V04_BUFFER_FILES:
                (half / "buffer" / name).write_text("")
        return half
    fd, temporary = tempfile.mkstemp(dir=half, prefix=f"{ORCHESTRATOR_FILE}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(payload)
    if complete:
        os.replace(temporary, half / ORCHESTRATOR_FILE)
    return half


def delete_step_dirs(paths: StepPaths, steps: Iterable[int]) -> None:
    """The trainer's keep_last clean removes the whole step_K directory (trainer/ckpt.py)."""
    for step in steps:
        shutil.rmtree(paths.ckpt_dir / f"step_{step}", ignore_errors=True)


def remove_steps_after(parent: Path, step: int) -> None:
    """Drop step directories after `step` (main's clean_future_steps; -1 removes all)."""
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


def publish_broadcast(paths: StepPaths, step: int) -> None:
    """Weights first, then the STABLE marker (v0.4 trainer/rl/broadcast/filesystem.py:96-99)."""
    directory = paths.broadcast_dir(step)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.safetensors").write_bytes(b"demo weights")
    (directory / BROADCAST_MARKER).touch()


def clean_broadcasts(paths: StepPaths, step: int, async_level: int, keep_every: int | None) -> None:
    """prime-rl's filesystem broadcast clean (v0.4 trainer/utils.py:323-331): delete the one
    from async_level + 1 steps ago unless it is a multiple of the checkpoint interval."""
    old = max(step - (async_level + 1), 0)
    if keep_every and old % keep_every == 0:
        return
    shutil.rmtree(paths.broadcast_dir(old), ignore_errors=True)


def append_metrics(path: Path, row: Mapping[str, Any]) -> None:
    """One line per call in a single O_APPEND write, so two components never interleave."""
    line = (json.dumps(dict(row), separators=(",", ":")) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def wait_for_file(path: Path, *, poll: float, timeout: float | None = None) -> bool:
    """Block until `path` exists (a signal handler that raises ends the wait); False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not path.exists():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True
