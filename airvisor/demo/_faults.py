"""Injected faults fire once per output directory, so the resumed attempt gets past them.

A fault is claimed by creating `<output_dir>/demo_faults/<component>-<fault>.fired` with O_EXCL:
the claim is atomic, so two attempts (or two ranks) can never both fire it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FAULTS_DIR = "demo_faults"


def fault_marker(output_dir: Path, component: str, fault: str) -> Path:
    return output_dir / FAULTS_DIR / f"{component}-{fault}.fired"


def has_fired(output_dir: Path, component: str, fault: str) -> bool:
    return fault_marker(output_dir, component, fault).exists()


def claim_fault(output_dir: Path, component: str, fault: str, *, detail: str = "") -> bool:
    """True if this call fires the fault (first time for this output_dir), False if it had fired."""
    marker = fault_marker(output_dir, component, fault)
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, f"{time.time():.3f} pid={os.getpid()} {detail}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True
