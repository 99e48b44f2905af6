"""The run page's time series, sampled from what the engine already writes.

Step (over wall time) from the runs table; training curves (keyed by step) from the run's
`metrics.jsonl` where prime-rl writes one, else from the components' `Step N | ... | Reward: x`
log lines; GPU memory per GPU from NVML. The parsers are pure; `RunSampler` keeps each run's
read offsets; `Background` is the one thread that samples and feeds notifications.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from airvisor._logfile import LogTail
from airvisor._logging import get_logger
from airvisor.daemon._machine import GPUReport
from airvisor.notify import EventWatcher
from airvisor.primerl import step_from_log_line, strip_ansi
from airvisor.store import RunRecord, SeriesStore, Store
from airvisor.view import layout_sources

log = get_logger("airvisor.daemon.web")

TRAINING_KEYS = ("reward", "loss")
STEP_SERIES = "step"
STEP_REPEAT_SECONDS = 30.0  # an unchanged step is recorded again this often (flat curve)
GPU_SAMPLE_SECONDS = 5.0
GIB = 1024 ** 3
_LOG_FIELD = re.compile(r"\|\s*([A-Za-z][A-Za-z. ]*?):\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def training_series(key: str) -> str:
    return f"train:{key}"


def gpu_series(index: int) -> str:
    return f"gpu:{index}"


def metrics_from_row(row: str) -> tuple[int, dict[str, float]] | None:
    """A metrics.jsonl row -> (step, {key: value}) for the tracked keys, or None."""
    try:
        data = json.loads(row)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    step = data.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    values = {k: float(data[k]) for k in TRAINING_KEYS
              if isinstance(data.get(k), int | float) and not isinstance(data.get(k), bool)}
    return (step, values) if values else None


def metrics_from_log_line(line: str) -> tuple[int, dict[str, float]] | None:
    """`SUCCESS Step 12 | Time: 1.2s | Reward: 0.1160 | ...` -> (12, {"reward": 0.116})."""
    step = step_from_log_line(line)
    if step is None:
        return None
    values: dict[str, float] = {}
    for name, number in _LOG_FIELD.findall(strip_ansi(line)):
        key = name.strip().lower()
        if key in TRAINING_KEYS:
            values[key] = float(number)
    return (step, values) if values else None


def runs_of_points(points: Iterable[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Split at every step that does not advance (a resumed attempt repeats steps), so each
    run of points can replace what the series holds from its first step on."""
    runs: list[list[tuple[float, float]]] = []
    for x, y in points:
        if not runs or x <= runs[-1][-1][0]:
            runs.append([])
        runs[-1].append((x, y))
    return runs


class RunSampler:
    """Read offsets and last samples of one run."""

    def __init__(self, run_id: str, metrics_path: Path | None) -> None:
        self.run_id = run_id
        self.metrics_path = metrics_path
        self.metrics = LogTail(metrics_path) if metrics_path is not None else None
        self.logs: dict[str, LogTail] = {}  # by log path
        self.last_step: int | None = None
        self.last_step_at = float("-inf")
        self.last_gpu_at = float("-inf")

    def sample(self, run: RunRecord, series: SeriesStore, *, now: float,
               log_paths: list[str], gpus: Callable[[], GPUReport] | None) -> None:
        if run.step is not None and (run.step != self.last_step
                                     or now - self.last_step_at >= STEP_REPEAT_SECONDS):
            series.append(run.id, STEP_SERIES, [(now, float(run.step))])
            self.last_step, self.last_step_at = run.step, now
        found: list[tuple[int, dict[str, float]]] = []
        if self.metrics is not None and self.metrics_path is not None \
                and self.metrics_path.exists():
            for row in self.metrics.read_new_lines(keepends=True):
                parsed = metrics_from_row(row)
                if parsed is not None:
                    found.append(parsed)
        else:
            for path in log_paths:
                follower = self.logs.setdefault(path, LogTail(Path(path)))
                for line in follower.read_new_lines(keepends=True):
                    parsed = metrics_from_log_line(line)
                    if parsed is not None:
                        found.append(parsed)
        for key in TRAINING_KEYS:
            points = [(float(step), values[key]) for step, values in found if key in values]
            for part in runs_of_points(points):
                series.append(run.id, training_series(key), part, replace_from_first=True)
        if gpus is not None and run.gpus and now - self.last_gpu_at >= GPU_SAMPLE_SECONDS:
            self.last_gpu_at = now
            report = gpus()
            for position, gpu in enumerate(report.gpus):
                index = gpu.get("index", position)
                used = gpu.get("used_bytes")
                if index in run.gpus and isinstance(used, int | float):
                    series.append(run.id, gpu_series(int(index)), [(now, used / GIB)])


class Background:
    """One daemon thread: notifications from the events table, then the time series."""

    def __init__(self, store: Store, *, watcher: EventWatcher | None,
                 gpus: Callable[[], GPUReport] | None, interval: float = 1.0,
                 series: SeriesStore | None = None) -> None:
        self.store = store
        self.series = series or SeriesStore(store)
        self.watcher = watcher
        self.gpus = gpus
        self.interval = interval
        self.samplers: dict[str, RunSampler] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="airvisor-web", daemon=True)

    def start(self) -> None:
        if self.watcher is not None:
            self.watcher.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as err:  # a bad row or file must not end page updates for good
                log.error("run page sampling failed", error=repr(err), exc_info=err)
            self._stop.wait(self.interval)

    def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if self.watcher is not None:
            self.watcher.poll()
        live = {run.id: run for run in self.store.live_runs()}
        for run_id in list(self.samplers):
            if run_id not in live:  # ended: one last sample picks up its final lines
                ended = self.store.get_run(run_id)
                if ended is not None:
                    self._sample(ended, now)
                del self.samplers[run_id]
        for run in live.values():
            self._sample(run, now)

    def _sample(self, run: RunRecord, now: float) -> None:
        sources = layout_sources(run.profile)
        if sources is None:  # component mode: metrics.jsonl in the run dir, logs in the store
            metrics: Path | None = Path(run.run_dir) / "metrics.jsonl"
            paths = [c.log_path for c in self.store.components(run.id)
                     if c.name in ("trainer", "orchestrator") and c.log_path]
        else:
            metrics, logs = sources
            paths = [str(logs[n]) for n in ("trainer", "orchestrator") if n in logs]
        sampler = self.samplers.get(run.id)
        if sampler is None or sampler.metrics_path != metrics:
            sampler = self.samplers[run.id] = RunSampler(run.id, metrics)
        sampler.sample(run, self.series, now=now, log_paths=paths, gpus=self.gpus)
