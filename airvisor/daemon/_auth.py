"""Who may change things: bearer-token auth for the mutating endpoints.

The decision (`decide_auth`) is pure; `load_or_create_token` is the file I/O next to it.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class AuthConfigError(Exception):
    """The daemon must not start with this bind/auth combination; str() says why and the fix."""


def is_loopback_host(host: str) -> bool:
    """True only for addresses that cannot be reached from another machine.

    Host names other than localhost count as non-loopback: they may resolve anywhere.
    """
    candidate = host.strip().strip("[]").lower()
    if candidate in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(candidate).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AuthDecision:
    require_token: bool
    reason: str


def decide_auth(*, host: str | None, uds: str | None, no_auth: bool) -> AuthDecision:
    """Token auth is on unless --no-auth was given for a bind no other machine can reach."""
    local_only = uds is not None or (host is not None and is_loopback_host(host))
    where = f"unix socket {uds}" if uds is not None else f"{host}"
    if no_auth:
        if not local_only:
            raise AuthConfigError(
                f"--no-auth is allowed only on a loopback address or a unix socket, not on "
                f"{where}: anyone who can reach it could start and stop runs. Drop --no-auth "
                "(clients then send the token from the token file), or bind to 127.0.0.1 or "
                "--uds PATH."
            )
        return AuthDecision(False, f"token auth off (--no-auth, local-only bind {where})")
    return AuthDecision(True, f"token auth on for mutating endpoints ({where})")


def load_or_create_token(path: Path) -> str:
    """Read the token file, creating it (mode 0600, random token) on first start.

    Raises AuthConfigError when the file is empty, unreadable, or readable by other users.
    """
    path = path.expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AuthConfigError(
            f"cannot create the token file {path}: {err.strerror or err} ({path.parent})"
        ) from err
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    except OSError as err:
        raise AuthConfigError(
            f"cannot create the token file {path}: {err.strerror}. Create it yourself "
            f"(a random string, mode 0600) or point --token-file / AIRVISOR_TOKEN_FILE elsewhere."
        ) from err
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as err:
        raise AuthConfigError(f"cannot read the token file {path}: {err.strerror}") from err
    if mode & stat.S_IROTH or mode & stat.S_IWOTH:
        raise AuthConfigError(
            f"the token file {path} is readable or writable by every user "
            f"(mode {stat.filemode(mode)}); run `chmod 600 {path}`."
        )
    if not token:
        raise AuthConfigError(
            f"the token file {path} is empty; delete it (a new token is created on the next "
            "start) or write a random string into it."
        )
    return token


def token_matches(expected: str, authorization: str | None) -> bool:
    """Checks an 'Authorization: Bearer <token>' header in constant time."""
    if not authorization:
        return False
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False
    return hmac.compare_digest(presented.strip().encode(), expected.encode())
