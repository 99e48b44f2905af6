"""The argument list that follows prime-rl's `rl` command, as data.

A profile names the user's own command line (`[prime_rl] args = ["@", "rl.toml"]`), exactly as
they type it after `rl`. airvisor never rewrites it: it makes the paths after each `@` absolute
(they are relative to the profile file), appends its own overrides and the resume flag of the
version. How prime-rl itself reads such a list:

- v0.4 `prime_rl/utils/pydantic_config.py:152-177` (`extract_toml_paths`): every `@ PATH`
  pair loads a TOML file; a `--section` right before `@` nests the file under that key
  (`rl --trainer @ train.toml`); the rest are pydantic-settings CLI flags (kebab-case).
- main: the same `@` syntax through `pydantic_config.cli` (prime-pydantic-config).

This module only splits and rewrites; prime-rl does the parsing (see `_resolve.py`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TomlRef:
    """One `[--section] @ PATH` of the command line."""

    path: Path
    section: str | None  # `--trainer @ f.toml` nests f.toml under `trainer`
    index: int  # position of the path in the argument list


class RlArgsError(ValueError):
    """The argument list is malformed (an `@` without a path)."""


def toml_refs(args: Sequence[str]) -> list[TomlRef]:
    """The TOML files an `rl` argument list loads, in order."""
    refs: list[TomlRef] = []
    for index, arg in enumerate(args):
        if arg != "@":
            continue
        if index + 1 >= len(args):
            raise RlArgsError("an '@' at the end of [prime_rl] args has no file after it")
        previous = args[index - 1] if index > 0 else ""
        section = previous[2:] if previous.startswith("--") and previous != "--" else None
        refs.append(TomlRef(Path(args[index + 1]), section, index + 1))
    return refs


def absolute_args(args: Sequence[str], base: Path) -> list[str]:
    """`args` with each `@` path made absolute against `base` (the profile's directory)."""
    out = list(args)
    for ref in toml_refs(args):
        path = ref.path.expanduser()
        if not path.is_absolute():
            out[ref.index] = os.path.normpath(base / path)
        else:
            out[ref.index] = str(path)
    return out


def flag_pairs(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """The `--key value` / `--key=value` / bare `--flag` options (not the `@` files), in order.

    Keys come back with dots and underscores (`ckpt.resume_step`); a bare flag has value None.
    """
    consumed = set()
    for ref in toml_refs(args):
        consumed.update({ref.index - 1, ref.index})
        if ref.section is not None:
            consumed.add(ref.index - 2)
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if index in consumed or not arg.startswith("--") or arg == "--":
            index += 1
            continue
        key = arg[2:]
        value: str | None = None
        if "=" in key:
            key, value = key.split("=", 1)
        elif index + 1 < len(args) and index + 1 not in consumed \
                and not args[index + 1].startswith("--"):
            value = args[index + 1]
            index += 1
        pairs.append((key.replace("-", "_"), value))
        index += 1
    return pairs


def flag_value(raw: str | None) -> Any:
    """A CLI flag's value as its TOML reading where it has one (`[6,7]`, `3`, `1e-5`, `true`),
    else the string itself (`0,1,2`, a model name); a flag without a value is True."""
    if raw is None:
        return True
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
