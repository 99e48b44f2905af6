"""`core.LogView` for an adopted attempt: which file it reads, and from where (real files)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from airvisor.core._logview import LogView


def test_an_adopted_attempt_never_reads_an_earlier_attempt_s_log(tmp_path: Path) -> None:
    """main names the attempt's log directory only once its `rl` runs: a new daemon adopting
    right after a relaunch finds `logs/latest` still at the earlier attempt's file. That file
    (last written before the attempt began) is not read; the attempt's own, once it appears, is
    read from its start (nobody read it)."""
    earlier = tmp_path / "attempt_1" / "trainer.log"
    earlier.parent.mkdir()
    earlier.write_text("Step 4\n")
    began = time.time()
    os.utime(earlier, (began - 10, began - 10))
    located: list[Path] = [earlier]
    view = LogView(lambda: located[0], from_end=True, written_since=began)
    assert view.read_new_lines() == []
    with earlier.open("a") as log:
        log.write("Step 5 of the earlier attempt, seen as written before\n")
    os.utime(earlier, (began - 5, began - 5))
    assert view.read_new_lines() == []
    own = tmp_path / "attempt_2" / "trainer.log"
    own.parent.mkdir()
    own.write_text("Step 5\nStep 6\n")
    located[0] = own
    assert view.read_new_lines() == ["Step 5", "Step 6"]


def test_an_adopted_attempt_s_own_log_is_read_from_where_it_is(tmp_path: Path) -> None:
    """The file there at adoption is this attempt's: its lines before now were the last
    supervisor's; only what comes after is read."""
    own = tmp_path / "trainer.log"
    own.write_text("Step 5\n")
    view = LogView(lambda: own, from_end=True, written_since=time.time() - 60)
    assert view.read_new_lines() == []
    with own.open("a") as log:
        log.write("Step 6\n")
    assert view.read_new_lines() == ["Step 6"]
