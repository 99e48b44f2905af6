"""Which profiles a client may name: the catalog the daemon (re)reads on start and SIGHUP."""

from __future__ import annotations

import threading
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airvisor.profile._schema import Profile


class BadProfileRef(Exception):
    """A profile reference the daemon will not load; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ProfileCatalog:
    """Profile names on the search path -> files, as of the last (re)load.

    Names resolve through this snapshot, so a profile added later is found after SIGHUP
    (`systemctl reload airvisor`), like any daemon's configuration. Absolute paths are read
    as they are on disk at submit time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, Path] = {}

    def reload(self) -> dict[str, Path]:
        from airvisor.profile import available_profiles

        names = available_profiles()
        with self._lock:
            self._names = dict(names)
        return names

    @property
    def names(self) -> dict[str, Path]:
        with self._lock:
            return dict(self._names)

    def resolve(self, ref: str) -> Path:
        from airvisor.profile import PROFILE_NAME

        if ref.startswith("/"):
            path = PurePosixPath(ref)
            if ".." in path.parts or "\0" in ref:
                raise BadProfileRef(422, f"profile path {ref!r} contains '..'; give the file's "
                                         "absolute path without '..'")
            if path.suffix != ".toml":
                raise BadProfileRef(422, f"profile path {ref!r} is not a .toml file")
            real = Path(path)
            if not real.is_file():
                raise BadProfileRef(404, f"no profile file at {ref} on the daemon's machine")
            return real
        if "/" in ref or "\\" in ref or ".." in ref or not PROFILE_NAME.fullmatch(ref):
            raise BadProfileRef(
                422, f"{ref!r} is neither a profile name (letters, digits, '_', '.', '-') nor an "
                "absolute path to a .toml file; relative paths mean nothing to the daemon")
        name = ref.removesuffix(".toml")
        with self._lock:
            found = self._names.get(name)
            known = sorted(self._names)
        if found is None:
            hint = f"known: {', '.join(known)}" if known else "no profiles found on the search path"
            raise BadProfileRef(
                404, f"no profile named {name!r} ({hint}). Added one since the daemon started? "
                "Reload it: `systemctl reload airvisor` or `kill -HUP <daemon pid>`.")
        return found


def load(path: Path, overrides: dict[str, Any]) -> Profile:
    """airvisor.profile.load_profile; raises its ProfileError (str() lists every problem)."""
    from airvisor.profile import load_profile

    return load_profile(path, overrides)
