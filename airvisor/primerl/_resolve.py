"""Resolve the user's `rl` command line with prime-rl's own code.

airvisor runs `resolve_config.py` (shipped in this package, stdlib + prime-rl only) with
prime-rl's own interpreter: it parses the exact argument list with that version's parser and
config classes (every validator included) and prints the resolved config as JSON. So a key
prime-rl refuses is refused here, with prime-rl's message, before anything starts; and the output
directory, GPUs, ports and checkpoint cadence airvisor supervises by are the ones prime-rl
computed, not a re-derivation.

When prime-rl's interpreter cannot import prime-rl (not installed on this machine, as in the
demo), airvisor reads the few facts it needs from the TOML files itself and says plainly that
only airvisor's part was checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from airvisor.primerl._facts import RunFacts, Version, facts_from_files, facts_from_resolved
from airvisor.profile._problems import Problem

# Exit statuses of resolve_config.py (its contract).
EXIT_REFUSED = 2  # prime-rl refused the config
EXIT_NO_PRIME_RL = 3  # prime-rl is not importable with that interpreter
RESOLVE_TIMEOUT = 120.0  # seconds; importing prime-rl's config classes takes a few


@dataclass(frozen=True)
class Resolution:
    """A run's config as resolved by prime-rl (`source == "prime-rl"`), or, where prime-rl
    could not be reached, the facts by airvisor's own reading (`source == "airvisor"`)."""

    source: Literal["prime-rl", "airvisor"]
    facts: RunFacts
    rl: dict[str, Any] | None = None  # the resolved RLConfig (prime-rl only)
    components: dict[str, Any] = field(default_factory=dict)  # what rl writes per component
    env_servers: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""  # why only airvisor's part was checked
    # With `resolve(split=True)`: the two halves of the run as prime-rl derives them (the
    # inference server alone, and `rl` without [inference]); read by `_split.split_of`.
    split: dict[str, Any] | None = None

    @property
    def checked_by_prime_rl(self) -> bool:
        return self.source == "prime-rl"


class ResolveError(Exception):
    """prime-rl refused the config (or it could not be read); `problems` say where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def resolver_script() -> Path:
    """The path of resolve_config.py inside the installed package."""
    return Path(str(resources.files("airvisor.primerl") / "resolve_config.py"))


def _problems_from(payload: Mapping[str, Any], where: str) -> list[Problem]:
    problems: list[Problem] = []
    for error in payload.get("errors") or []:
        if not isinstance(error, Mapping):
            continue
        loc = error.get("loc")
        key = ".".join(str(p) for p in loc) if isinstance(loc, list | tuple) else str(loc or "")
        message = str(error.get("msg") or "refused")
        fix = "fix the key in your prime-rl config files (or [prime_rl.overrides])"
        if error.get("type") == "extra_forbidden":
            fix = "prime-rl does not know this key: remove or rename it"
        problems.append(Problem(where, f"prime-rl refuses {key or 'the config'}: {message}"
                                if key else f"prime-rl refuses the config: {message}", fix))
    if not problems:
        problems.append(Problem(where, f"prime-rl refuses the config: "
                                       f"{payload.get('message') or 'no reason given'}", None))
    return problems


def resolve(
    *,
    version: Version,
    python: Sequence[str],
    args: Sequence[str],
    cwd: Path,
    environ: Mapping[str, str],
    where: str,
    runner: Any = subprocess.run,
    split: bool = False,
) -> Resolution:
    """Resolve `rl <args>` with prime-rl's interpreter `python` (an argv prefix).

    Raises ResolveError when prime-rl refuses the config or a file cannot be read.
    """
    fallback_reason = ""
    if python:
        with tempfile.TemporaryDirectory(prefix="airvisor-resolve-") as scratch:
            command = [*python, str(resolver_script()), "--version", version,
                       "--cwd", str(cwd), *(["--split"] if split else []), "--", *args]
            env = {**environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
            try:
                done = runner(command, cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=RESOLVE_TIMEOUT, check=False)
            except FileNotFoundError:
                fallback_reason = f"'{python[0]}' (prime-rl's interpreter) is not installed"
            except subprocess.TimeoutExpired:
                raise ResolveError([Problem(where, f"resolving the config with prime-rl took "
                                                   f"over {RESOLVE_TIMEOUT:g} s",
                                            "check that prime-rl's environment works")]) from None
            else:
                payload = last_json_object(done.stdout)
                if done.returncode == 0 and payload is not None and payload.get("ok"):
                    facts = facts_from_resolved(version, payload.get("facts") or {}, cwd=cwd,
                                                environ=environ, rl=payload.get("rl"))
                    return Resolution(
                        source="prime-rl", facts=facts, rl=payload.get("rl"),
                        components=dict(payload.get("components") or {}),
                        env_servers=list(payload.get("env_servers") or []),
                        split=payload.get("split") if split else None)
                if done.returncode == EXIT_REFUSED and payload is not None:
                    raise ResolveError(_problems_from(payload, where))
                if done.returncode == EXIT_NO_PRIME_RL:
                    message = (payload or {}).get("message") or "prime-rl is not importable"
                    fallback_reason = str(message)
                else:
                    tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:]
                    raise ResolveError([Problem(
                        where, f"resolving the config with prime-rl failed (exit "
                               f"{done.returncode}): {' | '.join(tail) or 'no output'}",
                        "run the same `rl` command by hand to see prime-rl's error")])
    else:
        fallback_reason = "no prime-rl interpreter is configured"
    try:
        facts = facts_from_files(version, args, cwd=cwd, environ=environ)
    except OSError as exc:
        raise ResolveError([Problem(str(getattr(exc, "filename", where) or where),
                                    f"cannot read a prime-rl config file: {exc.strerror or exc}",
                                    "fix the path after '@' in [prime_rl] args")]) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ResolveError([Problem(where, f"a prime-rl config file is not valid TOML: {exc}",
                                    "fix the file (strings must be quoted)")]) from None
    note = (f"prime-rl could not be reached ({fallback_reason}): only airvisor's part of the "
            "config was checked; prime-rl will validate the rest when it starts")
    return Resolution(source="airvisor", facts=facts, note=note)


def last_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object the resolver printed: the whole of stdout, or (when prime-rl printed
    something before it) the text from the last line that opens an object."""
    text = (text or "").strip()
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("{")]
    for start in [0, *reversed(starts)]:
        try:
            value = json.loads("\n".join(lines[start:]))
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def prime_rl_python(*, python: Sequence[str] | None, venv: Path | None,
                    command_prefix: Sequence[str]) -> list[str]:
    """How to run prime-rl's interpreter: `[prime_rl] python`, else the venv's python, else
    `<command_prefix> python` (e.g. `uv run --project /opt/prime-rl python`)."""
    if python is not None:
        return list(python)
    if venv is not None:
        return [os.fspath(venv / "bin" / "python")]
    if command_prefix:
        return [*command_prefix, "python"]
    return ["python"]
