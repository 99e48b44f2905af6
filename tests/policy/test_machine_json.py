"""The run machine as persisted with the run (`policy._machine_json`): every field round-trips,
the monotonic backoff deadline crosses to another process's clock as the wall time it stands
for, and a blob this airvisor cannot read is a `MachineBlobError` saying why, never another
exception."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airvisor.policy import Phase, RunMachine
from airvisor.policy._machine_json import (
    MACHINE_FORMAT,
    MachineBlobError,
    decode_machine,
    encode_machine,
)
from airvisor.policy._scope import ScopeDecision, probing
from airvisor.policy._transition import Failure

NOW, WALL = 100.0, 1_700_000_000.0
CRASH = Failure("trainer exited (status unknown)", "crash", "trainer", status_known=False)
HANG = Failure("no step for 60 s", "hang", "orchestrator")
KEPT = ScopeDecision("keep_inference", "kept", "the server answers")
# A value apart from its default for every field (a field added later fails
# `test_the_sample_sets_every_field` until it has one here).
SAMPLE: dict[str, object] = {
    "phase": Phase.RECOVERY_STOPPING, "failure": CRASH, "scope": probing(KEPT),
    "scope_pending": CRASH, "down_held": True, "backoff_until": NOW + 30.0, "keep_next": True,
    "keeping": True, "stacks_taken": True, "machine_reason": "the run directory's disk is full",
    "stop_began_at": WALL - 4.5, "earlier": ((2, CRASH), (3, CRASH)), "unsaid": CRASH,
    "restarts": 5,
    "counted_restarts": (WALL - 300.0, WALL - 20.0)}
FIELDS = [f.name for f in dataclasses.fields(RunMachine)]
FULL = RunMachine(**{name: SAMPLE[name] for name in FIELDS if name in SAMPLE})  # type: ignore[arg-type]


def test_the_sample_sets_every_field() -> None:
    assert [name for name in FIELDS if name not in SAMPLE] == []
    defaults = RunMachine()
    assert [name for name in FIELDS if getattr(FULL, name) == getattr(defaults, name)] == []


@pytest.mark.parametrize("machine", [
    RunMachine(),
    RunMachine(Phase.BACKOFF, failure=HANG, scope=KEPT, backoff_until=NOW + 12.5),
    RunMachine(Phase.STOPPING_STOPPED, failure=CRASH, stop_began_at=WALL),
    RunMachine(Phase.PREFLIGHT, machine_reason="disk full", keep_next=True, restarts=1),
    FULL,
    *(RunMachine(phase) for phase in Phase),
])
def test_a_machine_round_trips_on_the_same_clock(machine: RunMachine) -> None:
    text = encode_machine(machine, now=NOW, wall=WALL)
    assert json.loads(text)["version"] == MACHINE_FORMAT
    assert decode_machine(text, now=NOW, wall=WALL) == machine


def test_the_backoff_deadline_is_the_same_moment_on_another_clock() -> None:
    """Written 30 s before its deadline by a daemon whose monotonic clock read 100; read 10 s
    later (wall) by a new daemon whose monotonic clock reads 7 (a reboot): 20 s are left."""
    text = encode_machine(FULL, now=NOW, wall=WALL)
    assert json.loads(text)["machine"]["backoff_until"] == WALL + 30.0
    restored = decode_machine(text, now=7.0, wall=WALL + 10.0)
    assert restored.backoff_until == pytest.approx(7.0 + 20.0)
    assert dataclasses.replace(restored, backoff_until=FULL.backoff_until) == FULL
    # A deadline already past stays past (the new daemon relaunches at its first look).
    late = decode_machine(text, now=7.0, wall=WALL + 45.0)
    assert late.backoff_until is not None and late.backoff_until < 7.0


@pytest.mark.parametrize(("text", "said"), [
    ("", "not JSON"),
    ('{"version": 1, "machine": {', "not JSON"),
    ("[]", "not an object"),
    ('{"version": 1}', "not an object"),
    ('{"version": 1, "machine": []}', "not an object"),
    ('{"machine": {}}', "format version None"),
    ('{"version": 3, "machine": {}}', "format version 3; this airvisor reads versions 1, 2"),
    ('{"version": "1", "machine": {}}', "format version '1'"),
    ('{"version": true, "machine": {}}', "format version True"),
    ('{"version": 1, "machine": {"phase": "resting"}}', "phase: Input should be"),
    ('{"version": 1, "machine": {"restarts": "3"}}', "restarts: Input should be a valid integer"),
    ('{"version": 1, "machine": {"backoff_until": "soon"}}', "backoff_until: Input should be"),
    ('{"version": 1, "machine": {"failure": {"reason": "x", "kind": "meteor"}}}',
     "failure.kind: Input should be"),
    ('{"version": 1, "machine": {"failure": {"kind": "crash"}}}', "failure.reason: Field required"),
    ('{"version": 1, "machine": {"counted_restarts": [1.0, "x"]}}', "counted_restarts.1"),
    ('{"version": 1, "machine": {"scope": {"scope": "half", "reason": "healthy", "detail": ""}}}',
     "scope.scope: Input should be"),
])
def test_a_blob_that_does_not_read_says_why(text: str, said: str) -> None:
    with pytest.raises(MachineBlobError) as caught:
        decode_machine(text, now=NOW, wall=WALL)
    assert said in str(caught.value)


def test_a_blob_from_before_a_field_was_added_reads_it_as_its_default() -> None:
    """An older blob of the same format lacks a field added since: its default."""
    blob = json.loads(encode_machine(FULL, now=NOW, wall=WALL))
    del blob["machine"]["counted_restarts"], blob["machine"]["restarts"]
    restored = decode_machine(json.dumps(blob), now=NOW, wall=WALL)
    assert (restored.restarts, restored.counted_restarts) == (0, ())
    assert restored == dataclasses.replace(FULL, restarts=0, counted_restarts=())


@pytest.mark.parametrize(("earlier", "read"), [
    (None, ()), ([3, {"reason": CRASH.reason, "kind": "crash", "component": "trainer",
                      "status_known": False}], ((3, CRASH),))])
def test_a_version_1_blob_s_one_earlier_attempt_reads_as_the_list_of_it(
        earlier: object, read: tuple[tuple[int, Failure], ...]) -> None:
    """Version 1 kept one earlier attempt waiting for its status (or null); version 2 a list."""
    blob = json.loads(encode_machine(FULL, now=NOW, wall=WALL))
    del blob["machine"]["unsaid"]
    blob["version"], blob["machine"]["earlier"] = 1, earlier
    restored = decode_machine(json.dumps(blob), now=NOW, wall=WALL)
    assert restored == dataclasses.replace(FULL, earlier=read, unsaid=None)
