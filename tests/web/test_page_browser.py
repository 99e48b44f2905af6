"""The run page in a real headless Chromium (Debian's), driven by Playwright without any
downloaded browser, during a real demo run with an injected crash."""

from __future__ import annotations

import os
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from airvisor._paths import DATABASE_NAME
from airvisor.store import Store

from .conftest import FULL_DETAIL, KEPT_DETAIL, LiveDaemon, store_recovered_run, wait_for

CHROMIUM = Path(os.environ.get("AIRVISOR_TEST_CHROMIUM", "/usr/bin/chromium"))
# As root, in a sandbox without a network: no sandboxing, no GPU, no background requests that
# the closed network refuses (see scripts/setup.d/50-chromium.sh).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]
# Where a person finds the screenshot of the last run besides the test's tmp_path.
SCREENSHOT_COPY_ENV = "AIRVISOR_PAGE_SCREENSHOT"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} missing: run scripts/setup.d/50-chromium.sh"),
]


@pytest.fixture
def browser() -> Iterator[object]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_page_follows_a_crashing_run_live_and_stops_it(live: LiveDaemon, browser: object,
                                                           tmp_path: Path) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    live.start()
    with socket.socket() as sock:  # a webhook nobody listens on: its delivery fails
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook/sEcReT"
    name = live.profile("pagetest", rl={"max_steps": 400},
                        demo={"trainer": {"crash_at_step": 6, "step_time": 0.25},
                              "orchestrator": {"step_time": 0.1}},
                        # Room for the engine to restart more than once before the stop.
                        restart={"max_restarts": 20, "window": 600},
                        notify={"retries": 0, "webhooks": [{"url": dead, "name": "pager"}]})
    run_id = live.submit(name)

    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"{live.url}/")
    page.evaluate("window.__sameDocument = true")  # gone if the page ever reloads

    expect(page.locator("#run-name")).to_have_text("pagetest", timeout=20_000)
    expect(page.locator("#run-id")).to_have_text(run_id)
    expect(page.locator(f'#runs li[data-run="{run_id}"]')).to_be_visible()

    def shown_step() -> int | None:
        match = re.match(r"(\d+)", page.locator("#run-step").inner_text())
        return int(match.group(1)) if match else None

    first = wait_for("a step on the page", shown_step, 40)
    wait_for("the step to advance on the page", lambda: (shown_step() or 0) > first, 20)

    second = page.locator('#timeline tr[data-attempt="2"]')
    expect(second).to_be_visible(timeout=40_000)
    # Why the first attempt ended, as the engine recorded it (the crash, or the stall it
    # caused), on the first row and as what the second one started after.
    # (the attempt's reason as the API serves it: the failure's first message, completed
    # with the exit status prime-rl's launcher reported a moment later where it reaped first)
    with live.client() as client:
        run = client.get(f"/runs/{run_id}").json()
    failure = next(a for a in run["attempts"] if a["number"] == 1)["reason"]
    assert failure
    assert any(e["kind"] == "failure" for e in live.events(run_id))
    expect(page.locator('#timeline tr[data-attempt="1"] td.ended')).to_have_text(failure)
    expect(second.locator("td.after")).to_have_text(failure)
    expect(second.locator("td").nth(4)).to_have_text(re.compile(r"step \d+"))
    expect(page.locator("#run-restarts")).to_have_text("1")

    def points(chart: str) -> int:
        return int(page.locator(chart).get_attribute("data-points") or 0)

    wait_for("points on the step chart", lambda: points("#chart-step") >= 2, 20)
    wait_for("a training curve", lambda: points("#chart-loss") + points("#chart-reward") > 0, 20)
    assert page.locator("#chart-step polyline").count() == 1
    expect(page.locator("pre#log-trainer")).to_contain_text("Step", timeout=10_000)
    # A chance for the step to advance after the restart before the picture is taken.
    wait_for("the resumed attempt to step", lambda: live.run(run_id)["state"] == "running"
             and (shown_step() or 0) > 6, 30)

    # The recovery's notification could not be delivered: the page says so, URL redacted.
    failed = page.locator('#deliveries tr[data-status="failed"]').first
    expect(failed).to_contain_text("pager (http://127.0.0.1:", timeout=20_000)
    expect(failed).to_contain_text("ConnectError")
    assert "sEcReT" not in page.content()

    # Without the token the daemon refuses, and the page says what is missing.
    page.fill("#token", "")
    page.click("#stop-btn")
    expect(page.locator("#action-msg")).to_contain_text("token", timeout=10_000)
    assert live.run(run_id)["live"]

    page.screenshot(path=str(tmp_path / "run-page.png"), full_page=True)
    copy = os.environ.get(SCREENSHOT_COPY_ENV)
    if copy:
        shutil.copy(tmp_path / "run-page.png", copy)

    page.fill("#token", live.token)
    page.click("#stop-btn")
    expect(page.locator("#run-state")).to_have_text("stopped", timeout=40_000)
    assert live.run(run_id)["state"] == "stopped"
    assert page.evaluate("window.__sameDocument") is True
    page.screenshot(path=str(tmp_path / "run-page-stopped.png"), full_page=True)
    assert not errors, errors


def test_the_timeline_says_how_each_recovery_was_scoped(live: LiveDaemon, browser: object) -> None:
    """Issue 22: a run whose second attempt kept the inference server (and whose third, a
    repeated crash, restarted everything): the page's timeline says so per attempt, with the
    policy's reason, as `airvisor status` says it."""
    from playwright.sync_api import Browser, Locator, expect

    assert isinstance(browser, Browser)
    # Recorded before the daemon starts, as an earlier daemon's supervisor left it (ended).
    run_id = store_recovered_run(Store(live.tmp / "state" / DATABASE_NAME))
    live.start()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"{live.url}/#run={run_id}")

    def scope(attempt: int) -> Locator:
        return page.locator(f'#timeline tr[data-attempt="{attempt}"] td.scope')

    expect(scope(2).locator(".scope-what")).to_have_text("kept inference", timeout=20_000)
    expect(scope(2).locator(".scope-detail")).to_have_text(KEPT_DETAIL)
    expect(scope(2)).to_have_attribute("data-scope", "keep_inference")
    expect(scope(3).locator(".scope-what")).to_have_text("full (repeated)")
    expect(scope(3).locator(".scope-detail")).to_have_text(FULL_DETAIL)
    expect(scope(1)).to_have_text("–")  # the first attempt was no recovery
    expect(page.locator("#timeline thead")).to_contain_text("recovery scope")
    assert not errors, errors
