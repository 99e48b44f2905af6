"""Resolve the user's `rl` command line with prime-rl's own code.

airvisor runs `resolve_config.py` (shipped in this package, stdlib + prime-rl only) with
prime-rl's own interpreter: it parses the exact argument list with that version's parser and
config classes (every validator included) and prints the resolved config as JSON. So a key
prime-rl refuses is refused here, with prime-rl's message, before anything starts; and the output
directory, GPUs, ports and checkpoint cadence airvisor supervises by are the ones prime-rl
computed, not a re-derivation.

When prime-rl's interpreter cannot import prime-rl (not installed on this machine), airvisor
reads the few facts it needs from the TOML files itself and says plainly that only airvisor's
part was checked. The demo's stand-in of the launcher answers in the resolver's place (its
payload says `"resolver": "airvisor-demo"`, airvisor/demo/_resolve.py): it gives the halves its
`rl` would start, so a demo run keeps its inference server; the facts are still airvisor's own
reading, and the resolution is labelled the demo's (`source == "demo"`), never prime-rl's.
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
DEMO_RESOLVER = "airvisor-demo"  # the demo launcher stand-in's label (airvisor/demo/_resolve.py)
# The default of `[prime_rl] resolve_timeout` (seconds); importing prime-rl's config classes
# takes a few, far more on a loaded box or behind a `uv run` that syncs first.
RESOLVE_TIMEOUT = 120.0
TIMEOUT_SETTING = "[prime_rl] resolve_timeout"
# The resolver's progress lines on stderr (resolve_config.py, PROGRESS_PREFIX): what it had
# reached when the time ran out.
_PROGRESS_PREFIX = "airvisor-resolve: "


@dataclass(frozen=True)
class Resolution:
    """A run's config as resolved by prime-rl (`source == "prime-rl"`), or, where prime-rl
    could not be reached, the facts by airvisor's own reading (`source == "airvisor"`; with
    the demo launcher stand-in's halves: `source == "demo"`)."""

    source: Literal["prime-rl", "airvisor", "demo"]
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

    @property
    def halves_derived(self) -> bool:
        """The split's halves come from the launcher's own code: prime-rl's, or the demo's
        stand-in of it."""
        return self.source in ("prime-rl", "demo")


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
    timeout: float = RESOLVE_TIMEOUT,
) -> Resolution:
    """Resolve `rl <args>` with prime-rl's interpreter `python` (an argv prefix), given
    `timeout` seconds (`[prime_rl] resolve_timeout`).

    Raises ResolveError when prime-rl refuses the config, a file cannot be read, or the time
    runs out (saying what was slow).
    """
    fallback_reason = ""
    if python:
        with tempfile.TemporaryDirectory(prefix="airvisor-resolve-") as scratch:
            command = [*python, str(resolver_script()), "--version", version,
                       "--cwd", str(cwd), *(["--split"] if split else []), "--", *args]
            env = {**environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
            try:
                done = runner(command, cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
            except FileNotFoundError:
                fallback_reason = f"'{python[0]}' (prime-rl's interpreter) is not installed"
            except subprocess.TimeoutExpired as expired:
                raise ResolveError([timeout_problem(
                    _text(expired.stderr), timeout=timeout, where=where, python=python,
                )]) from None
            else:
                payload = last_json_object(done.stdout)
                if (done.returncode == 0 and payload is not None and payload.get("ok")
                        and payload.get("resolver") == DEMO_RESOLVER):
                    return _demo_resolution(version, payload, args=args, cwd=cwd,
                                            environ=environ, where=where, split=split)
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
    facts = _facts_by_airvisor(version, args, cwd=cwd, environ=environ, where=where)
    note = (f"prime-rl could not be reached ({fallback_reason}): only airvisor's part of the "
            "config was checked; prime-rl will validate the rest when it starts")
    return Resolution(source="airvisor", facts=facts, note=note)


def _demo_resolution(version: Version, payload: Mapping[str, Any], *, args: Sequence[str],
                     cwd: Path, environ: Mapping[str, str], where: str,
                     split: bool) -> Resolution:
    raw = payload.get("split")
    return Resolution(
        source="demo",
        facts=_facts_by_airvisor(version, args, cwd=cwd, environ=environ, where=where),
        note="the demo's launcher stand-in answered in prime-rl's place (airvisor.demo, not "
             "prime-rl): airvisor read the facts itself, and the halves a recovery keeping the "
             "inference server starts are the demo's",
        split=dict(raw) if split and isinstance(raw, Mapping) else None)


def _facts_by_airvisor(version: Version, args: Sequence[str], *, cwd: Path,
                       environ: Mapping[str, str], where: str) -> RunFacts:
    try:
        return facts_from_files(version, args, cwd=cwd, environ=environ)
    except OSError as exc:
        raise ResolveError([Problem(str(getattr(exc, "filename", where) or where),
                                    f"cannot read a prime-rl config file: {exc.strerror or exc}",
                                    "fix the path after '@' in [prime_rl] args")]) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ResolveError([Problem(where, f"a prime-rl config file is not valid TOML: {exc}",
                                    "fix the file (strings must be quoted)")]) from None


def _text(output: str | bytes | None) -> str:
    # subprocess.run's TimeoutExpired carries what was read so far as bytes, even with text=True.
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def timeout_problem(stderr: str, *, timeout: float, where: str,
                    python: Sequence[str]) -> Problem:
    """What was slow when the resolver's time ran out, by the last progress line it wrote:
    none (prime-rl's interpreter had not started the script), "importing prime-rl" (the
    interpreter's import of prime-rl's config classes), or "parsing" (prime-rl's parse of the
    config); and the setting to raise."""
    progress = [line[len(_PROGRESS_PREFIX):].strip() for line in stderr.splitlines()
                if line.startswith(_PROGRESS_PREFIX)]
    interpreter = " ".join(python)
    if not progress:
        slow = (f"prime-rl's interpreter (`{interpreter}`) had not started the resolver "
                "script: starting the interpreter was slow (a `uv run` that syncs the "
                "environment first, or a loaded box)")
    elif progress[-1].startswith("parsing"):
        took = progress[-1].removeprefix("parsing").strip(" ()")
        slow = (f"prime-rl's parse of the config was slow ({took or 'the import finished'}; "
                "the parse did not finish)")
    else:
        slow = (f"the interpreter's import of prime-rl was slow (`{interpreter}` was still "
                "importing prime-rl's config classes)")
    return Problem(where, f"resolving the config with prime-rl took over {timeout:g} s: {slow}",
                   f"raise {TIMEOUT_SETTING} in the profile (now {timeout:g} s), or check "
                   "that prime-rl's environment works")


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
