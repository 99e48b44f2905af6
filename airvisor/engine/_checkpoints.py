"""Reading prime-rl's checkpoint layout from disk: a thin call into the version's layout table.

The table (`airvisor.primerl._layout`) knows where each half lives per prime-rl version and what
that version's resume needs; the engine asks `layout.scan()` for the run it supervises.
"""

from __future__ import annotations

from pathlib import Path

from airvisor.policy import CheckpointHalves
from airvisor.primerl._layout import RunLayout, layout_for


def scan_checkpoints(
    run_dir: Path, *, layout: RunLayout | None = None
) -> dict[int, CheckpointHalves]:
    """Every checkpoint step of a run with what is missing for a resume.

    Without a layout, `run_dir` is read as prime-rl main lays out a run directory (both halves
    under `run_dir/checkpoints`, no weights needed on disk): the shape airvisor's own run
    directories had before it knew the version. Pass the run's `layout_for(...)` instead.
    """
    if layout is None:
        layout = layout_for("main", {"run_dir": str(run_dir.resolve())})
    return layout.scan()
