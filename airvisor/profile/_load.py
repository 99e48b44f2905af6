"""Loading a profile by name or path, with every problem reported at once and located.

Steps: find the file, parse it (syntax errors name file:line:col and, for an unquoted string,
show the quoted form), apply dotted-key overrides, resolve relative paths against the profile's
directory, validate with the pydantic schema (each error mapped back to the TOML key's line, an
unknown key with the closest valid one), and read the components' config files.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
import re
import sys
import typing
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from airvisor._paths import profile_search_path, state_dir
from airvisor.profile._locate import KeyLocator, Loc
from airvisor.profile._problems import Problem, ProfileError
from airvisor.profile._rlargs import RlArgsError, absolute_args
from airvisor.profile._schema import Profile
from airvisor.profile._toml import TomlDocument, read_toml

PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PYTHON_PLACEHOLDER = "{python}"
STATE_DIR_PLACEHOLDER = "{state_dir}"

# Path-valued keys that are resolved against the profile file's directory.
_PATH_KEYS: tuple[tuple[str, str], ...] = (
    ("prime_rl", "venv"),
    ("prime_rl", "workdir"),
)

# Keys airvisor derives from prime-rl's resolved config: a profile that sets them would
# contradict the user's prime-rl config, so they are refused with the place to set them instead.
DERIVED_KEYS: dict[tuple[str, str], str] = {
    ("run", "output_dir"): "set output_dir in your prime-rl config (or [prime_rl.overrides] "
                           "output_dir = \"...\")",
    ("run", "max_steps"): "set max_steps in your prime-rl config (or [prime_rl.overrides] "
                          "max_steps = N)",
    ("inference", "host"): "set inference.server.host in your prime-rl config",
    ("inference", "port"): "set inference.server.port in your prime-rl config",
    ("gpus", "inference_memory_share"): "set the inference server's gpu_memory_utilization in "
                                        "your prime-rl config",
}


def is_path_ref(ref: str | Path) -> bool:
    return isinstance(ref, Path) or "/" in ref or ref.endswith(".toml")


def available_profiles() -> dict[str, Path]:
    """Every profile name on the search path, the first directory winning."""
    found: dict[str, Path] = {}
    for directory in profile_search_path():
        try:
            candidates = sorted(directory.glob("*.toml"))
        except OSError:
            continue
        for candidate in candidates:
            found.setdefault(candidate.stem, candidate)
    return found


def find_profile(ref: str | Path) -> Path:
    """The file a profile reference names; raises ProfileError when there is none."""
    if is_path_ref(ref):
        return Path(os.path.normpath(Path(ref).expanduser().absolute()))
    name = str(ref)
    if not PROFILE_NAME.fullmatch(name):
        raise ProfileError([Problem(
            name, "not a valid profile name (letters, digits, '_', '.', '-'; no '/')",
            "give a profile name such as rl_debug, or a path to a .toml file")])
    for directory in profile_search_path():
        candidate = directory / f"{name}.toml"
        if candidate.is_file():
            return candidate.absolute()
    known = available_profiles()
    close = difflib.get_close_matches(name, list(known), n=1)
    searched = ", ".join(str(d) for d in profile_search_path())
    fix = f"did you mean '{close[0]}'?" if close else (
        f"available: {', '.join(sorted(known))}" if known else
        "pass a path to a .toml file, or set AIRVISOR_PROFILES to a directory of profiles")
    raise ProfileError([Problem(name, f"no profile named '{name}' (searched {searched})", fix)])


def _display(loc: Loc) -> str:
    """`[gpus] inference`, `[containers.mounts.0] source`, or a top-level `run`."""
    parts = [str(p) for p in loc]
    if len(parts) == 1:
        return f"[{parts[0]}]"
    return f"[{'.'.join(parts[:-1])}] {parts[-1]}"


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model describing the table at `loc` (for listing its valid keys)."""
    model: type[BaseModel] = Profile
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return None
        annotation: Any = info.annotation
        found: type[BaseModel] | None = None
        for candidate in (annotation, *typing.get_args(annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                found = candidate
                break
        if found is None:
            return None
        model = found
    return model


def _valid_keys(loc: Loc) -> list[str]:
    model = _model_at(loc)
    if model is None:
        return []
    return [name for name in model.model_fields
            if not (model is Profile and name in ("source", "resolved"))]


class OverrideIndex:
    """Which `--set` key a profile location comes from: the first key (in the order given) that
    is the location itself, a table above it, or a key below it.

    Built once per load, so naming the override of every validation error costs the length
    of the keys, not keys x errors (16,000 bad keys were 16,000 x 16,000 comparisons).
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = list(keys)
        self._exact: dict[str, int] = {}
        # Each key and every dotted prefix of it -> the first key at or below that prefix.
        self._at_or_below: dict[str, int] = {}
        for index, key in enumerate(self._keys):
            self._exact.setdefault(key, index)
            self._at_or_below.setdefault(key, index)
            for prefix in _dotted_prefixes(key):
                self._at_or_below.setdefault(prefix, index)

    def key_for(self, loc: Loc) -> str | None:
        dotted = ".".join(str(p) for p in loc)
        candidates = [self._at_or_below.get(dotted)]  # the location itself, or a key below it
        candidates += [self._exact.get(prefix) for prefix in _dotted_prefixes(dotted)]  # above
        found = [index for index in candidates if index is not None]
        return self._keys[min(found)] if found else None


def _dotted_prefixes(key: str) -> Iterator[str]:
    """`a.b.c` -> `a`, `a.b` (what precedes each dot)."""
    position = key.find(".")
    while position != -1:
        yield key[:position]
        position = key.find(".", position + 1)


def _validation_problems(
    error: ValidationError, locator: KeyLocator, overrides: OverrideIndex
) -> list[Problem]:
    problems: list[Problem] = []
    for item in error.errors():
        loc: Loc = tuple(item["loc"])
        override = overrides.key_for(loc)
        where = f"override {override}" if override else locator.where(loc)
        kind = item["type"]
        if kind == "extra_forbidden":
            parent, key = loc[:-1], str(loc[-1])
            valid = _valid_keys(parent)
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            table = f"[{'.'.join(str(p) for p in parent)}]" if parent else "the top level"
            fix = (f"did you mean '{close[0]}'?" if close
                   else f"valid keys there: {', '.join(valid)}" if valid else "remove it")
            problems.append(Problem(where, f"unknown key '{key}' in {table}", fix))
        elif kind == "missing":
            parent, key = loc[:-1], str(loc[-1])
            table = f"[{'.'.join(str(p) for p in parent)}]" if parent else "the top level"
            where = f"override {override}" if override else locator.where(parent)
            problems.append(Problem(where, f"{_display(loc)} is required",
                                    f"add `{key} = ...` to {table}"))
        else:
            got = item.get("input")
            shown = repr(got) if not isinstance(got, dict) else "a table"
            fix = "change the value there"
            if kind in ("literal_error", "string_type") and isinstance(got, int | float):
                # `version = 0.4`: TOML read a number where a string was meant.
                fix = f'quote it: {loc[-1]} = "{got}"'
            problems.append(Problem(where, f"{_display(loc)}: {item['msg']} (got {shown})", fix))
    return problems


def _set_override(raw: dict[str, Any], key: str, value: Any) -> Problem | None:
    parts = key.split(".")
    if not key or any(not p for p in parts):
        return Problem(f"override {key}", "an override key must be dotted names like run.max_steps",
                       None)
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            return Problem(f"override {key}", f"'{where}' is a value, not a table",
                           f"override '{where}' itself")
        node = child
    node[parts[-1]] = value
    return None


def _expand_state_dir(value: str) -> str:
    """'{state_dir}' is airvisor's state directory (created when missing, as any command that
    opens the state database does): where a shipped profile such as the demo writes, since
    the profile's own directory may be inside an installed package."""
    if STATE_DIR_PLACEHOLDER not in value:
        return value
    state = state_dir()
    with contextlib.suppress(OSError):  # unwritable: the checks report the directory
        state.mkdir(parents=True, exist_ok=True)
    return value.replace(STATE_DIR_PLACEHOLDER, str(state))


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    """Make relative paths absolute against the profile's directory; expand '{python}' and
    '{state_dir}'."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value:
            path = Path(_expand_state_dir(value)).expanduser()
            # normpath, not resolve(): tidy `configs/../outputs` but keep the user's symlinks.
            return os.path.normpath(path if path.is_absolute() else base / path)
        return value

    for section, key in _PATH_KEYS:
        table = raw.get(section)
        if isinstance(table, dict) and key in table:
            table[key] = resolve(table[key])
    prime_rl = raw.get("prime_rl")
    args = prime_rl.get("args") if isinstance(prime_rl, dict) else None
    if isinstance(prime_rl, dict) and isinstance(args, list) and all(isinstance(a, str)
                                                                      for a in args):
        # A malformed list ("@" at the end) is reported by the checks.
        with contextlib.suppress(RlArgsError):
            prime_rl["args"] = absolute_args(args, base)
    if isinstance(prime_rl, dict) and "workdir" not in prime_rl:
        # prime-rl resolves relative paths in its config (output_dir) against its cwd.
        prime_rl["workdir"] = str(base)
    containers = raw.get("containers")
    if isinstance(containers, dict) and isinstance(containers.get("mounts"), list):
        for mount in containers["mounts"]:
            if isinstance(mount, dict) and "source" in mount:
                mount["source"] = resolve(mount["source"])
    prime_rl = raw.get("prime_rl")
    for key in ("command_prefix", "python"):  # the demo's: airvisor's interpreter runs both
        if isinstance(prime_rl, dict) and isinstance(prime_rl.get(key), list):
            prime_rl[key] = [
                v.replace(PYTHON_PLACEHOLDER, sys.executable) if isinstance(v, str) else v
                for v in prime_rl[key]
            ]


def _derived_key_problems(raw: dict[str, Any], locator: KeyLocator,
                          overrides: OverrideIndex) -> list[Problem]:
    problems: list[Problem] = []
    for (section, key), fix in DERIVED_KEYS.items():
        table = raw.get(section)
        if isinstance(table, dict) and key in table:
            override = overrides.key_for((section, key))
            problems.append(Problem(
                f"override {override}" if override else locator.where((section, key)),
                f"[{section}] {key} comes from prime-rl's resolved config, not the profile", fix))
            del table[key]
    for component in ("inference", "trainer", "orchestrator"):
        table = raw.get(component)
        if isinstance(table, dict):
            for key in ("config", "config_files", "extra_args"):
                if key in table:
                    problems.append(Problem(
                        locator.where((component, key)),
                        f"[{component}] {key}: component configs now live in your own "
                        "prime-rl config files",
                        "name them in [prime_rl] args, e.g. args = [\"@\", \"rl.toml\"] or "
                        "[\"--trainer\", \"@\", \"train.toml\", ...], and put airvisor-only "
                        "changes in [prime_rl.overrides]"))
                    del table[key]
            if component == "orchestrator" and not table:
                del raw[component]
    return problems


def load_profile(ref: str | Path, overrides: Mapping[str, Any] | None = None) -> Profile:
    """Load, override and validate a profile; raises ProfileError listing every problem.

    The caller's `overrides` are never changed: a table-valued override is copied before it
    goes into the profile, where a later, deeper override writes into it."""
    overrides = copy.deepcopy(dict(overrides or {}))
    path = find_profile(ref)
    document = read_toml(path, what="profile")
    if not isinstance(document, TomlDocument):
        raise ProfileError([document])
    raw = copy.deepcopy(document.data)
    problems: list[Problem] = []
    for key in ("source", "resolved"):
        if key in raw:
            problems.append(Problem(document.locator.where((key,)),
                                    f"unknown key '{key}' at the top level (airvisor sets it)",
                                    "remove it"))
            del raw[key]
    for key, value in overrides.items():
        problem = _set_override(raw, key, value)
        if problem is not None:
            problems.append(problem)
    index = OverrideIndex(overrides)
    problems.extend(_derived_key_problems(raw, document.locator, index))
    _resolve_paths(raw, path.parent)
    profile: Profile | None = None
    try:
        profile = Profile.model_validate(raw)
    except ValidationError as exc:
        problems[:0] = _validation_problems(exc, document.locator, index)
    if problems or profile is None:
        raise ProfileError(problems)
    profile = profile.model_copy(update={"source": path})
    profile._locator = document.locator
    return profile
