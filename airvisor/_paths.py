"""Where airvisor keeps its state and finds profiles.

One state directory per box: the system service's (/var/lib/airvisor) when this user may read
it, so root's commands see the runs the service supervises; otherwise the user's own.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping
from pathlib import Path

PROFILE_DIRS_ENV = "AIRVISOR_PROFILES"
STATE_DIR_ENV = "AIRVISOR_STATE_DIR"
SYSTEM_PROFILE_DIR = Path("/etc/airvisor/profiles")
# The system unit's StateDirectory=airvisor.
SYSTEM_STATE_DIR = Path("/var/lib/airvisor")
DATABASE_NAME = "airvisor.sqlite3"
# The profiles shipped with airvisor: package data `airvisor/profiles`, which in the repository
# is a symlink to its top-level configs/ (setuptools copies the files into the wheel).
SHIPPED_PROFILES_PACKAGE = "airvisor"
SHIPPED_PROFILES_DIR = "profiles"


def user_state_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_STATE_HOME/airvisor`, else ~/.local/state/airvisor."""
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "airvisor"


def choose_state_dir(env: Mapping[str, str], *, system_readable: bool) -> Path:
    """`$AIRVISOR_STATE_DIR`; else the system service's directory when its database is
    readable by this user; else the user's own."""
    explicit = env.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    if system_readable:
        return SYSTEM_STATE_DIR
    return user_state_dir(env)


def system_state_readable() -> bool:
    """The system service's database exists and this user may read it (the directory is
    0700 root: true for root, false for everyone else unless an admin opened it)."""
    return os.access(SYSTEM_STATE_DIR / DATABASE_NAME, os.R_OK)


def state_dir() -> Path:
    """The box's state directory for this user (see choose_state_dir)."""
    env = os.environ
    if env.get(STATE_DIR_ENV):
        return choose_state_dir(env, system_readable=False)
    return choose_state_dir(env, system_readable=system_state_readable())


def database_path() -> Path:
    return state_dir() / DATABASE_NAME


def shipped_profiles() -> Path | None:
    """The directory of the profiles shipped in the package (the checkout's configs/, resolved,
    when airvisor runs from one); None when the package is not on a file system."""
    shipped = importlib.resources.files(SHIPPED_PROFILES_PACKAGE) / SHIPPED_PROFILES_DIR
    if not isinstance(shipped, Path) or not shipped.is_dir():
        return None
    return shipped.resolve()


def profile_search_path() -> list[Path]:
    """configs/ of the cwd, then $AIRVISOR_PROFILES, then /etc/airvisor/profiles, then the
    profiles shipped with airvisor: this box's own profiles win over the shipped examples."""
    dirs = [Path.cwd() / "configs"]
    extra = os.environ.get(PROFILE_DIRS_ENV)
    if extra:
        dirs.extend(Path(p).expanduser() for p in extra.split(os.pathsep) if p)
    dirs.append(SYSTEM_PROFILE_DIR)
    shipped = shipped_profiles()
    if shipped is not None:
        dirs.append(shipped)
    unique: list[Path] = []
    for d in dirs:
        if d.resolve() not in [u.resolve() for u in unique]:
            unique.append(d)
    return unique
