"""Printable tables of candidates (for `airvisor processes` / `airvisor reap`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from airvisor._tables import plain_table, table_lines
from airvisor.gpu._types import gib
from airvisor.reaper._discover import Candidate


def format_age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _tree(c: Candidate) -> str:
    text = f"ppid {c.ppid}"
    if c.children:
        shown = ",".join(str(p) for p in c.children[:4])
        more = f"+{len(c.children) - 4}" if len(c.children) > 4 else ""
        text += f" > {shown}{more}"
    return text


def format_candidates(candidates: Sequence[Candidate], *, command_width: int = 60) -> str:
    """PID, TREE, USER, AGE, GPU MEM, PORTS, COMMAND, then the reason on its own line."""
    if not candidates:
        return "No stale processes."
    table = plain_table("PID", "TREE", "USER", "AGE", "GPU MEM", "PORTS", "COMMAND")
    reasons = []
    for c in candidates:
        indent = "  " * c.depth + ("└ " if c.depth else "")
        # One line per row: a `python -c` program's newlines are shown as "⏎".
        flat = c.command.replace("\r", "").replace("\n", "⏎")
        command = flat if len(flat) <= command_width else flat[:command_width - 1] + "…"
        gpu = ", ".join(f"{gpu}:{gib(used)}" for gpu, used in sorted(c.gpu_memory.items())) \
            or "-"
        ports = ",".join(str(p) for p in c.ports) or "-"
        table.add_row(f"{indent}{c.pid}", _tree(c), Text(c.user or "?"), format_age(c.age),
                      gpu, ports, Text(command))  # Text: brackets in a command are no markup
        reasons.append(f"{c.blocked_by}: {c.reason}" if c.blocked_by else c.reason)
    header, *rows = table_lines(table)
    lines = [header]
    for c, row, reason in zip(candidates, rows, reasons, strict=True):
        # The reason on a line of its own under its row (too long for a column).
        prefix = "not reaped: " if c.blocked_by else "why: "
        lines += [row, " " * (2 * c.depth + 4) + prefix + reason]
    return "\n".join(lines)
