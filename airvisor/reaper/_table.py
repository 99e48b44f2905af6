"""Printable tables of candidates (for `airvisor processes` / `airvisor reap`)."""

from __future__ import annotations

from collections.abc import Sequence

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
    header = ("PID", "TREE", "USER", "AGE", "GPU MEM", "PORTS", "COMMAND")
    rows = [header]
    reasons = []
    for c in candidates:
        indent = "  " * c.depth + ("└ " if c.depth else "")
        command = c.command if len(c.command) <= command_width else \
            c.command[:command_width - 1] + "…"
        gpu = ", ".join(f"{gpu}:{gib(used)}" for gpu, used in sorted(c.gpu_memory.items())) \
            or "-"
        ports = ",".join(str(p) for p in c.ports) or "-"
        rows.append((f"{indent}{c.pid}", _tree(c), c.user or "?", format_age(c.age), gpu,
                     ports, command))
        reasons.append(f"{c.blocked_by}: {c.reason}" if c.blocked_by else c.reason)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = [f"{row[i]:<{widths[i]}}" for i in range(len(header) - 1)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if n > 0:
            prefix = "not reaped: " if candidates[n - 1].blocked_by else "why: "
            lines.append(" " * (2 * candidates[n - 1].depth + 4) + prefix + reasons[n - 1])
    return "\n".join(lines)
