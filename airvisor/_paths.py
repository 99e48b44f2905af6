"""Where airvisor keeps its state and finds profiles."""

from __future__ import annotations

import os
from pathlib import Path

PROFILE_DIRS_ENV = "AIRVISOR_PROFILES"
STATE_DIR_ENV = "AIRVISOR_STATE_DIR"
SYSTEM_PROFILE_DIR = Path("/etc/airvisor/profiles")
# The repository's configs/ when airvisor runs from a checkout (editable install).
REPO_CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def state_dir() -> Path:
    """`$AIRVISOR_STATE_DIR`, else `$XDG_STATE_HOME/airvisor`, else ~/.local/state/airvisor."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "airvisor"


def database_path() -> Path:
    return state_dir() / "airvisor.sqlite3"


def profile_search_path() -> list[Path]:
    """configs/ of the checkout (and of the cwd), then $AIRVISOR_PROFILES, then /etc."""
    dirs = [Path.cwd() / "configs", REPO_CONFIGS]
    extra = os.environ.get(PROFILE_DIRS_ENV)
    if extra:
        dirs.extend(Path(p).expanduser() for p in extra.split(os.pathsep) if p)
    dirs.append(SYSTEM_PROFILE_DIR)
    unique: list[Path] = []
    for d in dirs:
        if d.resolve() not in [u.resolve() for u in unique]:
            unique.append(d)
    return unique
