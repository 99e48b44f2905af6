"""Time series for the run page (step over time, training curves, GPU memory), bounded.

Each (run, series) keeps at most `max_points` rows. When a series grows past that, a quarter
of its rows go: the closest neighbours merge into one point (weighted means of x and y), so
the series stays evenly spaced over its whole range, and a week-long run costs the same few
thousand rows as an hour-long one. Merging updates the surviving row in place, so row ids only
grow for new points and a client that asks for "rows after id N" never sees a merged point.

Reads are downsampled again in SQL (`GROUP BY` over x buckets), so even a table that holds far
more rows than the bound (a bulk import, the benchmark) answers in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from airvisor.store._db import Store

DEFAULT_MAX_POINTS = 2000
DEFAULT_READ_POINTS = 1000


@dataclass(frozen=True)
class SeriesRead:
    """Points per series (x-sorted) and the largest row id seen, for incremental reads."""

    series: dict[str, list[tuple[float, float]]]
    last_id: int


def merge_pairs(rows: Sequence[tuple[int, float, float, int]], remove: int
                ) -> tuple[list[tuple[float, float, int, int]], list[int]]:
    """Pure: which neighbours to merge so that `remove` rows go, given (id, x, y, weight) rows
    sorted by x. Returns (updates (x, y, weight, id), ids to delete).

    The closest neighbours (smallest x gap; the older on a tie) merge first, into one point at
    their weighted mean, so a long series ends up evenly spaced over its whole range. The first
    and last rows are never merged: the curve keeps its exact start and newest point.
    """
    candidates = sorted(range(1, len(rows) - 2),
                        key=lambda i: (rows[i + 1][1] - rows[i][1], rows[i][1]))
    taken: set[int] = set()
    chosen: list[int] = []
    for i in candidates:
        if len(chosen) >= remove:
            break
        if i in taken or i + 1 in taken:
            continue
        taken.update((i, i + 1))
        chosen.append(i)
    updates: list[tuple[float, float, int, int]] = []
    deletes: list[int] = []
    for i in sorted(chosen):
        (id_a, x_a, y_a, w_a), (id_b, x_b, y_b, w_b) = rows[i], rows[i + 1]
        weight = w_a + w_b
        updates.append(((x_a * w_a + x_b * w_b) / weight, (y_a * w_a + y_b * w_b) / weight,
                        weight, id_a))
        deletes.append(id_b)
    return updates, deletes


class SeriesStore:
    """The `series_points` table of a Store (one connection per thread, like the Store)."""

    def __init__(self, store: Store, *, max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < 4:
            raise ValueError("max_points must be at least 4")
        self.store = store
        self.max_points = max_points

    def append(self, run_id: str, series: str, points: Iterable[tuple[float, float]], *,
               replace_from_first: bool = False) -> int:
        """Add points; returns how many. `replace_from_first` first deletes the series' points
        at or beyond the first new x (a training curve keyed by step, after a resume from an
        earlier checkpoint repeats steps)."""
        rows = [(run_id, series, float(x), float(y)) for x, y in points]
        if not rows:
            return 0
        with self.store._tx() as db:
            if replace_from_first:
                db.execute("DELETE FROM series_points WHERE run_id = ? AND series = ? AND x >= ?",
                           (run_id, series, rows[0][2]))
            db.executemany("INSERT INTO series_points (run_id, series, x, y) VALUES (?, ?, ?, ?)",
                           rows)
            count = db.execute("SELECT COUNT(*) FROM series_points WHERE run_id = ? AND "
                               "series = ?", (run_id, series)).fetchone()[0]
            while count > self.max_points:
                removed = self._compact(run_id, series, count - self.max_points * 3 // 4)
                if not removed:
                    break
                count -= removed
        return len(rows)

    def _compact(self, run_id: str, series: str, remove: int) -> int:
        db = self.store._conn()
        rows = db.execute(
            "SELECT id, x, y, weight FROM series_points WHERE run_id = ? AND series = ? "
            "ORDER BY x, id", (run_id, series)).fetchall()
        updates, deletes = merge_pairs([tuple(r) for r in rows], remove)
        db.executemany("UPDATE series_points SET x = ?, y = ?, weight = ? WHERE id = ?", updates)
        db.executemany("DELETE FROM series_points WHERE id = ?", [(i,) for i in deletes])
        return len(deletes)

    def names(self, run_id: str) -> list[str]:
        rows = self.store._conn().execute(
            "SELECT DISTINCT series FROM series_points WHERE run_id = ? ORDER BY series",
            (run_id,)).fetchall()
        return [r[0] for r in rows]

    def read(self, run_id: str, *, points_per_series: int = DEFAULT_READ_POINTS) -> SeriesRead:
        """Every series of a run, each at most about `points_per_series` points (bucketed means
        over equal x ranges when it holds more)."""
        db = self.store._conn()
        last = db.execute("SELECT MAX(id) FROM series_points WHERE run_id = ?",
                          (run_id,)).fetchone()[0] or 0
        found: dict[str, list[tuple[float, float]]] = {}
        stats = db.execute(
            "SELECT series, COUNT(*), MIN(x), MAX(x) FROM series_points WHERE run_id = ? "
            "AND id <= ? GROUP BY series", (run_id, last)).fetchall()
        for name, count, low, high in stats:
            if count <= points_per_series or high <= low:
                rows = db.execute(
                    "SELECT x, y FROM series_points WHERE run_id = ? AND series = ? AND id <= ? "
                    "ORDER BY x, id", (run_id, name, last)).fetchall()
            else:
                width = (high - low) / points_per_series
                rows = db.execute(
                    "SELECT SUM(x * weight) / SUM(weight), SUM(y * weight) / SUM(weight) "
                    "FROM series_points WHERE run_id = ? AND series = ? AND id <= ? "
                    "GROUP BY CAST((x - ?) / ? AS INTEGER) ORDER BY 1",
                    (run_id, name, last, low, width)).fetchall()
            found[name] = [(float(x), float(y)) for x, y in rows]
        return SeriesRead(found, int(last))

    def read_after(self, run_id: str, after_id: int, *, limit: int = 20_000) -> SeriesRead:
        """Points added after row `after_id` (the live updates of an open page)."""
        # `+run_id`: scan by row id (new rows are at the end), not by the run_id index.
        rows = self.store._conn().execute(
            "SELECT id, series, x, y FROM series_points WHERE id > ? AND +run_id = ? "
            "ORDER BY id LIMIT ?", (after_id, run_id, limit)).fetchall()
        found: dict[str, list[tuple[float, float]]] = {}
        last = after_id
        for row_id, name, x, y in rows:
            found.setdefault(name, []).append((float(x), float(y)))
            last = max(last, int(row_id))
        return SeriesRead(found, last)

    def points_since(self, run_id: str, series: str, since_x: float) -> list[tuple[float, float]]:
        rows = self.store._conn().execute(
            "SELECT x, y FROM series_points WHERE run_id = ? AND series = ? AND x >= ? "
            "ORDER BY x", (run_id, series, since_x)).fetchall()
        return [(float(x), float(y)) for x, y in rows]

    def count(self, run_id: str) -> int:
        row = self.store._conn().execute(
            "SELECT COUNT(*) FROM series_points WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0])
