"""Where each key of a TOML document stands (line and column).

`tomllib` returns plain dicts without positions, and no maintained TOML library exposes them for
every key, so this is a small hand-written scanner. It only runs on documents `tomllib` has
already accepted, so it can be lenient: it records the position of every table header and every
`key = value` line (dotted keys included, array-of-tables elements numbered from 0) and skips over
multi-line strings and arrays. Keys inside inline tables are not recorded; lookups fall back to the
longest recorded prefix, i.e. the line of the enclosing key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

Loc = tuple[str | int, ...]

_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _parse_key(text: str, pos: int) -> tuple[list[str], int]:
    """Parse a (possibly dotted, possibly quoted) key starting at `pos`; return parts and end."""
    parts: list[str] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            break
        ch = text[pos]
        if ch in "\"'":
            end = pos + 1
            while end < n and text[end] != ch:
                end += 2 if ch == '"' and text[end] == "\\" else 1
            parts.append(text[pos + 1 : end])
            pos = end + 1
        else:
            start = pos
            while pos < n and text[pos] in _BARE_KEY_CHARS:
                pos += 1
            if pos == start:
                break
            parts.append(text[start:pos])
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ".":
            pos += 1
            continue
        break
    return parts, pos


class _ValueScanner:
    """Tracks whether a value continues on the next line (open brackets or multi-line string)."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_multiline: str | None = None  # '"""' or "'''"

    @property
    def open(self) -> bool:
        return self.depth > 0 or self.in_multiline is not None

    def feed(self, text: str, pos: int = 0) -> None:
        n = len(text)
        while pos < n:
            if self.in_multiline is not None:
                end = text.find(self.in_multiline, pos)
                if end < 0:
                    return
                pos = end + 3
                self.in_multiline = None
                continue
            ch = text[pos]
            if ch == "#":
                return
            if text.startswith('"""', pos) or text.startswith("'''", pos):
                self.in_multiline = text[pos : pos + 3]
                pos += 3
                continue
            if ch in "\"'":
                end = pos + 1
                while end < n and text[end] != ch:
                    end += 2 if ch == '"' and text[end] == "\\" else 1
                pos = end + 1
                continue
            if ch in "[{":
                self.depth += 1
            elif ch in "]}":
                self.depth -= 1
            pos += 1


class KeyLocator:
    """Positions (1-based line, column) of the keys of one TOML document."""

    def __init__(self, path: Path | str, text: str) -> None:
        self.path = Path(path)
        self._positions: dict[Loc, tuple[int, int]] = {}
        self._scan(text)

    def _resolve(self, keys: Sequence[str], array_counts: dict[Loc, int]) -> Loc:
        resolved: list[str | int] = []
        for key in keys:
            resolved.append(key)
            count = array_counts.get(tuple(resolved))
            if count is not None:
                resolved.append(count - 1)
        return tuple(resolved)

    def _scan(self, text: str) -> None:
        array_counts: dict[Loc, int] = {}
        current: Loc = ()
        value = _ValueScanner()
        for lineno, line in enumerate(text.splitlines(), start=1):
            if value.open:
                value.feed(line)
                continue
            stripped = line.lstrip()
            indent = len(line) - len(stripped)
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("[["):
                keys, _ = _parse_key(stripped, 2)
                parent = self._resolve(keys[:-1], array_counts)
                table = (*parent, keys[-1]) if keys else parent
                array_counts[table] = array_counts.get(table, 0) + 1
                current = (*table, array_counts[table] - 1)
                self._positions.setdefault(table, (lineno, indent + 1))
                self._positions[current] = (lineno, indent + 1)
                continue
            if stripped.startswith("["):
                keys, _ = _parse_key(stripped, 1)
                current = self._resolve(keys, array_counts)
                self._positions.setdefault(current, (lineno, indent + 1))
                continue
            keys, end = _parse_key(stripped, 0)
            if not keys:
                continue
            self._positions.setdefault((*current, *keys), (lineno, indent + 1))
            equals = stripped.find("=", end)
            if equals >= 0:
                value.feed(stripped, equals + 1)

    def position(self, loc: Sequence[str | int]) -> tuple[int, int] | None:
        """Position of `loc`, else the first line that defines something inside it (a table
        only sub-table headers define: `[trainer.config.optim]` for `trainer.config`), else of
        its longest recorded prefix; None if nothing matches."""
        key = tuple(loc)
        found = self._positions.get(key)
        if found is not None:
            return found
        inside = [pos for path, pos in self._positions.items()
                  if len(path) > len(key) and path[:len(key)] == key]
        if inside:
            return min(inside)
        while key:
            found = self._positions.get(key)
            if found is not None:
                return found
            key = key[:-1]
        return None

    def exact(self, loc: Sequence[str | int]) -> tuple[int, int] | None:
        return self._positions.get(tuple(loc))

    def where(self, loc: Sequence[str | int]) -> str:
        """`file:line:col` of `loc` (or of its nearest recorded parent), else just the file."""
        found = self.position(loc)
        if found is None:
            return str(self.path)
        return f"{self.path}:{found[0]}:{found[1]}"
