"""Plain-text tables for terminals and logs, drawn by rich (no borders, no colour, one line per
row): `airvisor processes`, `reap`, `gpus` and the preflight's messages."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

# Wide enough that a row is never wrapped: long cells (commands) are cut by the callers.
_TEXT_WIDTH = 1000


def plain_table(*columns: str, right: Sequence[str] = ()) -> Table:
    """A borderless table with these column headers (`right`: right-aligned ones)."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="")
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    return table


def table_lines(table: Table, indent: str = "") -> list[str]:
    """The table as plain lines (header first; no colour, no trailing blanks), each after
    `indent`."""
    out = io.StringIO()
    Console(file=out, width=_TEXT_WIDTH, color_system=None, force_terminal=False,
            highlight=False).print(table)
    return [indent + line.rstrip() for line in out.getvalue().splitlines()]
