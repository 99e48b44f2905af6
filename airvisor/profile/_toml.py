"""Reading a TOML file into a dict, turning every failure into a `Problem` a person can act on."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airvisor.profile._locate import KeyLocator
from airvisor.profile._problems import Problem

_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END = re.compile(r"\s*\(at end of document\)\s*$")
_KEY_VALUE = re.compile(r"^(\s*)([A-Za-z0-9_.\-\"' ]+?)\s*=\s*(.*?)\s*$")
# How a valid TOML value can begin: strings, arrays, inline tables, numbers, booleans, dates,
# inf/nan.
_VALUE_START = re.compile(r"""^(["'\[{]|[+-]?(\d|inf\b|nan\b)|true\b|false\b)""")


@dataclass(frozen=True)
class TomlDocument:
    path: Path
    data: dict[str, Any]
    locator: KeyLocator


def _strip_comment(value: str) -> str:
    # Only called for unquoted values, so a '#' here always starts a comment.
    return value.split("#", 1)[0].rstrip()


def _unquoted_string_hint(line_text: str) -> tuple[str, str] | None:
    """For `key = some/bare value`, the message and the quoted line to suggest."""
    match = _KEY_VALUE.match(line_text)
    if match is None:
        return None
    _, key, value = match.groups()
    key, value = key.strip(), _strip_comment(value)
    if value in ("True", "False", "TRUE", "FALSE"):
        return (f"the value of '{key}' is not valid TOML: booleans are lowercase",
                f"write {key} = {value.lower()}")
    inner = value[1:-1]
    if value.startswith("[") and value.endswith("]") and not any(c in inner for c in "\"'[]{}"):
        # `tasks = [titanic.yaml, blotto.yaml]`: a flat array; quote each bare element.
        elements = [e.strip() for e in inner.split(",") if e.strip()]
        bare = [e for e in elements if not _VALUE_START.match(e)]
        if bare:
            quoted = ", ".join(e if _VALUE_START.match(e) else json.dumps(e) for e in elements)
            return (f"the value of '{key}' is not valid TOML: strings in an array must be quoted",
                    f"write {key} = [{quoted}]")
        return None
    if not value or _VALUE_START.match(value):
        return None
    return (
        f"the value of '{key}' is not valid TOML: string values must be quoted",
        f"write {key} = {json.dumps(value)}",
    )


def toml_syntax_problem(path: Path, text: str, error: tomllib.TOMLDecodeError) -> Problem:
    message = str(error)
    line = col = None
    position = _POSITION.search(message)
    if position is not None:
        line, col = int(position.group(1)), int(position.group(2))
        message = message[: position.start()]
    elif _END.search(message):
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
        message = _END.sub("", message)
    where = f"{path}:{line}:{col}" if line is not None else str(path)
    lines = text.splitlines()
    if line is not None and 1 <= line <= len(lines):
        hint = _unquoted_string_hint(lines[line - 1])
        if hint is not None:
            return Problem(where, f"TOML syntax error: {hint[0]}", hint[1])
    return Problem(where, f"TOML syntax error: {message.strip()}", "correct the TOML syntax there")


def read_toml(path: Path, *, what: str = "file") -> TomlDocument | Problem:
    """Parse `path`; a missing, unreadable or invalid file gives a Problem instead."""
    try:
        if path.is_dir():
            return Problem(str(path), f"{what} is a directory, not a TOML file",
                           "give the path of a .toml file")
        raw = path.read_bytes()
    except FileNotFoundError:
        return Problem(str(path), f"{what} does not exist", "check the path")
    except OSError as exc:
        return Problem(str(path), f"{what} cannot be read: {exc.strerror or exc}",
                       "check the file's permissions")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Problem(str(path), f"{what} is not UTF-8 text (byte {exc.start})",
                       "save it as UTF-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return toml_syntax_problem(path, text, exc)
    return TomlDocument(path, data, KeyLocator(path, text))
