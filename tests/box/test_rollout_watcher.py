"""The attempt's episode log as the supervisor's watcher reads it: appended lines only,
partial lines wait, foreign lines are skipped, an adopted attempt starts at the end."""

from __future__ import annotations

import json
from pathlib import Path

from airvisor.box._rollouts import RolloutWatcher, episode_log, event_of
from airvisor.policy._rollouts import NeedsPerson, RolloutsErrored, RolloutsRecovered


def line(ok: bool, error: str | None = None) -> str:
    return json.dumps({"schema": 1, "at": 1.0, "ok": ok, "task": "blotto", "error": error,
                       "container": "c-0", "source": "air_mlgym", "pid": 1}) + "\n"


def test_the_watcher_reads_what_is_appended_and_says_it_once(tmp_path: Path) -> None:
    now = [0.0]
    path = episode_log(tmp_path)
    watcher = RolloutWatcher(path, limit=3, clock=lambda: now[0])
    assert watcher.poll() == []  # no file yet: nothing finished (or nothing reports)
    with path.open("a") as log:
        log.write(line(True))
        log.write(line(False, "reset failed: no evaluator"))
        log.write("a line of someone else\n")
        log.write(line(False, "reset failed: no evaluator")[:20])  # being written
        log.flush()
        notices = watcher.poll()
        assert [type(n) for n in notices] == [RolloutsErrored]
        first = notices[0]
        assert isinstance(first, RolloutsErrored)
        assert first.new == 1 and first.reason == "reset failed: no evaluator"
        log.write(line(False, "reset failed: no evaluator")[20:])
        log.flush()
        assert watcher.poll() == []  # the same run of errors: said again after the interval
        log.write(line(False, "evaluation failed"))
        log.flush()
        notices = watcher.poll()
    assert [type(n) for n in notices] == [RolloutsErrored, NeedsPerson]
    kind, message, data = event_of(notices[1])
    assert kind == "needs_person" and data["consecutive"] == 3
    assert message.endswith(": evaluation failed")
    with path.open("a") as log:
        log.write(line(True))
    assert [type(n) for n in watcher.poll()] == [RolloutsRecovered]


def test_an_adopted_attempt_is_read_from_the_end(tmp_path: Path) -> None:
    path = episode_log(tmp_path)
    path.write_text(line(False, "old") * 5)
    watcher = RolloutWatcher(path, limit=3, from_end=True)
    assert watcher.poll() == []
    with path.open("a") as log:
        log.write(line(False, "new"))
    notices = watcher.poll()
    assert len(notices) == 1 and isinstance(notices[0], RolloutsErrored)
    assert notices[0].consecutive == 1 and notices[0].reason == "new"
