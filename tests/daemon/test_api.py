"""Every endpoint over a real uvicorn server on loopback, through httpx, in front of the real
engine supervising demo stand-ins (conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from airvisor.policy import Phase
from airvisor.proc import processes_with_marker

from .conftest import PROFILE_NAME, Api, api_profile, wait_for, write_profile


def submit(api: Api, profile: str = PROFILE_NAME, **body: object) -> httpx.Response:
    with api.client() as client:
        return client.post("/runs", json={"profile": profile, **body})


def started(api: Api, **body: object) -> str:
    """A run accepted through the API and training (attempt 1 past step 1)."""
    response = submit(api, **body)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    api.wait_running(run_id)
    return run_id


def finished(api: Api, steps: int = 4) -> str:
    """A run of `steps` steps accepted through the API and trained to its end."""
    response = submit(api, overrides={"prime_rl.overrides.max_steps": steps})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    assert api.wait_ended(run_id).state == "succeeded", api.run(run_id).last_error
    return run_id


def log_lines(api: Api, run_id: str, component: str, attempt: int | None = None) -> list[str]:
    """The lines of a component's log where the engine recorded it."""
    record = next(c for c in api.store.components(run_id, attempt) if c.name == component)
    assert record.log_path is not None
    return Path(record.log_path).read_text().splitlines()


def pids(api: Api, run_id: str, attempt: int) -> dict[str, int]:
    return {c.name: c.pid for c in api.store.components(run_id, attempt) if c.pid is not None}


def test_health_names_the_service_version_and_nvml(api: Api) -> None:
    body = httpx.get(f"{api.url}/health").json()
    assert body["service"] == "airvisor"
    assert body["status"] == "ok"
    assert body["version"]
    assert body["uptime_seconds"] >= 0
    assert body["auth_required"] is True
    assert isinstance(body["nvml_available"], bool)
    assert body["live_runs"] == 0


def test_current_run_is_404_with_a_message_before_any_run(api: Api) -> None:
    response = httpx.get(f"{api.url}/runs/current")
    assert response.status_code == 404
    assert "airvisor start" in response.json()["detail"]


def test_submit_then_read_the_run_every_way(api: Api) -> None:
    response = submit(api, overrides={"prime_rl.overrides.max_steps": 7}, start_mode="fresh")
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["profile_name"] == PROFILE_NAME
    assert run["max_steps"] == 7  # the override reached the loaded profile
    assert run["supervisor_kind"] == "daemon" and run["supervisor_address"] == api.url
    assert api.wait_ended(run["id"]).state == "succeeded"

    current = httpx.get(f"{api.url}/runs/current").json()
    assert current["id"] == run["id"]
    assert (current["state"], current["attempt"]) == ("succeeded", 1)
    # The step is the trainer's last step line (prime-rl's own numbering).
    trainer_log = "\n".join(log_lines(api, run["id"], "trainer"))
    step = current["step"]
    assert f"Step {step} |" in trainer_log and f"Step {step + 1} |" not in trainer_log
    assert current["seconds_since_progress"] is not None
    # The launcher the engine started, and prime-rl's processes it found below it.
    names = {c["name"] for c in current["components"]}
    assert names >= {"launcher", "inference", "orchestrator", "trainer"}
    launcher = next(c for c in current["components"] if c["name"] == "launcher")
    assert launcher["pid"] == api.store.components(run["id"])[0].pid
    kinds = [e["kind"] for e in httpx.get(f"{api.url}/runs/{run['id']}/events").json()]
    assert kinds[0] == "submitted" and "attempt" in kinds

    assert httpx.get(f"{api.url}/runs/{run['id']}").json()["id"] == run["id"]
    listed = httpx.get(f"{api.url}/runs").json()
    assert [r["id"] for r in listed] == [run["id"]]
    assert httpx.get(f"{api.url}/health").json()["live_runs"] == 0


def test_health_counts_the_live_runs(api: Api) -> None:
    run_id = started(api)
    assert httpx.get(f"{api.url}/health").json()["live_runs"] == 1
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    api.wait_ended(run_id)
    wait_for(lambda: httpx.get(f"{api.url}/health").json()["live_runs"] == 0,
             "no live run on /health")


def test_unknown_and_malformed_run_ids(api: Api) -> None:
    assert httpx.get(f"{api.url}/runs/nope-1").status_code == 404
    assert "GET /runs" in httpx.get(f"{api.url}/runs/nope-1").json()["detail"]
    assert httpx.get(f"{api.url}/runs/..%2F..%2Fetc").status_code in (404, 422)
    assert httpx.get(f"{api.url}/runs/{'x' * 300}").status_code == 422
    assert httpx.get(f"{api.url}/runs/nope-1/events").status_code == 404


def test_events_after_an_id(api: Api) -> None:
    run_id = finished(api)  # ended: no event of its own comes between the two below
    api.store.add_event(run_id, "progress", "step 4")
    api.store.add_event(run_id, "progress", "step 5")
    events = httpx.get(f"{api.url}/runs/{run_id}/events").json()
    assert [e["message"] for e in events][-2:] == ["step 4", "step 5"]
    later = httpx.get(f"{api.url}/runs/{run_id}/events",
                      params={"after": events[-2]["id"]}).json()
    assert [e["message"] for e in later] == ["step 5"]
    assert httpx.get(f"{api.url}/runs/{run_id}/events", params={"after": -1}).status_code == 422


def test_logs_tail_and_component_validation(api: Api) -> None:
    run_id = finished(api)  # ended: its logs no longer grow
    for name in ("trainer", "launcher"):
        lines = log_lines(api, run_id, name)
        assert len(lines) > 3, (name, lines)
        response = httpx.get(f"{api.url}/runs/{run_id}/logs/{name}", params={"tail": 3})
        assert response.status_code == 200
        assert response.text == "".join(f"{line}\n" for line in lines[-3:])
    missing = httpx.get(f"{api.url}/runs/{run_id}/logs/vllm")
    assert missing.status_code == 404
    assert "inference, launcher, orchestrator, trainer" in missing.json()["detail"]
    for bad in ("..%2F..%2Fetc%2Fpasswd", "..trainer", "%2Fetc%2Fpasswd", "trainer.log%00"):
        code = httpx.get(f"{api.url}/runs/{run_id}/logs/{bad}").status_code
        assert code in (404, 422), (bad, code)


def test_logs_are_served_from_the_run_dir_and_the_engines_attempt_dir_only(api: Api) -> None:
    # The engine writes the logs of the processes it starts to <state dir>/runs/<run id>/
    # attempt_N/ (next to the store); prime-rl's own logs live in the run directory.
    state = api.store.path.parent
    run_dir = api.tmp / "prime-rl-out"
    logs = {
        "launcher": state / "runs" / "r-1" / "attempt_1" / "launcher.log",
        "trainer": run_dir / "logs" / "trainer.log",
        "stranger": state / "runs" / "r-2" / "attempt_1" / "launcher.log",  # another run's
        "escape": run_dir / ".." / "elsewhere.log",
    }
    api.store.create_run(run_id="r-1", name="r", profile_path=None, profile={},
                         run_dir=str(run_dir), gpus=[], supervisor_pid=None)
    api.store.start_attempt("r-1", 1, None)
    for name, path in logs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name} says hello\n")
        api.store.upsert_component("r-1", 1, name, state="running", log_path=str(path))
    for name in ("launcher", "trainer"):
        response = httpx.get(f"{api.url}/runs/r-1/logs/{name}")
        assert response.status_code == 200 and response.text == f"{name} says hello\n"
    for name in ("stranger", "escape"):
        refused = httpx.get(f"{api.url}/runs/r-1/logs/{name}")
        assert refused.status_code == 404
        assert "outside the run's directories" in refused.json()["detail"]


def follow(api: Api, run_id: str, component: str, received: list[str]) -> threading.Thread:
    """A client following the component's log from its last line, on a thread."""
    def read() -> None:
        with httpx.stream("GET", f"{api.url}/runs/{run_id}/logs/{component}",
                          params={"tail": 1, "follow": "true"}, timeout=60) as response:
            received.extend(response.iter_lines())

    reader = threading.Thread(target=read)
    reader.start()
    return reader


def test_logs_follow_streams_new_lines_until_the_run_ends(api: Api) -> None:
    run_id = started(api)
    received: list[str] = []
    reader = follow(api, run_id, "trainer", received)
    wait_for(lambda: len(received) >= 3, "new trainer lines streamed while it trains")
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    reader.join(60)
    assert not reader.is_alive(), "the stream did not end with the run"
    assert api.run(run_id).state == "stopped"
    # Every line from the one it started at to the end of the log, in order.
    lines = log_lines(api, run_id, "trainer")
    assert received == lines[len(lines) - len(received):]


def test_logs_follow_flushes_an_unterminated_last_line_when_the_run_ends(api: Api) -> None:
    log_path = api.tmp / "out" / "logs" / "trainer.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text("first\n")
    api.store.create_run(run_id="r-1", name="r", profile_path=None, profile={},
                         run_dir=str(api.tmp / "out"), gpus=[], supervisor_pid=None)
    api.store.start_attempt("r-1", 1, None)
    api.store.upsert_component("r-1", 1, "trainer", state="running", log_path=str(log_path))
    received: list[str] = []
    reader = follow(api, "r-1", "trainer", received)
    wait_for(lambda: received, "the log's last line")
    with log_path.open("a") as out:
        out.write("step 4 done\nstep 5 done\npartial")
    wait_for(lambda: len(received) >= 3, "the appended lines")
    api.store.set_phase("r-1", Phase.STOPPED)  # the run ends (as `airvisor stop` ends one)
    reader.join(30)
    assert not reader.is_alive(), "the stream did not end with the run"
    assert received == ["first", "step 4 done", "step 5 done", "partial"]


def test_logs_follow_moves_on_to_the_next_attempt(api: Api) -> None:
    # The launcher's log: the engine writes one per attempt (<state>/runs/<id>/attempt_N/).
    run_id = started(api)
    received: list[str] = []
    reader = follow(api, run_id, "launcher", received)
    wait_for(lambda: received, "the launcher's last line")
    marker = "--- airvisor: attempt 2 ---"
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
        api.wait_running(run_id, attempt=2)
        wait_for(lambda: marker in received and received[-1] != marker,
                 "attempt 2's launcher lines streamed")
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    reader.join(60)
    assert not reader.is_alive()
    first, second = log_lines(api, run_id, "launcher", 1), log_lines(api, run_id, "launcher", 2)
    state = api.store.path.parent
    assert [c.log_path for c in api.store.components(run_id, 2) if c.name == "launcher"] == [
        str(state / "runs" / run_id / "attempt_2" / "launcher.log")]
    at = received.index(marker)
    assert received[:at] == first[len(first) - at:]  # attempt 1's log to its end
    assert received[at + 1:] == second  # then attempt 2's whole log
    # An explicit attempt is served as it is, without switching.
    old = httpx.get(f"{api.url}/runs/{run_id}/logs/launcher", params={"attempt": 1, "tail": 1})
    assert old.text == f"{first[-1]}\n"
    assert httpx.get(f"{api.url}/runs/{run_id}/logs/launcher",
                     params={"attempt": 7}).status_code == 404


def test_stop_and_restart(api: Api) -> None:
    run_id = started(api)
    api.wait_running(run_id, step=4)  # a checkpoint to resume from (every 2 steps)
    first = pids(api, run_id, 1)
    with api.client() as client:
        restarted = client.post(f"/runs/{run_id}/restart")
        assert restarted.status_code == 202 and restarted.json()["action"] == "restart"
        api.wait_running(run_id, attempt=2)
        after = httpx.get(f"{api.url}/runs/current").json()
        assert after["attempt"] == 2 and after["resume_step"] >= 2
        assert [a["number"] for a in after["attempts"]] == [1, 2]
        second = pids(api, run_id, 2)
        assert second["launcher"] not in first.values()
        assert not any(psutil.pid_exists(pid) and pid not in second.values()
                       for pid in first.values())  # attempt 1's processes are gone
        stopped = client.post(f"/runs/{run_id}/stop")
        assert stopped.status_code == 202 and stopped.json()["action"] == "stop"
        assert api.wait_ended(run_id).state == "stopped"
        assert httpx.get(f"{api.url}/runs/current").json()["state"] == "stopped"
        assert processes_with_marker(run_id) == []  # nothing of the run is left
        again = client.post(f"/runs/{run_id}/stop")
        assert again.status_code == 409 and "ended" in again.json()["detail"]
        assert client.post("/runs/nope-1/stop").status_code == 404
        assert client.post("/runs/nope-1/restart").status_code == 404


def test_an_unexpected_error_is_a_json_500_and_the_daemon_keeps_serving(
    api: Api, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = started(api)
    real_restart = api.manager.request_restart

    def engine_bug(run_id: str) -> None:  # the engine has no bug to call on: one is planted
        monkeypatch.setattr(api.manager, "request_restart", real_restart)
        raise RuntimeError("engine bug")

    monkeypatch.setattr(api.manager, "request_restart", engine_bug)
    with api.client() as client:
        response = client.post(f"/runs/{run_id}/restart")
        assert response.status_code == 500
        assert response.json()["errors"] == []  # the API's one error body (ErrorOut)
        assert response.json()["detail"].startswith("internal error ")
        assert "RuntimeError" in response.json()["detail"]
        assert "engine bug" not in response.text  # details go to the log, not to clients
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
    api.wait_running(run_id, attempt=2)  # the next request reached the engine
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_mutating_endpoints_need_the_token(api: Api) -> None:
    run_id = started(api)
    before = api.run(run_id)
    for token in (None, "wrong-token"):
        with api.client(token=token) as client:
            for path in ("/runs", f"/runs/{run_id}/stop", f"/runs/{run_id}/restart", "/reap"):
                response = client.post(path, json={"profile": PROFILE_NAME})
                assert response.status_code == 401, (path, token)
                assert "Bearer" in response.json()["detail"]
                assert response.headers["www-authenticate"] == "Bearer"
    with httpx.Client(base_url=api.url) as client:
        basic = client.post("/runs", json={"profile": PROFILE_NAME},
                            headers={"Authorization": "Basic dGVzdDp0ZXN0"})
        assert basic.status_code == 401
    # Nothing changed: the one run, its first attempt, neither stopped nor restarted.
    assert [run.id for run in api.store.list_runs()] == [run_id]
    assert api.manager.live_run_ids() == {run_id}
    after = api.run(run_id)
    assert (after.attempt, after.restarts) == (before.attempt, before.restarts) == (1, 0)
    assert not [e for e in api.store.events(run_id)
                if e.kind in ("stop_requested", "restart_requested")]


def test_auth_off_lets_mutations_through(open_api: Api) -> None:
    assert httpx.get(f"{open_api.url}/health").json()["auth_required"] is False
    with open_api.client(token=None) as client:
        response = client.post("/runs", json={"profile": PROFILE_NAME})
        assert response.status_code == 201
        run_id = response.json()["id"]
        open_api.wait_running(run_id)
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    assert open_api.wait_ended(run_id).state == "stopped"


def test_bad_submissions_get_4xx_with_a_message(api: Api) -> None:
    cases = {
        "no-such-profile": 404,
        "../../etc/passwd": 422,
        "configs/demo.toml": 422,
        "/etc/passwd": 422,
        "/nonexistent/dir/x.toml": 404,
        "/tmp/../etc/x.toml": 422,
        "a b": 422,
        "ö": 422,
        "a..b": 404,  # a name: looked up in the catalog, never joined to a path
    }
    for ref, code in cases.items():
        response = submit(api, ref)
        assert response.status_code == code, (ref, response.text)
        assert response.json()["detail"], ref
        if code == 422:  # refused by request validation, as the schema's pattern says
            assert response.json()["errors"][0]["loc"] == ["body", "profile"], ref
    assert "systemctl reload airvisor" in submit(api, "no-such-profile").json()["detail"]

    broken = write_profile(api.tmp / "broken.toml", {**api_profile(api.tmp),
                                                     "gpus": {"inference": "zero"}})
    response = submit(api, str(broken))
    assert response.status_code == 422
    assert "broken.toml" in response.json()["detail"] and "inference" in response.json()["detail"]
    unknown_key = submit(api, overrides={"run.max_stepz": 3})
    assert unknown_key.status_code == 422 and "max_step" in unknown_key.json()["detail"]

    with api.client() as client:
        malformed = client.post("/runs", content=b"{not json",
                                headers={"Content-Type": "application/json"})
        assert malformed.status_code == 422
        assert client.post("/runs", json={"profile": PROFILE_NAME, "x": 1}).status_code == 422
        assert client.post("/runs", json={"profile": PROFILE_NAME,
                                          "start_mode": "sideways"}).status_code == 422
        assert client.post("/runs", json=[1, 2]).status_code == 422
    assert api.store.list_runs() == [] and api.manager.live_run_ids() == set()


def test_an_output_dir_that_cannot_be_created_is_refused_not_a_crash(api: Api) -> None:
    blocker = api.tmp / "a-file"
    blocker.write_text("")
    response = submit(api, overrides={"prime_rl.overrides.output_dir": str(blocker / "out")})
    # The engine checks this machine as `airvisor start` does, before accepting the run.
    assert response.status_code == 422
    assert f"{blocker} is not writable" in response.json()["detail"]
    assert api.store.list_runs() == []


def test_a_second_run_on_the_same_gpus_is_a_conflict(api: Api) -> None:
    def on_gpus(name: str) -> str:
        """A profile (its own run dir and port) not marked demo, so the engine reserves the
        GPUs its prime-rl config names (0 and 1; the stand-ins use none)."""
        data = api_profile(api.tmp, name)
        data["run"]["demo"] = False
        return str(write_profile(api.tmp / f"{name}.toml", data))

    first = submit(api, on_gpus("first"))
    assert first.status_code == 201 and first.json()["gpus"] == [0, 1]
    second = submit(api, on_gpus("second"))
    assert second.status_code == 409
    assert second.json()["detail"].startswith(
        f"run {first.json()['id']} is live on GPU(s) [0, 1]")
    assert [run.id for run in api.store.list_runs()] == [first.json()["id"]]


def test_absolute_profile_path_is_accepted(api: Api) -> None:
    path = write_profile(api.tmp / "elsewhere" / "mine.toml", api_profile(api.tmp, "mine"))
    response = submit(api, str(path))
    assert response.status_code == 201, response.text
    assert response.json()["profile_path"] == str(path)


def test_a_profile_added_later_is_found_after_a_catalog_reload(api: Api) -> None:
    write_profile(api.profiles / "added_later.toml", api_profile(api.tmp, "added_later"))
    assert submit(api, "added_later").status_code == 404
    api.ctx.catalog.reload()  # what SIGHUP does
    assert submit(api, "added_later").status_code == 201


def test_gpus_without_a_driver_say_so(api: Api) -> None:
    gpus = httpx.get(f"{api.url}/gpus")
    assert gpus.status_code == 200
    assert gpus.json()["nvml_available"] is False  # no driver on this machine
    assert gpus.json()["error"] and gpus.json()["gpus"] == []


def test_processes_and_a_reap_dry_run_list_a_planted_stale_process(api: Api) -> None:
    run_id = f"dead-run-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "AIRVISOR_RUN_ID": run_id, "AIRVISOR_COMPONENT": "trainer"}
    planted = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        processes = httpx.get(f"{api.url}/processes", timeout=30)
        assert processes.status_code == 200
        ours = [p for p in processes.json()["processes"] if p["pid"] == planted.pid]
        assert ours and run_id in ours[0]["reason"]
        with api.client() as client:
            # Only ever a dry run here: other developers' processes run on this machine.
            reap = client.post("/reap", json={"dry_run": True}, timeout=30)
            assert client.post("/reap", json={"dry_run": "false"}).status_code == 422
        assert reap.status_code == 200 and reap.json()["dry_run"] is True
        assert "would stop" in reap.json()["summary"]
        assert planted.pid in [c["pid"] for c in reap.json()["report"]["candidates"]]
        assert planted.poll() is None  # a dry run stops nothing
    finally:
        planted.kill()
        planted.wait()


def test_metrics_in_prometheus_format(api: Api) -> None:
    run_id = started(api)
    api.wait_running(run_id, step=3)
    text = httpx.get(f"{api.url}/metrics").text
    labels = f'profile="{PROFILE_NAME}",run_id="{run_id}"'
    step = re.search(rf"^airvisor_run_step{{{re.escape(labels)}}} (\d+)\.0$", text, re.M)
    assert step is not None and int(step.group(1)) >= 3, text
    assert f'airvisor_run_state{{{labels},state="running"}} 1.0' in text
    assert f"airvisor_run_restarts{{{labels}}} 0.0" in text
    assert f"airvisor_run_seconds_since_progress{{{labels}}}" in text
    assert "airvisor_nvml_available 0.0" in text
    assert "# TYPE airvisor_gpu_memory_used_bytes gauge" in text


def test_openapi_schema_documents_every_endpoint(api: Api) -> None:
    paths = httpx.get(f"{api.url}/openapi.json").json()["paths"]
    assert set(paths) >= {
        "/health", "/runs", "/runs/current", "/runs/{run_id}", "/runs/{run_id}/events",
        "/runs/{run_id}/logs/{component}", "/runs/{run_id}/stop", "/runs/{run_id}/restart",
        "/gpus", "/processes", "/reap", "/metrics",
    }
    assert paths["/runs"]["post"]["security"] == [{"HTTPBearer": []}]


def test_a_run_body_is_the_runs_view_with_phase_attempts_restarts_and_slurm(api: Api) -> None:
    run_id = started(api)
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
    api.wait_running(run_id, attempt=2)
    # What a Slurm supervisor records of its job (this run is on the box).
    api.store.merge_run_details(run_id, slurm_job_id="4242", slurm_nodes=["n1", "n2"],
                                slurm_state="RUNNING")
    body = httpx.get(f"{api.url}/runs/{run_id}").json()
    assert (body["phase"], body["supervisor_kind"], body["supervisor_address"]) == (
        "running", "daemon", api.url)
    assert body["slurm"] == {"job_id": "4242", "nodes": ["n1", "n2"], "state": "RUNNING"}
    assert body["details"]["slurm_job_id"] == "4242"
    assert [a["number"] for a in body["attempts"]] == [1, 2]
    assert body["attempts"][0]["cause"] == "first"
    history = body["restart_history"]
    assert [(r["attempt"], r["kind"], r["counted"]) for r in history] == [(1, "operator", False)]
    assert body["restarts"] == 1
    # The list stays a summary.
    listed = httpx.get(f"{api.url}/runs").json()[0]
    assert "components" not in listed and listed["id"] == run_id


def test_an_earlier_attempts_log_is_that_attempts_after_prime_rl_rewrote_its_path(
        api: Api) -> None:
    # prime-rl v0.4 opens its logs/*.stdout with "w" at each launch (rl.py:617,695,747): the
    # engine keeps the earlier attempt's file aside, and its records follow it there.
    run_id = started(api)
    api.wait_running(run_id, step=3)
    wait_for(lambda: any(c.name == "trainer" for c in api.store.components(run_id, 1)),
             "attempt 1's trainer found")
    first = log_lines(api, run_id, "trainer", 1)
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
        api.wait_running(run_id, attempt=2)
        wait_for(lambda: any(c.name == "trainer" for c in api.store.components(run_id, 2))
                 and any("Resuming training from checkpoint" in line
                         for line in log_lines(api, run_id, "trainer", 2)),
                 "attempt 2's trainer resumed")
        earlier = log_lines(api, run_id, "trainer", 1)
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    api.wait_ended(run_id)
    assert not any("Resuming training from checkpoint" in line for line in earlier), earlier[:20]
    assert earlier[:len(first)] == first  # attempt 1's own lines, kept
    kept = [c.log_path for c in api.store.components(run_id, 1) if c.name == "trainer"]
    assert kept and "previous-logs" in str(kept[0])
