"""Errored rollouts from the environment's episode log: counting, reset on a served episode,
the limit that needs a person, and how often a warning is said."""

from __future__ import annotations

import json

import pytest

from airvisor.policy._rollouts import (
    EpisodeRecord,
    NeedsPerson,
    RolloutNotice,
    RolloutsErrored,
    RolloutsRecovered,
    RolloutTally,
    parse_episode_line,
    tally_rollouts,
)

OK = EpisodeRecord(ok=True, task="blotto")


def err(reason: str = "reset failed: no Python to evaluate with") -> EpisodeRecord:
    return EpisodeRecord(ok=False, error=reason, task="blotto", container="c-0")


def said(notices: list[RolloutNotice]) -> list[tuple[str, int]]:
    """Each notice as (kind, its count): errored -> new episodes, recovered -> after,
    person -> in a row."""
    out: list[tuple[str, int]] = []
    for notice in notices:
        if isinstance(notice, RolloutsErrored):
            out.append(("errored", notice.new))
        elif isinstance(notice, RolloutsRecovered):
            out.append(("recovered", notice.after))
        else:
            out.append(("person", notice.consecutive))
    return out


# Looks at the log, each (seconds since the start, records found): what is said at each look,
# and how many errored episodes are in a row after the last one.
CASES = [
    pytest.param([(0, [OK, OK, OK])], 3, [[]], 0, id="served episodes: nothing to say"),
    pytest.param([(0, [err()])], 3, [[("errored", 1)]], 1, id="the first error is said at once"),
    pytest.param([(0, [err(), err()])], 3, [[("errored", 2)]], 2,
                 id="a look's errors are one warning"),
    pytest.param([(0, [err()]), (1, [err()])], 3, [[("errored", 1)], []], 2,
                 id="more of the same run waits for the interval"),
    pytest.param([(0, [err()]), (1, [err()]), (61, [])], 5,
                 [[("errored", 1)], [], [("errored", 1)]], 2,
                 id="the rest is said once the interval is over, new records or not"),
    pytest.param([(0, [err(), err()]), (1, [err(), OK])], 5,
                 [[("errored", 2)], [("errored", 1), ("recovered", 3)]], 0,
                 id="a served episode ends the run: the rest is said, then the recovery"),
    pytest.param([(0, [err(), OK, err()])], 5,
                 [[("errored", 1), ("recovered", 1), ("errored", 1)]], 1,
                 id="a served episode resets the count"),
    pytest.param([(0, [err(), err()]), (1, [err()])], 3,
                 [[("errored", 2)], [("errored", 1), ("person", 3)]], 3,
                 id="the limit in a row needs a person"),
    pytest.param([(0, [err()] * 7)], 3, [[("errored", 7), ("person", 7)]], 7,
                 id="the limit crossed within one look"),
    pytest.param([(0, [err()] * 3), (1, [err()]), (100, [OK, err(), err(), err()])], 3,
                 [[("errored", 3), ("person", 3)], [], [("errored", 1), ("recovered", 4),
                                                        ("errored", 3)]], 3,
                 id="a person is needed once per run of the watcher"),
    pytest.param([(0, [err()] * 50)], 0, [[("errored", 50)]], 50,
                 id="limit 0: warnings only"),
]


@pytest.mark.parametrize(("looks", "limit", "expected", "in_a_row"), CASES)
def test_tally(looks: list[tuple[float, list[EpisodeRecord]]], limit: int,
               expected: list[list[tuple[str, int]]], in_a_row: int) -> None:
    tally = RolloutTally()
    seen = []
    for now, records in looks:
        tally, notices = tally_rollouts(tally, records, limit=limit, now=now, warn_interval=60)
        seen.append(said(notices))
    assert seen == expected
    assert tally.consecutive_errors == in_a_row


def test_the_notices_name_the_reason_the_task_and_the_setting() -> None:
    _, notices = tally_rollouts(RolloutTally(), [err("first"), err("the newest reason")],
                                limit=2, now=0)
    warning, person = notices
    assert isinstance(warning, RolloutsErrored) and isinstance(person, NeedsPerson)
    assert warning.reason == "the newest reason" and warning.container == "c-0"
    assert "2 errored rollouts, 2 in a row of 2 allowed (health.rollout_error_limit)" \
        in warning.message
    assert "task blotto" in warning.message
    assert person.message.startswith("needs a person: 2 errored rollouts in a row "
                                     "(health.rollout_error_limit = 2)")
    assert person.message.endswith(": the newest reason")
    assert person.data == {"consecutive": 2, "limit": 2, "reason": "the newest reason",
                           "task": "blotto"}


LINES = [
    (json.dumps({"schema": 1, "at": 5.0, "ok": True, "task": "t"}),
     EpisodeRecord(ok=True, task="t", at=5.0)),
    (json.dumps({"ok": False, "error": "boom", "container": "c"}),
     EpisodeRecord(ok=False, error="boom", container="c")),
    (json.dumps({"ok": False}),
     EpisodeRecord(ok=False, error="the environment reported an errored episode without a "
                                   "reason")),
    (json.dumps({"ok": False, "error": "x" * 2000}), EpisodeRecord(ok=False, error="x" * 500)),
    (json.dumps({"ok": True, "at": "soon", "task": 3}), EpisodeRecord(ok=True)),
    ('{"ok": tr', None),  # a partial line
    (json.dumps({"ok": "yes"}), None),
    (json.dumps([1, 2]), None),
    ("not json", None),
]


@pytest.mark.parametrize(("line", "record"), LINES)
def test_parse_episode_line(line: str, record: EpisodeRecord | None) -> None:
    assert parse_episode_line(line) == record
