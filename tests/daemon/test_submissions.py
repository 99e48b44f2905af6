"""One submission is at most one run, whatever times out (issue 29 item 4).

A real uvicorn on loopback in front of the real engine (conftest's `api`), made slow to answer
a submission by a gate in front of its RunService: the submission waits there until the test
opens it, so the CLI's short timeout fires for certain (nothing here depends on how fast
anything runs). The CLI is `python -m airvisor` as a user runs it. And `airvisor daemon` itself,
stopped with SIGSTOP while a submission is in flight: a daemon that does not even accept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airvisor.cli._submit import (
    EXIT_NOT_CONFIRMED,
    Lookup,
    submit_to_daemon,
    unconfirmed_outcome,
)
from airvisor.daemon import DaemonClient
from airvisor.daemon._submissions import Refusal, Submissions
from airvisor.proc import processes_with_marker
from airvisor.profile import Profile
from airvisor.store import RunRecord

from .conftest import (
    PROFILE_NAME,
    TOKEN,
    Api,
    DaemonProcess,
    api_profile,
    wait_for,
    write_profile,
)


class GatedService:
    """The engine behind a gate: submit waits until the test opens it (a daemon slow to check
    a submission, as a long preflight makes it), then goes on as the engine does."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def submit(self, profile: Profile, **kwargs: Any) -> RunRecord:
        self.waiting.set()
        assert self.gate.wait(120), "the test never opened the gate"
        record: RunRecord = self._engine.submit(profile, **kwargs)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@pytest.fixture
def gated(api: Api) -> Iterator[GatedService]:
    service = GatedService(api.manager)
    api.ctx.service = service
    try:
        yield service
    finally:
        service.gate.set()  # never leave a handler waiting


class Cli:
    """`python -m airvisor ...` against the test's daemon, its stderr read as it comes."""

    def __init__(self, api: Api, *args: str, **env: str) -> None:
        environ = {**os.environ, "AIRVISOR_URL": api.url, "AIRVISOR_TOKEN": TOKEN,
                   "AIRVISOR_PROFILES": str(api.profiles),
                   "AIRVISOR_STATE_DIR": str(api.tmp / "cli-state"), **env}
        self.proc = subprocess.Popen([sys.executable, "-m", "airvisor", *args], env=environ,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=api.tmp)
        self.err: list[str] = []
        assert self.proc.stderr is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stderr,),
                                        daemon=True)
        self._reader.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.err.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.err)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # stderr is the reader thread's alone
        self.proc.wait(timeout)
        self._reader.join(10)
        return self.proc.returncode, out, "".join(self.err)


def cli(api: Api, *args: str, **env: str) -> tuple[int, str, str]:
    return Cli(api, *args, **env).finish()


def runs_of(api: Api) -> list[RunRecord]:
    return api.store.list_runs(1000)


# -- the CLI's last word, decided (pure) ---------------------------------------------------------
@pytest.mark.parametrize(("lookup", "code", "words"), [
    (Lookup("created", run_id="r-1"), 0, "created run r-1"),
    (Lookup("refused", detail="GPU 0 is in use"), 2, "refused the run (request id q): GPU 0"),
    (Lookup("not_created"), 2, "did not create a run for this submission (request id q): "
                               "nothing was started. `airvisor status --request-id q`"),
    (Lookup("in_progress"), EXIT_NOT_CONFIRMED, "not confirmed: the daemon is still checking"),
    (Lookup("unanswered", detail="timed out"), EXIT_NOT_CONFIRMED,
     "did not answer the lookup either (timed out)"),
])
def test_what_the_cli_says_of_an_unconfirmed_submission(lookup: Lookup, code: int,
                                                        words: str) -> None:
    message, exit_code = unconfirmed_outcome(lookup, "q")
    assert exit_code == code and words in message, message
    if code == EXIT_NOT_CONFIRMED:
        assert "airvisor status --request-id q" in message and "safe to repeat" in message


def test_the_registry_of_submissions_in_progress_and_refused() -> None:
    subs = Submissions(keep_refused=2)
    assert subs.known("a") is None
    assert subs.begin("a") and not subs.begin("a")  # the same request twice at once
    in_progress = subs.known("a")
    assert in_progress is not None and in_progress.state == "in_progress"
    subs.end("a", Refusal(409, "GPU 0 is in use"))
    known = subs.known("a")
    assert known is not None and known.state == "refused" and known.refusal == Refusal(
        409, "GPU 0 is in use")
    assert subs.begin("a")  # a refusal created nothing: trying again is a new try
    subs.end("a")
    assert subs.known("a") is None  # created: the store has it
    for rid in ("b", "c", "d"):
        subs.begin(rid)
        subs.end(rid, Refusal(422, rid))
    assert subs.known("b") is None and subs.known("d") is not None  # bounded, oldest first


# -- the API --------------------------------------------------------------------------------------
def test_a_repeated_request_id_answers_the_same_run(api: Api) -> None:
    with api.client() as client:
        first = client.post("/runs", json={"profile": PROFILE_NAME, "request_id": "job-42"})
        assert first.status_code == 201, first.text
        run_id = first.json()["id"]
        assert first.json()["request_id"] == "job-42"
        again = client.post("/runs", json={"profile": PROFILE_NAME, "request_id": "job-42"})
        assert again.status_code == 200, again.text
        assert again.json()["id"] == run_id
        found = client.get("/submissions/job-42")
        assert found.status_code == 200
        assert found.json() | {"detail": ""} == {"request_id": "job-42", "state": "created",
                                                 "run_id": run_id, "detail": "", "status": None}
        unknown = client.get("/submissions/never-sent")
        assert unknown.status_code == 404 and "safe" in unknown.json()["detail"]
        bad = client.post("/runs", json={"profile": PROFILE_NAME, "request_id": "a b"})
        assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["body",
                                                                            "request_id"]
    assert [r.id for r in runs_of(api)] == [run_id]


def test_while_a_submission_is_checked_its_repeat_is_refused_and_it_shows_in_progress(
        api: Api, gated: GatedService) -> None:
    body = {"profile": PROFILE_NAME, "request_id": "slow-1"}
    answers: list[httpx.Response] = []
    with api.client() as client:
        first = threading.Thread(target=lambda: answers.append(client.post("/runs", json=body)))
        first.start()
        assert gated.waiting.wait(60)
        with api.client() as other:
            assert other.get("/submissions/slow-1").json()["state"] == "in_progress"
            repeat = other.post("/runs", json=body)
            assert repeat.status_code == 409 and "in progress" in repeat.json()["detail"]
        gated.gate.set()
        first.join(60)
    assert [a.status_code for a in answers] == [201]
    assert [r.id for r in runs_of(api)] == [answers[0].json()["id"]]


# -- the CLI against a daemon slow to answer -----------------------------------------------------
def test_a_timed_out_submission_is_looked_up_and_the_same_submission_gives_one_run(
        api: Api, gated: GatedService) -> None:
    start = Cli(api, "start", PROFILE_NAME, "--request-id", "user-1",
                AIRVISOR_SUBMIT_TIMEOUT="1")
    wait_for(lambda: start.said("not confirmed"), "the CLI says the submission is not confirmed")
    assert start.said("no answer within 1 s") and start.said("request id user-1")
    assert gated.waiting.is_set()
    gated.gate.set()  # the daemon goes on and creates the run; the CLI finds it
    code, out, err = start.finish()
    run = api.store.run_by_request("user-1")
    assert run is not None
    assert code == 0, (out, err)
    assert f"the daemon created run {run.id} for this submission" in out
    # The user submits again, the same submission: the same run, no second one.
    code, out, err = cli(api, "start", PROFILE_NAME, "--request-id", "user-1")
    assert code == 0, (out, err)
    assert f"already had this submission (request id user-1): run {run.id}" in out
    assert [r.id for r in runs_of(api)] == [run.id]
    # And status finds it by the request id.
    code, out, err = cli(api, "status", "--request-id", "user-1", "--json")
    assert code == 0, err
    assert f'"id": "{run.id}"' in out and '"request_id": "user-1"' in out


def test_not_confirmed_then_checked_with_status(api: Api, gated: GatedService) -> None:
    code, out, err = cli(api, "start", PROFILE_NAME, "--request-id", "user-2",
                         AIRVISOR_SUBMIT_TIMEOUT="1", AIRVISOR_CONFIRM_WAIT="0")
    assert code == EXIT_NOT_CONFIRMED, (out, err)
    assert "not confirmed: the daemon is still checking it (request id user-2)" in err
    assert "`airvisor status --request-id user-2`" in err
    code, _, err = cli(api, "status", "--request-id", "user-2")
    assert code == EXIT_NOT_CONFIRMED and "still checking" in err
    gated.gate.set()
    run = wait_for(lambda: api.store.run_by_request("user-2"), "the run created")
    code, out, err = cli(api, "status", "--request-id", "user-2")
    assert code == 0 and run.id in out, err
    code, _, err = cli(api, "status", "--request-id", "never-sent")
    assert code == 2 and "no run was created for request id 'never-sent'" in err


def test_a_timed_out_submission_the_daemon_then_refuses(api: Api, gated: GatedService) -> None:
    """The second run of a profile conflicts with the first, still training (its output dir):
    the daemon refuses it after the client gave up waiting; the lookup reports the refusal."""
    endless = write_profile(api.profiles / "endless.toml",
                            api_profile(api.tmp, "endless", max_steps=10**9))
    gated.gate.set()
    code, out, err = cli(api, "start", str(endless), "--request-id", "first")
    assert code == 0, (out, err)
    gated.gate.clear()
    gated.waiting.clear()
    start = Cli(api, "start", str(endless), "--request-id", "second",
                AIRVISOR_SUBMIT_TIMEOUT="1")
    wait_for(lambda: start.said("not confirmed"), "the CLI says the submission is not confirmed")
    gated.gate.set()
    code, out, err = start.finish()
    assert code == 2, (out, err)
    assert "the daemon refused the run (request id second):" in err
    assert api.store.run_by_request("second") is None
    assert len(runs_of(api)) == 1


def test_a_stopped_daemon_then_the_same_submission_gives_one_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`airvisor daemon` under SIGSTOP: the kernel completes connections, nobody answers. The
    CLI's submission (its own code, in this process: found the daemon, then the daemon stops)
    and its lookup both go unanswered: not confirmed, exit 4. Once the daemon runs again, the
    same `airvisor start` gives exactly one run, whichever way uvicorn dealt with the request
    its client had abandoned."""
    profiles = tmp_path / "profiles"
    profile = write_profile(profiles / f"{PROFILE_NAME}.toml", api_profile(tmp_path))
    daemon = DaemonProcess(tmp_path, "--no-auth", "--stop-runs",
                           env={"AIRVISOR_PROFILES": str(profiles)})
    run_ids: list[str] = []
    try:
        daemon.wait_ready()
        client = DaemonClient.connect(daemon.url, timeout=5)
        assert client is not None
        monkeypatch.setenv("AIRVISOR_SUBMIT_TIMEOUT", "1")
        monkeypatch.setenv("AIRVISOR_CONFIRM_WAIT", "1")
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            with client:
                run_id, code = submit_to_daemon(client, str(profile), {}, "auto", "stopped-1")
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        err = capsys.readouterr().err
        assert (run_id, code) == (None, EXIT_NOT_CONFIRMED), err
        assert "no answer within 1 s: the submission is not confirmed (request id stopped-1)" \
            in err
        assert "did not answer the lookup either" in err
        assert "`airvisor status --request-id stopped-1`" in err
        env = {**os.environ, "AIRVISOR_URL": daemon.url, "AIRVISOR_PROFILES": str(profiles),
               "AIRVISOR_STATE_DIR": str(tmp_path / "cli-state")}
        again = subprocess.run([sys.executable, "-m", "airvisor", "start", PROFILE_NAME,
                                "--request-id", "stopped-1"], env=env, capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 0, (again.stdout, again.stderr)
        runs = httpx.get(f"{daemon.url}/runs", timeout=10).json()
        run_ids = [r["id"] for r in runs]
        assert len(run_ids) == 1, runs
        assert run_ids[0] in again.stdout
        found = httpx.get(f"{daemon.url}/submissions/stopped-1", timeout=10).json()
        assert found["state"] == "created" and found["run_id"] == run_ids[0]
    finally:
        daemon.stop()
        leftovers = [p for run_id in run_ids for p in processes_with_marker(run_id)]
        for proc in leftovers:
            proc.kill()
        assert not leftovers, daemon.output()
