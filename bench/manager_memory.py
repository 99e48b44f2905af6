"""Does a daemon's memory grow with the number of runs it has seen? (issues 21 and 33)

Runs N short runs one after the other through one `RunManager` (the real engine, its SQLite
store and its worker threads; only the process launch, the prober and the machine preflight are
fakes, as in the engine's replay tests, so the numbers are the supervisor's own), and reports the
RSS after every block of runs and the slope per run (least squares). `--keep` pins every finished
supervisor (what the manager did before finished runs were released), for the comparison.

`--api` (issue 33) runs them as the daemon does: the real API on uvicorn on loopback, each run
submitted with POST /runs and read with GET /runs/{id} and GET /runs/current, the main loop on
a thread as `Daemon._loop` drives it (tick, the current-run snapshot, the housekeeping's
`notice`), and the daemon's housekeeping thread (daemon/_housekeeping.py: SQLite's soft heap
limit at start, a retention pass after each released run, then malloc_trim). `--no-trim` and
`--no-sqlite-limit` leave those out, for the comparison. Besides RSS it reports the C
allocator's bytes in use (glibc's mallinfo2), which the trim does not change: what is left of a
slope there is memory really held.

Usage: .venv/bin/python bench/manager_memory.py [--runs 300] [--block 50] [--keep]
       .venv/bin/python bench/manager_memory.py --api --runs 500 --block 50 [--no-trim]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import itertools
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airvisor.core import InferenceReady  # noqa: E402
from airvisor.policy import RunState  # noqa: E402
from airvisor.proc import ProcessIdentity  # noqa: E402
from airvisor.profile import load_profile  # noqa: E402
from airvisor.runs import RunManager  # noqa: E402
from airvisor.store import Store  # noqa: E402

_pids = itertools.count(800_000)


class _Exited:
    """A launcher that ends with 0 as soon as it is waited for."""

    def __init__(self, log_path: Path) -> None:
        self.pid = next(_pids)
        self.identity = ProcessIdentity(self.pid, 1.0)
        self._done = threading.Event()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()

    def wait(self) -> int:
        self._done.wait()
        return 0

    def finish(self) -> None:
        self._done.set()


class _Prober:
    def __init__(self, **_: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def bench_profile(work: Path, port: int) -> Path:
    """The short run's profile (prime-rl v0.4's layout, the demo stand-ins), written in `work`."""
    rl = work / "rl.toml"
    rl.write_text(tomli_w.dumps({
        "output_dir": str(work / "run"), "max_steps": 10, "inference_gpu_ids": [0],
        "trainer_gpu_ids": [1], "trainer": {}, "model": {"name": "demo/tiny"},
        "inference": {"server": {"port": port}},
        "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]}}}))
    path = work / "mem.toml"
    path.write_text(tomli_w.dumps({
        "run": {"name": "mem", "demo": True, "on_existing": "replace"},
        "prime_rl": {"version": "0.4", "python": [], "args": ["@", str(rl)],
                     "command_prefix": ["python", "-m", "airvisor.demo", "--prime-rl", "0.4"]},
        "checkpoint": {"size_gib": 0}, "reaper": {"enabled": False}}))
    return path


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def in_use_mib() -> float | None:
    """glibc's bytes in use (mallinfo2: uordblks + hblkhd), None without it (glibc < 2.33)."""
    try:
        mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return float(info.uordblks + info.hblkhd) / 2**20


def slope_of(samples: list[tuple[int, float]]) -> float:
    xs = [x for x, _ in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(y for _, y in samples) / len(samples)
    return sum((x - mean_x) * (y - mean_y) for x, y in samples) / max(
        1e-9, sum((x - mean_x) ** 2 for x in xs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--keep", action="store_true",
                        help="pin finished supervisors (the behaviour before the release)")
    parser.add_argument("--api", action="store_true",
                        help="as the daemon: the API, its main loop and its housekeeping")
    parser.add_argument("--no-trim", action="store_true",
                        help="with --api: no malloc_trim after a release (the comparison)")
    parser.add_argument("--no-sqlite-limit", action="store_true",
                        help="with --api: no bound on SQLite's page caches (the comparison)")
    args = parser.parse_args()
    if args.api:
        api_main(args)
        return
    work = Path(tempfile.mkdtemp(prefix="airvisor-bench-memory-"))
    profile = load_profile(bench_profile(work, 18555))
    manager = RunManager(Store(work / "state.sqlite3"))
    launched: list[_Exited] = []
    manager.hooks.prepare_machine = lambda *a: "bench"
    manager.hooks.prober = _Prober
    manager.hooks.members = lambda pid: {}
    manager.hooks.stop_tree = lambda *a: "bench stop"

    def launch(argv: list[str], **kw: Any) -> _Exited:
        proc = _Exited(kw["log_path"])
        launched.append(proc)
        return proc

    manager.hooks.launch = launch
    pinned: list[Any] = []
    process = psutil.Process()
    samples: list[tuple[int, float]] = []
    started = time.monotonic()
    for number in range(1, args.runs + 1):
        record = manager.submit(profile)
        supervisor: Any = manager.supervisor(record.id)  # its state changes under the ticks
        assert supervisor is not None
        if args.keep:
            pinned.append(supervisor)
        while supervisor.state != RunState.STARTING:
            manager.tick(0.01)
        manager.post(InferenceReady(record.id, supervisor.attempt, time.time()))
        while supervisor.state != RunState.RUNNING:
            manager.tick(0.01)
        launched[-1].finish()
        while not supervisor.state.terminal:
            manager.tick(0.01)
        manager.tick(0.0)
        if number % args.block == 0:
            gc.collect()
            samples.append((number, process.memory_info().rss / 2**20))
            print(f"{number:5d} runs  RSS {samples[-1][1]:7.1f} MiB", flush=True)
    slope = slope_of(samples)
    print(f"slope: {slope * 1024:.1f} KiB per run over {args.runs} runs "
          f"({'finished supervisors pinned' if args.keep else 'released'}); "
          f"{time.monotonic() - started:.0f} s")


def api_main(args: argparse.Namespace) -> None:
    import socket

    import httpx

    from airvisor.daemon import ApiContext, ApiServer, ProfileCatalog, _housekeeping, create_app
    from airvisor.profile._schema import StateSection

    work = Path(tempfile.mkdtemp(prefix="airvisor-bench-memory-api-"))
    profile_path = bench_profile(work, 18556)
    store = Store(work / "state" / "airvisor.sqlite3")
    manager = RunManager(store)
    launched: dict[str, _Exited] = {}
    manager.hooks.prepare_machine = lambda *a, **k: "bench"
    manager.hooks.prober = _Prober
    manager.hooks.members = lambda pid: {}
    manager.hooks.stop_tree = lambda *a, **k: "bench stop"

    def launch(argv: list[str], **kw: Any) -> _Exited:
        proc = _Exited(kw["log_path"])
        launched[kw["run_id"]] = proc
        return proc

    manager.hooks.launch = launch
    catalog = ProfileCatalog()
    ctx = ApiContext(store=store, service=manager, catalog=catalog, token=None,
                     state_dir=work / "state")
    if args.no_trim:
        _housekeeping.trim_allocator = lambda: False
    if args.no_sqlite_limit:
        _housekeeping.limit_sqlite_memory = lambda *a, **k: None
    housekeeping = _housekeeping.Housekeeping(store, StateSection())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    manager.address = url
    server = ApiServer(create_app(ctx), sock)
    server.start()
    housekeeping.start()
    stop = threading.Event()

    def loop() -> None:  # Daemon._loop's work per tick
        while not stop.is_set():
            manager.tick(0.01)
            ctx.snapshot.refresh()
            housekeeping.notice(manager.live_run_ids())

    threading.Thread(target=loop, name="main-loop", daemon=True).start()
    process = psutil.Process()
    rss: list[tuple[int, float]] = []
    used: list[tuple[int, float]] = []
    started = time.monotonic()
    with httpx.Client(base_url=url, timeout=60) as client:
        for number in range(1, args.runs + 1):
            # A name per run: two runs of one name in one second may draw the same run id
            # (4 random hex digits, engine.new_run_id), and that submission fails.
            response = client.post("/runs", json={"profile": str(profile_path),
                                                  "overrides": {"run.name": f"mem{number}"}})
            assert response.status_code == 201, response.text
            run_id = response.json()["id"]
            supervisor: Any = manager.supervisor(run_id)  # its state changes on the loop
            assert supervisor is not None
            while supervisor.state != RunState.STARTING:
                time.sleep(0.005)
            manager.post(InferenceReady(run_id, supervisor.attempt, time.time()))
            while supervisor.state != RunState.RUNNING:
                time.sleep(0.005)
            del supervisor
            launched.pop(run_id).finish()
            while client.get(f"/runs/{run_id}").json()["state"] != "succeeded":
                client.get("/runs/current")
                time.sleep(0.01)
            if number % args.block == 0:
                time.sleep(0.5)  # the release and its housekeeping pass
                gc.collect()
                rss.append((number, process.memory_info().rss / 2**20))
                in_use = in_use_mib()
                if in_use is not None:
                    used.append((number, in_use))
                print(f"{number:5d} runs  RSS {rss[-1][1]:7.1f} MiB"
                      + (f"  in use {in_use:6.1f} MiB" if in_use is not None else ""),
                      flush=True)
    stop.set()
    server.stop()
    housekeeping.stop()
    what = ", ".join(["no trim" if args.no_trim else "trim after each release",
                      "SQLite unbounded" if args.no_sqlite_limit else "SQLite bounded"])
    print(f"slope: RSS {slope_of(rss) * 1024:.1f} KiB per run ({slope_of(rss):.4f} MB/run), "
          + (f"in use {slope_of(used) * 1024:.1f} KiB per run, " if used else "")
          + f"over {args.runs} runs through the API ({what}); "
          f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
