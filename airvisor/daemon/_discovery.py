"""How a command finds the box's running daemon without any environment variable.

A serving daemon writes `daemon.json` (its URL, pid, state dir and token file; no secret) into
its state directory and, under systemd, into its RuntimeDirectory (/run/airvisor for the
system unit, world-readable, so every user's commands find it). Clients try, in order:
$AIRVISOR_URL when set (and nothing else), then these files, then http://127.0.0.1:8765.
A file whose daemon no longer answers is simply skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airvisor._paths import choose_state_dir, system_state_readable, user_state_dir

URL_ENV = "AIRVISOR_URL"
DEFAULT_URL = "http://127.0.0.1:8765"
DISCOVERY_FILE_NAME = "daemon.json"
# The system unit's RuntimeDirectory=airvisor.
SYSTEM_RUNTIME_DIR = Path("/run/airvisor")
# Set by systemd for a unit with RuntimeDirectory= (system: /run/airvisor; user:
# $XDG_RUNTIME_DIR/airvisor).
RUNTIME_DIRECTORY_ENV = "RUNTIME_DIRECTORY"


@dataclass(frozen=True)
class DaemonAddress:
    url: str
    source: str  # where the address came from, for messages
    token_file: Path | None = None
    pid: int | None = None


def discovery_files(env: Mapping[str, str], *, system_readable: bool) -> list[Path]:
    """Where running daemons announce themselves, most specific first: the state directory
    this user's commands use, the system service's runtime dir, the user unit's runtime dir,
    the user's own state directory."""
    files = [
        choose_state_dir(env, system_readable=system_readable) / DISCOVERY_FILE_NAME,
        SYSTEM_RUNTIME_DIR / DISCOVERY_FILE_NAME,
    ]
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "airvisor" / DISCOVERY_FILE_NAME)
    files.append(user_state_dir(env) / DISCOVERY_FILE_NAME)
    unique: list[Path] = []
    for path in files:
        if path not in unique:
            unique.append(path)
    return unique


def parse_discovery(text: str, source: str) -> DaemonAddress | None:
    """A discovery file's address, or None when it is not one (torn, foreign, hand-edited)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    token_file = data.get("token_file")
    pid = data.get("pid")
    return DaemonAddress(
        url=data["url"], source=source,
        token_file=Path(token_file) if isinstance(token_file, str) and token_file else None,
        pid=pid if isinstance(pid, int) else None)


def candidate_addresses(env: Mapping[str, str], files: Mapping[Path, str]) -> list[DaemonAddress]:
    """The addresses to try, in order. `files` maps each readable discovery file (in
    discovery_files order) to its text."""
    if env.get(URL_ENV):
        return [DaemonAddress(url=env[URL_ENV], source=f"${URL_ENV}")]
    found: list[DaemonAddress] = []
    for path, text in files.items():
        address = parse_discovery(text, str(path))
        if address is not None and address.url not in [a.url for a in found]:
            found.append(address)
    if DEFAULT_URL not in [a.url for a in found]:
        found.append(DaemonAddress(url=DEFAULT_URL, source="the default address"))
    return found


def find_addresses(env: Mapping[str, str] | None = None) -> list[DaemonAddress]:
    """candidate_addresses over the discovery files of this machine."""
    env = os.environ if env is None else env
    texts: dict[Path, str] = {}
    if not env.get(URL_ENV):
        for path in discovery_files(env, system_readable=system_state_readable()):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                texts[path] = path.read_text()
    return candidate_addresses(env, texts)


def announce_paths(state: Path, env: Mapping[str, str]) -> list[Path]:
    """Where a serving daemon writes its discovery file."""
    paths = [state / DISCOVERY_FILE_NAME]
    runtime = env.get(RUNTIME_DIRECTORY_ENV)
    if runtime:
        # systemd may list several directories (':'-separated); the first is ours.
        path = Path(runtime.split(":")[0]) / DISCOVERY_FILE_NAME
        if path not in paths:
            paths.append(path)
    return paths


def announce(paths: list[Path], *, url: str, pid: int, state: Path, token_file: Path | None
             ) -> list[Path]:
    """Write the discovery file (atomically, mode 0644: it holds no secret) to each path
    whose directory exists; returns those written."""
    body = json.dumps({"url": url, "pid": pid, "state_dir": str(state),
                       "token_file": str(token_file) if token_file else None}) + "\n"
    written: list[Path] = []
    for path in paths:
        tmp = path.with_name(f".{path.name}.{pid}")
        try:
            tmp.write_text(body)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            continue
        written.append(path)
    return written


def withdraw(paths: list[Path], *, pid: int) -> None:
    """Remove the discovery files that still name this process (a newer daemon's stay)."""
    for path in paths:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            address = parse_discovery(path.read_text(), str(path))
            if address is not None and address.pid == pid:
                path.unlink()
