"""The page and its API on a real server over a real store (the engine replaced by the API
tests' FakeRunService): what is served, incremental series, redaction, no token for reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airvisor.store import DeliveryStore, SeriesStore

from ..daemon.conftest import Api, serve


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield from serve(tmp_path, monkeypatch, token="t0ken")


def new_run(api: Api, run_id: str = "run-1") -> str:
    """A run as the engine records it: created, first attempt started, running."""
    api.store.create_run(run_id=run_id, name="pagetest", profile_path=None, profile={},
                         run_dir=str(api.tmp / "out"), gpus=[], supervisor_pid=None)
    api.store.start_attempt(run_id, 1, None)
    api.store.update_run(run_id, state="running", step=2)
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
    series = SeriesStore(api.store)
    series.append(run_id, "train:loss", [(1.0, 0.5), (2.0, 0.4)])
    deliveries = DeliveryStore(api.store)
    row = deliveries.add_delivery(run_id=run_id, key="k", event="failed", target="abc",
                                  target_label="https://hooks.slack.com/…",
                                  payload={"title": "run x failed", "event": "failed"})
    assert row is not None
    deliveries.record_try(row, status="failed", error="try 1/1: HTTP 404 Not Found")

    first = httpx.get(f"{api.url}/ui/api/runs/{run_id}").json()
    assert first["run"]["id"] == run_id and first["incremental"] is False
    assert first["series"]["train:loss"] == [[1.0, 0.5], [2.0, 0.4]]
    assert [a["number"] for a in first["attempts"]] == [1]
    assert first["deliveries"] == [{
        "id": row, "event": "failed", "target": "https://hooks.slack.com/…", "status": "failed",
        "tries": 1, "error": "try 1/1: HTTP 404 Not Found", "title": "run x failed",
        "created_at": first["deliveries"][0]["created_at"],
        "updated_at": first["deliveries"][0]["updated_at"]}]

    series.append(run_id, "train:loss", [(3.0, 0.3)])
    newer = httpx.get(f"{api.url}/ui/api/runs/{run_id}",
                      params={"after": first["series_last_id"]}).json()
    assert newer["incremental"] is True and newer["series"] == {"train:loss": [[3.0, 0.3]]}

    # A restart the person asked for: the timeline's second attempt says what it followed.
    api.store.end_attempt(run_id, 1, "failed", "restart requested")
    api.store.start_attempt(run_id, 2, 2)
    attempts = httpx.get(f"{api.url}/ui/api/runs/{run_id}").json()["attempts"]
    assert [(a["number"], a["resume_step"], a["after"]) for a in attempts] == [
        (1, None, None), (2, 2, "restart requested")]


def test_a_broken_daemon_wide_notify_file_is_shown(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "notify.toml").write_text("[notify]\nretries = 'many'\n")
    for handle in serve(tmp_path, monkeypatch, token="t0ken"):
        run_id = new_run(handle)
        error = httpx.get(f"{handle.url}/ui/api/runs/{run_id}").json()["notify_error"]
        assert "notify.toml: notify.retries" in error
