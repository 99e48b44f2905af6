"""Every reap on the record (issue 33 item 3): what a reap stopped or left goes into the events
of the run each process belongs to, in its airvisor's store (real SQLite), with who reaped; a
run no state dir knows is said to be so. Then the standalone `airvisor reap` end to end on
real marked processes."""

from __future__ import annotations

import pwd
from pathlib import Path
from typing import Any

from airvisor.policy import Phase
from airvisor.reaper import ProcessOutcome, Reaper, by_run, record_reap
from airvisor.store import Store

BY = Reaper(user="ada", uid=1000, pid=4242, what="airvisor reap")


def outcome(pid: int, run_id: str | None, state_dir: str | None = None,
            action: str = "stopped") -> ProcessOutcome:
    return ProcessOutcome(pid, f"python -m x {pid}", f"airvisor run {run_id}" if run_id else
                          "nobody (not started by airvisor)", f"reason {pid}", action,
                          "not ours" if action == "left" else None, run_id=run_id,
                          run_state_dir=state_dir)


def store_with(state_dir: Path, *run_ids: str) -> Store:
    store = Store(state_dir / "airvisor.sqlite3")
    for run_id in run_ids:
        store.create_run(run_id=run_id, name=run_id, profile_path=None, profile={},
                         run_dir=str(state_dir / run_id), gpus=[], supervisor_pid=None)
        store.set_phase(run_id, Phase.FAILED)
    return store


def test_outcomes_are_grouped_by_run_and_its_airvisor(tmp_path: Path) -> None:
    own, other = str(tmp_path / "own"), str(tmp_path / "other")
    groups = by_run([outcome(1, "a", other), outcome(2, None), outcome(3, "b"),
                     outcome(4, "a", other, "left"), outcome(5, "a")], own)
    assert [(g.run_id, g.state_dir, [o.pid for o in g.outcomes]) for g in groups] == [
        ("a", other, [1, 4]), ("b", own, [3]), ("a", own, [5])]


def test_each_run_gets_its_part_in_its_own_airvisors_store(tmp_path: Path) -> None:
    own, other = tmp_path / "own", tmp_path / "other"
    own_store, other_store = store_with(own, "mine"), store_with(other, "theirs")
    notes = record_reap(
        [outcome(10, "mine", str(own)), outcome(11, "theirs", str(other), "left"),
         outcome(12, None), outcome(13, "mine", None, "killed")],
        BY, own_state_dir=str(own))
    assert [(n.run_id, n.recorded_in) for n in notes] == [("mine", str(own)),
                                                          ("theirs", str(other))]
    [mine] = [e for e in own_store.events("mine") if e.kind == "reap"]
    assert [p["pid"] for p in mine.data["processes"]] == [10, 13]
    assert mine.data["processes"][1] == {
        "pid": 13, "command": "python -m x 13", "owner": "airvisor run mine",
        "reason": "reason 13", "action": "killed", "run_id": "mine"}
    assert mine.data["by"] == {"user": "ada", "uid": 1000, "pid": 4242, "what": "airvisor reap"}
    assert "2 process(es) stopped, 0 left alone" in mine.message
    assert mine.message.endswith("(reap: airvisor reap, run by user ada (uid 1000) as pid 4242)")
    [theirs] = [e for e in other_store.events("theirs") if e.kind == "reap"]
    assert theirs.data["processes"][0]["action"] == "left"
    assert theirs.data["processes"][0]["why_left"] == "not ours"


def test_a_run_whose_named_store_is_gone_is_recorded_in_ours_when_ours_knows_it(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own"
    store = store_with(own, "moved")
    [note] = record_reap([outcome(1, "moved", str(tmp_path / "gone"))], BY,
                         own_state_dir=str(own))
    assert note.recorded_in == str(own)
    assert [e.kind for e in store.events("moved")].count("reap") == 1


def test_a_run_no_state_dir_knows_is_said_to_be_so_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    own, other = tmp_path / "own", tmp_path / "other"
    store_with(own, "known")
    [note] = record_reap([outcome(1, "ghost", str(other), "left")], BY, own_state_dir=str(own))
    assert note.recorded_in is None
    assert note.text.startswith("run ghost is known to no airvisor state dir (looked in "
                                f"{other}: no airvisor store; {own}: the store has no such run)")
    assert not (other / "airvisor.sqlite3").exists()  # no store is made up for it


def test_a_store_that_cannot_be_written_is_said_to_be_so(tmp_path: Path) -> None:
    own = tmp_path / "own"
    store_with(own, "r")

    def read_only(path: Path) -> Store:
        raise PermissionError(f"{path}: read-only")

    [note] = record_reap([outcome(1, "r")], BY, own_state_dir=str(own), open_store=read_only)
    assert note.recorded_in is None
    assert note.text.startswith("run r's events could not be written (looked in ")
    assert "read-only" in note.text


def test_runs_the_caller_records_itself_are_skipped(tmp_path: Path) -> None:
    own = tmp_path / "own"
    store = store_with(own, "starting", "old")
    notes = record_reap([outcome(1, "starting"), outcome(2, "old")], BY,
                        own_state_dir=str(own), skip_runs=("starting",))
    assert [n.run_id for n in notes] == ["old"]
    assert all(e.kind != "reap" for e in store.events("starting"))


def test_standalone_reap_writes_the_runs_events_and_names_an_unknown_run(
    scenario: Any,
) -> None:
    """`airvisor reap --yes` (in its own PID namespace) on a process of a failed run and one
    of a run no store knows; then the daemon's reap on another process of the failed run."""
    result = scenario("reap_record")
    assert result["rc"] == 0, (result["out"], result["err"])
    assert result["ghost_alive"] is True  # nothing shows its run is stale: left alone
    assert "recorded in run r-dead's events" in result["out"]
    assert "run r-ghost is known to no airvisor state dir" in result["err"]
    [event] = [e for e in result["events"] if e["kind"] == "reap"
               and e["data"]["by"]["what"] == "airvisor reap"]
    [process] = event["data"]["processes"]
    assert process["pid"] == result["dead"] and process["command"] == "sleep 600"
    assert process["action"] == "stopped" and process["owner"] == "airvisor run r-dead"
    assert "marker: run r-dead" in process["reason"]
    by = event["data"]["by"]
    assert by["what"] == "airvisor reap" and by["uid"] == result["uid"]
    assert by["user"] == pwd.getpwuid(result["uid"]).pw_name and by["pid"] > 1
    # The daemon's POST /reap is on the record too.
    assert result["again"] in result["daemon_reaped"]
    [daemons] = [e for e in result["events"] if e["data"].get("by", {}).get("what")
                 == "the daemon's POST /reap"]
    assert [p["pid"] for p in daemons["data"]["processes"]] == [result["again"]]
