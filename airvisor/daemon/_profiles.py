"""Which profiles a client may name: the catalog the daemon (re)reads on start and SIGHUP."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from airvisor.daemon._models import PROFILE_REF_RULE, is_profile_ref
from airvisor.profile import Profile, available_profiles, load_profile


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
        names = available_profiles()
        with self._lock:
            self._names = dict(names)
        return names

    @property
    def names(self) -> dict[str, Path]:
        with self._lock:
            return dict(self._names)

    def resolve(self, ref: str) -> Path:
        """The file `ref` names. The API's schema and its request validation use the same rule
        (`is_profile_ref`), so a reference that passed them fails here only with a 404."""
        if not is_profile_ref(ref):
            raise BadProfileRef(422, f"{ref!r} is not {PROFILE_REF_RULE}; relative paths mean "
                                     "nothing to the daemon")
        if ref.startswith("/"):
            real = Path(ref)
            try:
                found_file = real.is_file()
            except (OSError, ValueError) as err:  # a name too long; not encodable for the OS
                raise BadProfileRef(404, f"no profile file at {ref!r} on the daemon's machine "
                                         f"({err})") from err
            if not found_file:
                raise BadProfileRef(404, f"no profile file at {ref} on the daemon's machine")
            return real
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
    return load_profile(path, overrides)
