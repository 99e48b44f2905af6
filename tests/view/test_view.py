"""The run's view model, its renderer, the progress view and the log reader."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from airvisor.daemon._models import RunOut
from airvisor.store import ComponentRecord, EventRecord, RestartRecord, RunRecord, Store
from airvisor.view import (
    ComponentView,
    LogNotFound,
    LogStream,
    ProgressView,
    RunView,
    Shown,
    StoreSource,
    build_run_view,
    event_line,
    find_log,
    find_run,
    pipe_progress_due,
    progress_line,
    render_run,
    run_view,
    to_text,
)

from ..records import move_run

NOW = 1_000_000.0


def record(**changes: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        id="demo-1", name="demo", profile_path="/etc/airvisor/profiles/demo.toml",
        profile={"run": {"max_steps": 30, "demo": True}}, run_dir="/out/demo",
        state="recovering", attempt=2, step=17, last_progress_at=NOW - 30, resume_step=15,
        last_error="trainer exited with code 1", restarts=1, gpus=[0, 1], supervisor_pid=4242,
        supervisor_started=NOW - 500, created_at=NOW - 600, updated_at=NOW - 5, ended_at=None,
        phase="backoff", supervisor_kind="daemon", supervisor_address="http://127.0.0.1:8765",
        details={"slurm_job_id": 981, "slurm_nodes": ["gpu01", "gpu02"],
                 "slurm_state": "RUNNING", "other": 1})
    base.update(changes)
    return RunRecord(**base)


def sample(**changes: Any) -> RunView:
    trainer = ComponentRecord(run_id="demo-1", attempt=2, name="trainer", kind="process",
                              state="exited", pid=12, gpus=[1], exit_code=1, restarts=1,
                              log_path="/out/demo/trainer.log", updated_at=NOW - 31)
    box = ComponentRecord(run_id="demo-1", attempt=2, name="mlgym-0", kind="container",
                          state="running", container_id="0123456789abcdef0", health="healthy")
    events = [EventRecord(id=7, run_id="demo-1", at=NOW - 40, kind="exit", component="trainer",
                          message="exited with code 1 [rank 0]", data={"last_lines": [
                              "\x1b[31mTraceback\x1b[0m", "RuntimeError: boom"]}),
              EventRecord(id=8, run_id="demo-1", at=NOW - 35, kind="backoff", component=None,
                          message="restarting in 5 s", data={})]
    attempts = [
        {"number": 1, "started_at": NOW - 590, "ended_at": NOW - 40, "resume_step": None,
         "cause": "first", "outcome": "failed", "reason": "trainer exited with code 1",
         "details": {}},
        {"number": 2, "started_at": NOW - 30, "ended_at": None, "resume_step": 15,
         "cause": "crash", "outcome": None, "reason": None, "details": {"note": "x"}},
    ]
    restarts = [RestartRecord(run_id="demo-1", at=NOW - 40, attempt=1, kind="crash",
                              reason="trainer exited with code 1", counted=True)]
    return run_view(record(**changes), components=[trainer, box], events=events,
                    attempts=attempts, restarts=restarts,
                    containment="cgroup v2 (/sys/fs/cgroup/airvisor)")


def test_the_view_carries_every_record() -> None:
    view = sample()
    assert (view.profile_name, view.max_steps, view.demo, view.phase) == (
        "demo", 30, True, "backoff")
    assert view.slurm is not None
    assert (view.slurm.job_id, view.slurm.nodes, view.slurm.state) == (
        "981", ["gpu01", "gpu02"], "RUNNING")
    assert view.details["other"] == 1
    assert [a.cause for a in view.attempts] == ["first", "crash"]
    assert view.restart_history[0].counted is True
    assert [c.name for c in view.components] == ["trainer", "mlgym-0"]
    assert view.live is True  # "recovering" is live


def test_no_slurm_facts_no_slurm_view() -> None:
    assert sample(details={}).slurm is None
    assert sample(details={"slurm_nodes": "gpu[01-02]"}).slurm.nodes == [  # type: ignore[union-attr]
        "gpu[01-02]"]


def test_the_api_answer_reads_back_as_the_same_view() -> None:
    """The daemon path of `status` validates the API's JSON (RunOut: the view plus snapshot
    fields) into the view: nothing is lost or changed on the way."""
    view = sample()
    answer = RunOut(**dict(view), seconds_since_progress=30.0, generated_at=NOW)
    back = RunView.model_validate_json(answer.model_dump_json())
    assert back == view
    assert back.model_dump_json() == view.model_dump_json()


def test_status_text_of_a_live_run() -> None:
    text = to_text(render_run(sample(), now=NOW))
    lines = text.splitlines()
    assert lines[0].split() == ["run", "demo-1", "(profile", "demo)", "demo:", "the", "real",
                                "supervisor", "over", "simulated", "components"]
    assert "recovering  (phase backoff)" in text
    assert "restarts 1 (1 crash; 1 toward the crash-loop limit)" in text
    assert "17/30   last progress 30s ago" in text
    assert "from step 15" in text
    assert "daemon at http://127.0.0.1:8765 (pid 4242)" in text
    assert "cgroup v2 (/sys/fs/cgroup/airvisor)" in text
    assert "job 981 on gpu01,gpu02 (RUNNING)" in text
    assert "trainer exited with code 1" in text
    trainer_row = next(line for line in lines if line.startswith("trainer "))
    assert trainer_row.split() == ["trainer", "exited", "12", "1", "1", "1", "-", "-"]
    box_row = next(line for line in lines if line.startswith("mlgym-0"))
    assert box_row.split() == ["mlgym-0", "running", "-", "-", "-", "0", "healthy",
                               "0123456789ab"]
    # Two attempts: the table says why each started and where it resumed.
    attempt_row = next(line for line in lines if line.lstrip().startswith("2 "))
    assert attempt_row.split()[:5] == ["2", time.strftime("%H:%M:%S", time.localtime(NOW - 30)),
                                       "crash", "-", "15"]
    # A message's brackets are text, not markup.
    stamp = time.strftime("%H:%M:%S", time.localtime(NOW - 40))
    assert f"  {stamp} [trainer] exited with code 1 [rank 0]" in lines


def test_status_shows_the_scope_of_each_recovery() -> None:
    """Issue 22: each attempt's row says whether its recovery kept the inference server, or
    restarted everything and why."""
    view = sample()
    kept = view.attempts[1].model_copy(update={"scope": "keep_inference",
                                               "scope_reason": "kept"})
    full = kept.model_copy(update={"number": 3, "scope": "full", "scope_reason": "repeated"})
    text = to_text(render_run(view.model_copy(update={"attempts": [
        view.attempts[0], kept, full]}), now=NOW), width=160)
    assert "SCOPE" in text and "kept inference" in text and "full (repeated)" in text


def test_status_shows_where_a_hung_attempt_was_stuck() -> None:
    """Issue 23: the stacks taken before a stall kill stay under the attempt's row in `airvisor
    status`, long after the event has left the recent events."""
    view = sample()
    hung = view.attempts[0].model_copy(update={
        "reason": "hung: step 12 has not advanced for 10 s (health.stall_timeout)",
        "details": {"stacks": ["trainer rank 0: sleeping in inject_faults_before_step "
                               "(airvisor/demo/_steps.py:140)"]}})
    text = to_text(render_run(view.model_copy(update={"attempts": [hung, *view.attempts[1:]]}),
                              now=NOW), width=160)
    assert "stuck: trainer rank 0: sleeping in inject_faults_before_step" in text


def test_status_leads_a_hung_attempts_stacks_with_the_line_across_the_ranks() -> None:
    """Issue 31 item 5: the one line across the ranks, above each process's verdict."""
    view = sample()
    across = ("trainer rank 0 waiting on the GPU in synchronize after all_reduce; rank 1 is "
              "elsewhere (the odd one out): sleeping in stop_calling_all_reduce")
    hung = view.attempts[0].model_copy(update={
        "reason": "hung: step 12 has not advanced for 10 s (health.stall_timeout)",
        "details": {"stacks_summary": across,
                    "stacks": ["trainer rank 1: sleeping in stop_calling_all_reduce"]}})
    text = to_text(render_run(view.model_copy(update={"attempts": [hung, *view.attempts[1:]]}),
                              now=NOW), width=300)
    assert f"hang: {across}" in text
    assert text.index("hang: trainer rank 0") < text.index("stuck: trainer rank 1")


def test_status_text_of_an_ended_run_does_not_depend_on_now() -> None:
    view = sample(state="failed", phase=None, ended_at=NOW - 1, details={},
                  supervisor_kind="foreground", supervisor_address=None)
    first = to_text(render_run(view, now=NOW))
    assert first == to_text(render_run(view, now=NOW + 3600))
    stamp = time.strftime("%H:%M:%S", time.localtime(NOW - 30))
    assert f"last progress at {stamp}" in first
    assert "foreground `airvisor start` (pid 4242)" in first
    assert "slurm" not in first and "phase" not in first


def test_a_run_without_steps_or_components() -> None:
    view = run_view(record(step=None, last_progress_at=None, profile={}, details={},
                           resume_step=None, last_error=None, supervisor_kind=None,
                           supervisor_pid=None),
                    components=[], events=[], attempts=[], restarts=[], containment=None)
    text = to_text(render_run(view, now=NOW))
    assert "-   last progress -" in text
    assert "COMPONENT" not in text and "recent events" not in text
    assert "supervisor" not in text and "last error" not in text


def test_ago_reads_like_the_process_tables() -> None:
    from airvisor.view._render import ago

    assert [ago(None), ago(-2), ago(30.4), ago(3725)] == ["-", "0s ago", "30s ago", "1h02m ago"]


def test_progress_line() -> None:
    line = progress_line(sample(state="running")).plain
    assert line == "[running] attempt 2 step 17/30 | trainer=exited"  # containers left out
    member = ComponentView(name="orchestrator", kind="member", attempt=2, state="running",
                           pid=7, pgid=7, gpus=[], restarts=0, exit_code=None,
                           container_id=None, health=None, log_path=None, updated_at=NOW)
    with_member = sample(state="running").model_copy(update={
        "components": [*sample().components, member]})
    assert progress_line(with_member).plain.endswith("| trainer=exited orchestrator=running")


def test_event_line() -> None:
    event = sample().recent_events[1]
    stamp = time.strftime("%H:%M:%S", time.localtime(NOW - 35))
    assert event_line(event).plain == f"{stamp} restarting in 5 s"
    crash = event_line(sample().recent_events[0])
    # Only the time (dim) and the component (cyan) are styled: the message reads normally.
    assert crash.style == "" and [str(span.style) for span in crash.spans] == ["dim", "cyan"]


# -- against a real store ------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state.sqlite3")


def make_run(store: Store, run_id: str = "r-1") -> RunRecord:
    return store.create_run(run_id=run_id, name="r", profile_path=None,
                            profile={"run": {"max_steps": 4}}, run_dir="/out/r", gpus=[0],
                            supervisor_pid=None)


def test_build_run_view_reads_everything_the_store_records(store: Store) -> None:
    run = make_run(store)
    store.start_attempt(run.id, 1, None, cause="first")
    store.merge_attempt_details(run.id, 1, node="gpu01")
    store.end_attempt(run.id, 1, "failed", "trainer exited with code 1")
    store.add_restart(run.id, attempt=1, kind="crash", reason="trainer exited", counted=True)
    store.add_restart(run.id, attempt=2, kind="operator", reason="POST /restart",
                      counted=False)
    store.start_attempt(run.id, 2, 3, cause="operator")
    store.upsert_component(run.id, 2, "trainer", state="running", pid=99, gpus=[0])
    move_run(store, run.id, "running", step=3,
                     supervisor_kind="foreground")
    store.merge_run_details(run.id, slurm_job_id="77", slurm_state="RUNNING")
    store.add_event(run.id, "containment", "processes contained by subreaper fallback (x)")
    for i in range(15):
        store.add_event(run.id, "progress", f"step {i}")
    current = find_run(store, None)
    assert current is not None and find_run(store, "current") == current
    view = build_run_view(store, current)
    assert (view.state, view.attempt, view.step, view.resume_step, view.restarts) == (
        "running", 2, 3, 3, 2)
    assert view.containment == "subreaper fallback (x)"
    assert [m.message for m in view.recent_events] == [f"step {i}" for i in range(5, 15)]
    assert [(a.number, a.cause, a.details) for a in view.attempts] == [
        (1, "first", {"node": "gpu01"}), (2, "operator", {})]
    assert [(r.kind, r.counted) for r in view.restart_history] == [
        ("crash", True), ("operator", False)]
    assert view.slurm is not None and view.slurm.job_id == "77"
    assert [c.pid for c in view.components] == [99]
    text = to_text(render_run(view))
    assert "restarts 2 (1 crash, 1 operator; 1 toward the crash-loop limit)" in text


def test_the_attempts_view_carries_each_recoverys_scope(store: Store) -> None:
    """Issue 22: the scope the supervisor wrote in an attempt's details is a field of the
    attempt's view (what status, the API and the page show); a first attempt, or an older
    record without it, has none."""
    run = make_run(store)
    store.start_attempt(run.id, 1, None, cause="first")
    store.merge_attempt_details(run.id, 1, split=True, prl_run_id=None)
    store.start_attempt(run.id, 2, 3, cause="crash")
    store.merge_attempt_details(run.id, 2, split=True, scope="keep_inference",
                                scope_reason="kept", scope_detail="trainer crashed; kept",
                                scope_at=NOW)
    view = build_run_view(store, store.get_run(run.id) or run)
    assert [(a.scope, a.scope_reason, a.scope_detail) for a in view.attempts] == [
        (None, None, None), ("keep_inference", "kept", "trainer crashed; kept")]
    assert view.attempts[1].details["scope"] == "keep_inference"  # the record, as it was
    # The CLI reads a daemon's JSON into the same model: the fields survive the round trip.
    again = RunView.model_validate_json(view.model_dump_json())
    assert again.attempts == view.attempts
    assert "kept inference" in to_text(render_run(view, now=NOW), width=160)


def test_progress_view_prints_events_and_the_status_line(store: Store) -> None:
    run = make_run(store)
    store.start_attempt(run.id, 1, None)
    store.upsert_component(run.id, 1, "trainer", state="running", pid=5)
    store.add_event(run.id, "milestone", "inference ready")
    store.add_event(run.id, "exit", "exited with code 1", component="trainer",
                    data={"last_lines": [f"line {i}" for i in range(8)]})
    out = io.StringIO()
    view = ProgressView(StoreSource(store, run.id), live=False,
                        console=Console(file=out, width=120, color_system=None))
    view.refresh()
    move_run(store, run.id, "running", step=2)
    view.refresh(final=False)  # throttled: nothing new yet
    time.sleep(0.3)
    view.refresh()
    view.refresh(final=True)
    lines = out.getvalue().splitlines()
    assert not any("inference ready" in line for line in lines)  # milestones: terminal only
    assert lines[0].endswith("[trainer] exited with code 1")
    assert [line.strip() for line in lines[1:6]] == [f"| line {i}" for i in range(3, 8)]
    assert lines[6].endswith("[running] attempt 1 step 2/4 | trainer=running")
    assert len(lines) == 7


def test_progress_view_on_a_terminal_keeps_one_line_below_the_events(store: Store) -> None:
    run = make_run(store)
    store.start_attempt(run.id, 1, None)
    move_run(store, run.id, "running", step=1)
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    view = ProgressView(StoreSource(store, run.id), live=True, console=console)
    view.refresh()
    store.add_event(run.id, "milestone", "trainer ready")
    time.sleep(0.3)
    view.refresh()
    view.refresh(final=True)
    raw = out.getvalue()
    assert "[running] attempt 1 step 1/4" in raw and "trainer ready" in raw
    # The progress line was drawn and taken away again (a transient Live display).
    assert "\x1b[2K" in raw



class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("shown", "state", "attempt", "step", "text", "now", "due"), [
    (None, "running", 1, None, "x", 0.0, False),  # before the first step: nothing
    (None, "running", 1, 0, "x", 0.0, True),  # the first line
    (("running", 1, "a", 0.0), "running", 1, 5, "b", 59.0, False),  # a step: wait
    (("running", 1, "a", 0.0), "running", 1, 5, "b", 60.0, True),  # ... a minute
    (("running", 1, "a", 0.0), "running", 1, 5, "a", 600.0, False),  # unchanged: never
    (("running", 1, "a", 0.0), "recovering", 1, 5, "b", 1.0, True),  # a new state: at once
    (("preflight", 1, "a", 0.0), "preflight", 2, 5, "b", 1.0, True),  # a new attempt too
])
def test_when_a_pipe_gets_the_progress_line(
        shown: tuple[str, int, str, float] | None, state: str, attempt: int, step: int | None,
        text: str, now: float, due: bool) -> None:
    run = sample(state=state, attempt=attempt, step=step)
    before = None if shown is None else Shown(*shown)
    assert pipe_progress_due(before, run, text, now, 60.0) is due


def test_without_a_terminal_each_line_is_whole_and_the_progress_line_is_rare(
        store: Store) -> None:
    run = make_run(store)
    store.start_attempt(run.id, 1, None)
    store.upsert_component(run.id, 1, "trainer", state="running", pid=5)
    long = "trainer exited with status 1 " + "because " * 20 + "(the end)"
    out = io.StringIO()
    clock = FakeClock()
    # rich would wrap at 80 columns when it cannot ask a terminal
    view = ProgressView(StoreSource(store, run.id), live=False, progress_every=10.0,
                        clock=clock, console=Console(file=out, width=80, color_system=None))
    for step in range(40):  # a step every half second
        if step == 30:
            store.add_event(run.id, "failure", long, component="trainer",
                            data={"last_lines": ["x" * 150]})
        move_run(store, run.id, "running" if step < 30 else "recovering", step=step)
        view.refresh()
        clock.now += 0.5
    move_run(store, run.id, "succeeded", step=39)
    view.refresh(final=True)
    lines = out.getvalue().splitlines()
    progress = [line.split(" ", 1)[1] for line in lines if " attempt 1 step " in line]
    assert progress == [
        "[running] attempt 1 step 0/4 | trainer=running",
        "[running] attempt 1 step 20/4 | trainer=running",  # 10 s later
        "[recovering] attempt 1 step 30/4 | trainer=running",  # a new state: at once
        "[succeeded] attempt 1 step 39/4 | trainer=running",  # the end
    ]
    assert any(line.endswith(f"[trainer] {long}") for line in lines)  # one line, 220 chars
    assert any(line.endswith("| " + "x" * 150) for line in lines)
    assert len(lines) == len(progress) + 2


def test_a_view_that_loses_its_terminal_prints_whole_lines_from_then_on(store: Store) -> None:
    run = make_run(store)
    store.start_attempt(run.id, 1, None)
    out = io.StringIO()
    view = ProgressView(StoreSource(store, run.id), live=True,
                        console=Console(file=out, width=40, color_system=None))
    view.live = False  # what the foreground does on SIGHUP, with its output moved to a file
    view.note("terminal closed (SIGHUP): airvisor keeps supervising; its output goes to x")
    assert len(out.getvalue().splitlines()) == 1


# -- logs --------------------------------------------------------------------------------------
def logged_run(store: Store, tmp_path: Path) -> tuple[RunRecord, Path]:
    run = store.create_run(run_id="r-1", name="r", profile_path=None, profile={},
                           run_dir=str(tmp_path / "out"), gpus=[], supervisor_pid=None)
    store.start_attempt(run.id, 1, None)
    path = tmp_path / "out" / "trainer.log"
    path.parent.mkdir(parents=True)
    path.write_text("".join(f"line {i}\n" for i in range(1, 101)))
    store.upsert_component(run.id, 1, "trainer", state="running", log_path=str(path))
    move_run(store, run.id, "running")
    found = store.get_run(run.id)
    assert found is not None
    return found, path


def test_log_stream_tails_then_follows_until_the_run_ends(store: Store, tmp_path: Path
                                                          ) -> None:
    run, path = logged_run(store, tmp_path)
    assert list(LogStream(store, run, "trainer", tail=3).lines(follow=False)) == [
        "line 98\n", "line 99\n", "line 100\n"]
    assert LogStream(store, run, "trainer", tail=0).first == []

    def writer() -> None:
        time.sleep(0.2)
        with path.open("a") as f:
            f.write("line 101\nline 1")
            f.flush()
            time.sleep(0.2)
            f.write("02\npartial")
        time.sleep(0.2)
        move_run(store, run.id, "stopped")

    thread = threading.Thread(target=writer)
    thread.start()
    stream = LogStream(store, run, "trainer", tail=1, recheck=0.05)
    got = list(stream.lines(follow=True, poll=0.02))
    thread.join()
    assert got == ["line 100\n", "line 101\n", "line 102\n", "partial\n"]


def test_log_stream_moves_on_to_the_next_attempt(store: Store, tmp_path: Path) -> None:
    run, _ = logged_run(store, tmp_path)
    stream = LogStream(store, run, "trainer", tail=1, recheck=0.0)
    assert stream.poll() == ([], False)
    second = tmp_path / "out" / "attempt2.log"
    second.write_text("fresh 1\n")
    store.start_attempt(run.id, 2, 50)
    store.upsert_component(run.id, 2, "trainer", state="running", log_path=str(second))
    assert stream.poll() == (["--- airvisor: attempt 2 ---\n"], False)
    assert stream.poll() == (["fresh 1\n"], False)
    # An explicit attempt stays on it.
    old = LogStream(store, run, "trainer", tail=1, attempt=1, recheck=0.0)
    assert old.first == ["line 100\n"] and old.poll() == ([], False)


def test_log_lookup_errors_say_what_there_is(store: Store, tmp_path: Path) -> None:
    run, _ = logged_run(store, tmp_path)
    with pytest.raises(LogNotFound, match=r"no log of 'vllm' in attempt 1 \(known: trainer\)"):
        LogStream(store, run, "vllm", tail=5)
    outside = tmp_path / "elsewhere.log"
    outside.write_text("secret\n")
    store.upsert_component(run.id, 1, "stranger", state="running", log_path=str(outside))
    with pytest.raises(LogNotFound, match="outside the run's directories"):
        find_log(store, run, "stranger")
    store.upsert_component(run.id, 1, "gone", state="exited",
                           log_path=str(tmp_path / "out" / "gone.log"))
    assert LogStream(store, run, "gone", tail=5).first == []  # not written yet: empty


def test_a_slurm_runs_job_log_is_found_per_attempt(store: Store, tmp_path: Path) -> None:
    """Slurm mode: `airvisor logs job` is the job's own output (prime-rl's template writes
    <output_dir>/job_<id>.log), the current attempt's job by default, an earlier one by
    attempt number."""
    run, _ = logged_run(store, tmp_path)
    store.merge_attempt_details(run.id, 1, job_id="41")
    store.start_attempt(run.id, 2, 10, cause="crash")
    store.merge_attempt_details(run.id, 2, job_id="42")
    store.merge_run_details(run.id, slurm_job_id="42", slurm_state="RUNNING")
    (tmp_path / "out" / "job_41.log").write_text("node check: gpu01 clean\nfirst job\n")
    (tmp_path / "out" / "job_42.log").write_text("second job\n")
    run = store.get_run(run.id) or run
    assert LogStream(store, run, "job", tail=5).first == ["second job\n"]
    assert LogStream(store, run, "job", tail=1, attempt=1).first == ["first job\n"]
    one_box, _ = logged_run(Store(tmp_path / "other.sqlite3"), tmp_path / "b")
    with pytest.raises(LogNotFound, match=r"known: trainer\)"):
        find_log(Store(tmp_path / "other.sqlite3"), one_box, "job")
