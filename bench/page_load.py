"""Run page load time with 100,000 stored time-series points (issue 14: under 1 s).

A store holds one run with a week of points spread over its series (step, reward, loss, two
GPUs), written straight into the table with the bound lifted: more rows than the daemon ever
keeps for one run (it merges each series down to 2,000), so this is the worst case. The real
API (create_app, uvicorn on loopback) serves it. Measured:

- HTTP: everything the page fetches on load (HTML, script, style, run list, the run's page data)
  with httpx, median and max over `--repeat` loads;
- the browser: headless Debian Chromium (Playwright, no downloaded browser) from navigation
  until the step, reward and loss charts are drawn, in a fresh context each time (no cache);
- the bound: rows left when 100,000 points go through SeriesStore.append (in batches of 100).

    .venv/bin/python bench/page_load.py [--points 100000] [--repeat 10]
"""

from __future__ import annotations

import argparse
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from airvisor.daemon import ApiContext, ApiServer, ProfileCatalog, create_app
from airvisor.policy import Phase
from airvisor.store import SeriesStore, Store

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]
RUN_ID = "bench-run"
WEEK = 7 * 24 * 3600.0
SHARES = {"step": 0.4, "train:reward": 0.2, "train:loss": 0.2, "gpu:0": 0.1, "gpu:1": 0.1}
TARGET_SECONDS = 1.0


class IdleService:
    """The API's RunService, doing nothing: this measures reads only."""

    def submit(self, *_a: Any, **_k: Any) -> Any:
        raise NotImplementedError

    def request_stop(self, run_id: str) -> None: ...

    def request_restart(self, run_id: str) -> None: ...

    def tick(self, timeout: float) -> None: ...

    def adopt_on_boot(self) -> list[str]:
        return []

    def shutdown(self, *, stop_runs: bool) -> None: ...

    def status_line(self) -> str:
        return "idle"

    def live_run_ids(self) -> set[str]:
        return set()


def fill(store: Store, points: int, now: float) -> None:
    store.create_run(run_id=RUN_ID, name="week-long", profile_path=None,
                     profile={"run": {"max_steps": 1_000_000}}, run_dir="/nonexistent",
                     gpus=[0, 1], supervisor_pid=None)
    for previous, phase in ((Phase.PENDING, Phase.PREFLIGHT), (Phase.PREFLIGHT, Phase.STARTING),
                            (Phase.STARTING, Phase.RUNNING)):  # as a supervisor moves it
        store.set_phase(RUN_ID, phase, previous=previous)
    store.update_run(RUN_ID, step=int(points * SHARES["step"]), last_progress_at=now)
    for number in (1, 2, 3):
        store.start_attempt(RUN_ID, number, None if number == 1 else 1000 * number)
        if number < 3:
            store.end_attempt(RUN_ID, number, "failed", "trainer exited with status 1")
    for i in range(200):
        store.add_event(RUN_ID, "milestone", f"event {i}")
    unbounded = SeriesStore(store, max_points=10**9)
    for name, share in SHARES.items():
        count = int(points * share)
        if name.startswith("train:"):
            rows = [(float(s), 1.0 / (1 + s)) for s in range(count)]
        else:
            rows = [(now - WEEK + WEEK * i / count, float(i % 97)) for i in range(count)]
        unbounded.append(RUN_ID, name, rows)
    assert unbounded.count(RUN_ID) == sum(int(points * s) for s in SHARES.values())


def serve(store: Store, state: Path) -> tuple[ApiServer, str]:
    ctx = ApiContext(store=store, service=IdleService(), catalog=ProfileCatalog(), token="t",
                     state_dir=state)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = ApiServer(create_app(ctx), sock)
    server.start()
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


def http_loads(url: str, repeat: int) -> tuple[list[float], int]:
    times: list[float] = []
    size = 0
    for _ in range(repeat):
        with httpx.Client(base_url=url, timeout=30) as client:
            started = time.perf_counter()
            for path in ("/", "/ui/static/app.js", "/ui/static/app.css", "/health",
                         "/runs?limit=50", f"/ui/api/runs/{RUN_ID}"):
                answer = client.get(path)
                answer.raise_for_status()
            times.append(time.perf_counter() - started)
            size = len(answer.content)
    return times, size


def browser_loads(url: str, repeat: int) -> list[float] | str:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} missing (scripts/setup.d/50-chromium.sh)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "playwright not installed (pip install -e '.[test]')"
    times: list[float] = []
    drawn = ("() => ['#chart-step', '#chart-reward', '#chart-loss', '#chart-gpu'].every("
             "s => Number(document.querySelector(s).dataset.points || 0) > 0)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for _ in range(repeat):
                context = browser.new_context(viewport={"width": 1440, "height": 1000})
                page = context.new_page()
                started = time.perf_counter()
                page.goto(f"{url}/#run={RUN_ID}")
                page.wait_for_function(drawn, timeout=30_000)
                times.append(time.perf_counter() - started)
                context.close()
        finally:
            browser.close()
    return times


def bounded_rows(points: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        series = SeriesStore(Store(Path(tmp) / "db.sqlite3"))
        for start in range(0, points, 100):
            series.append(RUN_ID, "step", [(float(x), float(x)) for x in range(start, start + 100)])
        return series.count(RUN_ID)


def summary(times: list[float]) -> str:
    return (f"median {statistics.median(times) * 1000:.0f} ms, "
            f"max {max(times) * 1000:.0f} ms (n={len(times)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "state" / "airvisor.sqlite3")
        started = time.perf_counter()
        fill(store, args.points, time.time())
        print(f"stored {args.points} points in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)
        server, url = serve(store, Path(tmp) / "state")
        try:
            http, size = http_loads(url, args.repeat)
            browser = browser_loads(url, args.repeat)
        finally:
            server.stop()
    rows = bounded_rows(args.points)
    print(f"machine: {platform.node()} {platform.machine()}, Python {platform.python_version()}")
    print(f"points stored for the run: {args.points}")
    print(f"HTTP, everything the page fetches on load: {summary(http)}; page data {size} bytes")
    if isinstance(browser, str):
        print(f"browser: not measured: {browser}")
        worst = max(http)
    else:
        print(f"Chromium, navigation until all four charts are drawn: {summary(browser)}")
        worst = statistics.median(browser)
    print(f"{args.points} points through SeriesStore.append (batches of 100): {rows} rows kept")
    ok = worst < TARGET_SECONDS
    print(f"target < {TARGET_SECONDS:.0f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
