"""The run page shows a hang's verdicts, with the full stacks one click away (real headless
Chromium, Debian's, driven by Playwright, as tests/web/test_page_browser.py does)."""

from __future__ import annotations

import pytest

from .conftest import CHROMIUM, Harness, api_over, demo_profile

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} missing: run scripts/setup.d/50-chromium.sh"),
]


def test_the_page_shows_where_the_run_hung(harness: Harness, browser: object) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    # Two trainer ranks: the page also leads with the line across them (issue 31 item 5).
    run_id = harness.run(demo_profile(harness.tmp, rl={"trainer_gpu_ids": [1, 2]},
                                      demo={"trainer": {"hang_at_step": 3}}), timeout=120)
    with api_over(harness) as api:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{api.base_url}/#{run_id}")
        event = page.locator('#events li[data-event="stacks"]')
        expect(event).to_contain_text("where each process was before the stall kill",
                                      timeout=20_000)
        expect(event.locator("ul.verdicts")).to_contain_text(
            "trainer rank 0: sleeping in inject_faults_before_step")
        stacks_event = next(e for e in harness.events(run_id) if e.kind == "stacks")
        across = stacks_event.data["summary"]
        assert across.startswith("trainer ") and "rank 1" in across
        expect(event.locator("p.stacks-summary")).to_have_text(across)
        stacks = event.locator("pre.stacks")
        expect(stacks).to_be_hidden()  # one click away
        event.locator("summary").click()
        expect(stacks).to_contain_text('"MainThread"', timeout=10_000)
        expect(stacks).to_contain_text("inject_faults_before_step (airvisor/demo/_steps.py:")
        page.wait_for_timeout(2500)  # the page refreshes its events every second
        expect(stacks).to_be_visible()  # and the open stacks stay open
        event.scroll_into_view_if_needed()
        page.screenshot(path=str(harness.tmp / "stacks-page.png"))
        assert not errors, errors
