"""Every endpoint over a real uvicorn server on loopback, through httpx."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from .conftest import PROFILE_NAME, Api, fake_profile, write_profile


def submit(api: Api, profile: str = PROFILE_NAME, **body: object) -> httpx.Response:
    with api.client() as client:
        return client.post("/runs", json={"profile": profile, **body})


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
    assert run["state"] == "running"
    assert run["profile_name"] == PROFILE_NAME
    assert run["max_steps"] == 7  # the override reached the loaded profile
    assert [c["name"] for c in run["components"]] == ["inference", "orchestrator", "trainer"]
    trainer = next(c for c in run["components"] if c["name"] == "trainer")
    assert trainer["pid"] == 102 and trainer["gpus"] == [0, 1]

    current = httpx.get(f"{api.url}/runs/current").json()
    assert current["id"] == run["id"]
    assert current["step"] == 3 and current["attempt"] == 1
    assert current["seconds_since_progress"] is not None
    assert current["recent_events"][0]["kind"] == "submitted"

    assert httpx.get(f"{api.url}/runs/{run['id']}").json()["id"] == run["id"]
    listed = httpx.get(f"{api.url}/runs").json()
    assert [r["id"] for r in listed] == [run["id"]]
    assert httpx.get(f"{api.url}/health").json()["live_runs"] == 1


def test_unknown_and_malformed_run_ids(api: Api) -> None:
    assert httpx.get(f"{api.url}/runs/nope-1").status_code == 404
    assert "GET /runs" in httpx.get(f"{api.url}/runs/nope-1").json()["detail"]
    assert httpx.get(f"{api.url}/runs/..%2F..%2Fetc").status_code in (404, 422)
    assert httpx.get(f"{api.url}/runs/{'x' * 300}").status_code == 422
    assert httpx.get(f"{api.url}/runs/nope-1/events").status_code == 404


def test_events_after_an_id(api: Api) -> None:
    run_id = submit(api).json()["id"]
    api.store.add_event(run_id, "progress", "step 4")
    api.store.add_event(run_id, "progress", "step 5")
    events = httpx.get(f"{api.url}/runs/{run_id}/events").json()
    assert [e["message"] for e in events][-2:] == ["step 4", "step 5"]
    later = httpx.get(f"{api.url}/runs/{run_id}/events",
                      params={"after": events[-2]["id"]}).json()
    assert [e["message"] for e in later] == ["step 5"]
    assert httpx.get(f"{api.url}/runs/{run_id}/events", params={"after": -1}).status_code == 422


def test_logs_tail_and_component_validation(api: Api) -> None:
    run_id = submit(api).json()["id"]
    response = httpx.get(f"{api.url}/runs/{run_id}/logs/trainer", params={"tail": 3})
    assert response.status_code == 200
    assert response.text == "trainer line 48\ntrainer line 49\ntrainer line 50\n"
    missing = httpx.get(f"{api.url}/runs/{run_id}/logs/vllm")
    assert missing.status_code == 404
    assert "inference, orchestrator, trainer" in missing.json()["detail"]
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


def test_logs_follow_streams_new_lines_until_the_run_ends(api: Api) -> None:
    run_id = submit(api).json()["id"]
    log_path = Path(api.store.components(run_id)[2].log_path or "")
    assert log_path.name == "trainer.log"
    received: list[str] = []

    def read() -> None:
        with httpx.stream("GET", f"{api.url}/runs/{run_id}/logs/trainer",
                          params={"tail": 1, "follow": "true"}, timeout=30) as response:
            received.extend(response.iter_lines())

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    with log_path.open("a") as out:
        out.write("step 4 done\nstep 5 done\npartial")
    while len(received) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received[:3] == ["trainer line 50", "step 4 done", "step 5 done"]
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    reader.join(15)
    assert not reader.is_alive(), "the stream did not end with the run"
    assert received[-1] == "partial"  # the unterminated last line is flushed at the end


def test_logs_follow_moves_on_to_the_next_attempt(api: Api) -> None:
    run_id = submit(api).json()["id"]
    received: list[str] = []

    def read() -> None:
        with httpx.stream("GET", f"{api.url}/runs/{run_id}/logs/trainer",
                          params={"tail": 1, "follow": "true"}, timeout=30) as response:
            received.extend(response.iter_lines())

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    with api.client() as client:
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
        while len(received) < 52 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.post(f"/runs/{run_id}/stop").status_code == 202
    reader.join(15)
    assert not reader.is_alive()
    assert received[:2] == ["trainer line 50", "--- airvisor: attempt 2 ---"]
    assert received[2:52] == [f"trainer line {i}" for i in range(1, 51)]
    # An explicit attempt is served as it is, without switching.
    old = httpx.get(f"{api.url}/runs/{run_id}/logs/trainer", params={"attempt": 1, "tail": 1})
    assert old.text == "trainer line 50\n"
    assert httpx.get(f"{api.url}/runs/{run_id}/logs/trainer",
                     params={"attempt": 7}).status_code == 404


def test_stop_and_restart(api: Api) -> None:
    run_id = submit(api).json()["id"]
    with api.client() as client:
        restarted = client.post(f"/runs/{run_id}/restart")
        assert restarted.status_code == 202 and restarted.json()["action"] == "restart"
        assert api.service.restarts == [run_id]
        # The snapshot was invalidated: the new attempt shows at once.
        after = httpx.get(f"{api.url}/runs/current").json()
        assert after["attempt"] == 2 and after["restarts"] == 1 and after["resume_step"] == 2
        assert {c["pid"] for c in after["components"]} == {201, 202, 203}
        stopped = client.post(f"/runs/{run_id}/stop")
        assert stopped.status_code == 202 and stopped.json()["action"] == "stop"
        assert httpx.get(f"{api.url}/runs/current").json()["state"] == "stopped"
        again = client.post(f"/runs/{run_id}/stop")
        assert again.status_code == 409 and "ended" in again.json()["detail"]
        assert client.post("/runs/nope-1/stop").status_code == 404
        assert client.post("/runs/nope-1/restart").status_code == 404


def test_an_unexpected_error_is_a_json_500_and_the_daemon_keeps_serving(api: Api) -> None:
    run_id = submit(api).json()["id"]
    api.service.fail_with = RuntimeError("engine bug")
    with api.client() as client:
        response = client.post(f"/runs/{run_id}/restart")
        assert response.status_code == 500
        assert response.json()["errors"] == []  # the API's one error body (ErrorOut)
        assert response.json()["detail"].startswith("internal error ")
        assert "RuntimeError" in response.json()["detail"]
        assert "engine bug" not in response.text  # details go to the log, not to clients
        assert client.post(f"/runs/{run_id}/restart").status_code == 202
    assert httpx.get(f"{api.url}/health").status_code == 200


def test_mutating_endpoints_need_the_token(api: Api) -> None:
    run_id = submit(api).json()["id"]
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
    assert api.service.live == {run_id: {0, 1}}  # nothing changed


def test_auth_off_lets_mutations_through(open_api: Api) -> None:
    assert httpx.get(f"{open_api.url}/health").json()["auth_required"] is False
    with open_api.client(token=None) as client:
        assert client.post("/runs", json={"profile": PROFILE_NAME}).status_code == 201


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

    broken = write_profile(api.tmp / "broken.toml", {**fake_profile(api.tmp),
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
    assert api.service.live == {}


def test_an_output_dir_that_cannot_be_created_is_a_conflict_not_a_crash(api: Api) -> None:
    blocker = api.tmp / "a-file"
    blocker.write_text("")
    response = submit(api, overrides={"prime_rl.overrides.output_dir": str(blocker / "out")})
    assert response.status_code == 409
    assert "cannot prepare the run on this machine" in response.json()["detail"]


def test_a_second_run_on_the_same_gpus_is_a_conflict(api: Api) -> None:
    assert submit(api).status_code == 201
    second = submit(api)
    assert second.status_code == 409
    assert "GPUs [0, 1]" in second.json()["detail"]


def test_absolute_profile_path_is_accepted(api: Api) -> None:
    path = write_profile(api.tmp / "elsewhere" / "mine.toml", fake_profile(api.tmp, "mine"))
    response = submit(api, str(path))
    assert response.status_code == 201, response.text
    assert response.json()["profile_path"] == str(path)


def test_a_profile_added_later_is_found_after_a_catalog_reload(api: Api) -> None:
    write_profile(api.profiles / "added_later.toml", fake_profile(api.tmp, "added_later"))
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
    run_id = submit(api).json()["id"]
    text = httpx.get(f"{api.url}/metrics").text
    labels = f'profile="{PROFILE_NAME}",run_id="{run_id}"'
    assert f"airvisor_run_step{{{labels}}} 3.0" in text
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
    run_id = submit(api).json()["id"]
    api.store.update_run(run_id, phase="running", supervisor_kind="daemon",
                         supervisor_address="http://127.0.0.1:8765")
    api.store.merge_run_details(run_id, slurm_job_id="4242", slurm_nodes=["n1", "n2"],
                                slurm_state="RUNNING")
    api.store.add_restart(run_id, attempt=1, kind="operator", reason="POST /restart",
                          counted=False)
    body = httpx.get(f"{api.url}/runs/{run_id}").json()
    assert (body["phase"], body["supervisor_kind"], body["supervisor_address"]) == (
        "running", "daemon", "http://127.0.0.1:8765")
    assert body["slurm"] == {"job_id": "4242", "nodes": ["n1", "n2"], "state": "RUNNING"}
    assert body["details"]["slurm_job_id"] == "4242"
    assert [(a["number"], a["cause"]) for a in body["attempts"]] == [(1, None)]
    assert body["restart_history"] == [{"at": body["restart_history"][0]["at"], "attempt": 1,
                                        "kind": "operator", "reason": "POST /restart",
                                        "counted": False}]
    assert body["restarts"] == 1
    # The list stays a summary.
    listed = httpx.get(f"{api.url}/runs").json()[0]
    assert "components" not in listed and listed["id"] == run_id
