"""The page and its API on a real server over a real store and the real engine (the API tests'
fixture: demo stand-ins supervised by a RunManager): what is served, incremental series,
redaction, no token for reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airvisor.daemon.web import page_data
from airvisor.store import DeliveryStore, SeriesStore, Store

from ..daemon.conftest import PROFILE_NAME, Api, serve, wait_for
from .conftest import KEPT_DETAIL, store_recovered_run


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield from serve(tmp_path, monkeypatch, token="t0ken")


def new_run(api: Api) -> str:
    """A run accepted through the API and training (its first attempt past step 1)."""
    response = httpx.post(f"{api.url}/runs", json={"profile": PROFILE_NAME},
                          headers={"Authorization": "Bearer t0ken"}, timeout=30)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    api.wait_running(run_id)
    return run_id


def test_page_and_assets_are_served_without_a_token(api: Api) -> None:
    page = httpx.get(f"{api.url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/ui/static/app.js">' in page.text
    script = httpx.get(f"{api.url}/ui/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "import " not in script.text and "require(" not in script.text  # no dependencies
    assert httpx.get(f"{api.url}/ui/static/app.css").status_code == 200
    assert httpx.get(f"{api.url}/ui/static/../_routes.py").status_code == 404
    missing = httpx.get(f"{api.url}/ui/api/runs/no-such-run")
    assert missing.status_code == 404 and "no run with id" in missing.json()["detail"]
    assert "/ui/api/runs/{run_id}" in httpx.get(f"{api.url}/openapi.json").json()["paths"]


def test_run_data_is_incremental_and_redacted(api: Api) -> None:
    run_id = new_run(api)
    deliveries = DeliveryStore(api.store)
    row = deliveries.add_delivery(run_id=run_id, key="k", event="failed", target="abc",
                                  target_label="https://hooks.slack.com/…",
                                  payload={"title": "run x failed", "event": "failed"})
    assert row is not None
    deliveries.record_try(row, status="failed", error="try 1/1: HTTP 404 Not Found")

    def with_loss() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api.url}/ui/api/runs/{run_id}").json()
        return body if body["series"].get("train:loss") else None

    first = wait_for(with_loss, "the trainer's loss collected")
    assert first["run"]["id"] == run_id and first["incremental"] is False
    loss = first["series"]["train:loss"]  # (step, loss) from the trainer's metrics
    assert loss and [x for x, _ in loss] == sorted({x for x, _ in loss})
    assert [a["number"] for a in first["attempts"]] == [1]
    assert first["deliveries"] == [{
        "id": row, "event": "failed", "target": "https://hooks.slack.com/…", "status": "failed",
        "tries": 1, "error": "try 1/1: HTTP 404 Not Found", "title": "run x failed",
        "created_at": first["deliveries"][0]["created_at"],
        "updated_at": first["deliveries"][0]["updated_at"]}]

    def newer_loss() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api.url}/ui/api/runs/{run_id}",
                                         params={"after": first["series_last_id"]}).json()
        return body if body["series"].get("train:loss") else None

    newer = wait_for(newer_loss, "the next steps' loss")
    assert newer["incremental"] is True
    assert newer["series_last_id"] > first["series_last_id"]
    assert all(x > loss[-1][0] for x, _ in newer["series"]["train:loss"])  # only what is new

    # A restart the person asked for: the timeline's second attempt says what it followed.
    restarted = httpx.post(f"{api.url}/runs/{run_id}/restart",
                           headers={"Authorization": "Bearer t0ken"})
    assert restarted.status_code == 202
    api.wait_running(run_id, attempt=2)
    attempts = httpx.get(f"{api.url}/ui/api/runs/{run_id}").json()["attempts"]
    assert [(a["number"], a["after"]) for a in attempts] == [(1, None), (2, "restart requested")]
    assert attempts[0]["resume_step"] is None
    assert attempts[1]["resume_step"] == api.run(run_id).resume_step


def test_a_broken_daemon_wide_notify_file_is_shown(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "notify.toml").write_text("[notify]\nretries = 'many'\n")
    for handle in serve(tmp_path, monkeypatch, token="t0ken"):
        run_id = new_run(handle)
        error = httpx.get(f"{handle.url}/ui/api/runs/{run_id}").json()["notify_error"]
        assert "notify.toml: notify.retries" in error


def test_the_page_data_says_how_each_recovery_was_scoped(tmp_path: Path) -> None:
    """Issue 22: the page's timeline says, per attempt, whether its recovery kept the inference
    server and why, as the run's view (`airvisor status`, GET /runs/{id}) says it."""
    store = Store(tmp_path / "state.sqlite3")
    run_id = store_recovered_run(store)
    data = page_data(store, SeriesStore(store), DeliveryStore(store), run_id, after=0,
                     notify_error=None)
    assert data is not None
    assert [(a.number, a.scope, a.scope_reason) for a in data.attempts] == [
        (1, None, None), (2, "keep_inference", "kept"), (3, "full", "repeated")]
    assert data.attempts[1].scope_detail == KEPT_DETAIL
    assert [(a.scope, a.scope_reason, a.scope_detail) for a in data.attempts] == [
        (a.scope, a.scope_reason, a.scope_detail) for a in data.run.attempts]
