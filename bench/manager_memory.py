"""Does a daemon's memory grow with the number of runs it has seen? (issue 21)

Runs N short runs one after the other through one `RunManager` (the real engine, its SQLite
store and its worker threads; only the process launch, the prober and the machine preflight are
fakes, as in the engine's replay tests, so the numbers are the supervisor's own), and reports the
RSS after every block of runs and the slope per run (least squares). `--keep` pins every finished
supervisor (what the manager did before finished runs were released), for the comparison.

Usage: .venv/bin/python bench/manager_memory.py [--runs 300] [--block 50] [--keep]
"""

from __future__ import annotations

import argparse
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
from airvisor.engine import RunManager  # noqa: E402
from airvisor.policy import RunState  # noqa: E402
from airvisor.proc import ProcessIdentity  # noqa: E402
from airvisor.profile import load_profile  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--keep", action="store_true",
                        help="pin finished supervisors (the behaviour before the release)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="airvisor-bench-memory-"))
    rl = work / "rl.toml"
    rl.write_text(tomli_w.dumps({
        "output_dir": str(work / "run"), "max_steps": 10, "inference_gpu_ids": [0],
        "trainer_gpu_ids": [1], "trainer": {}, "model": {"name": "demo/tiny"},
        "inference": {"server": {"port": 18555}},
        "orchestrator": {"client": {"base_url": ["http://127.0.0.1:18555/v1"]}}}))
    (work / "p.toml").write_text(tomli_w.dumps({
        "run": {"name": "mem", "demo": True, "on_existing": "replace"},
        "prime_rl": {"version": "0.4", "python": [], "args": ["@", str(rl)],
                     "command_prefix": ["python", "-m", "airvisor.demo", "--prime-rl", "0.4"]},
        "checkpoint": {"size_gib": 0}, "reaper": {"enabled": False}}))
    profile = load_profile(work / "p.toml")
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
        supervisor = manager.supervisor(record.id)
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
    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in samples) / max(
        1e-9, sum((x - mean_x) ** 2 for x in xs))
    print(f"slope: {slope * 1024:.1f} KiB per run over {args.runs} runs "
          f"({'finished supervisors pinned' if args.keep else 'released'}); "
          f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
