"""GET /metrics: Prometheus text built from the store and NVML at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from airvisor.daemon._machine import CachedGPUs
from airvisor.daemon._views import profile_name
from airvisor.store import RunRecord, Store

# Older finished runs are not exported: a scrape stays small however long the history is.
FINISHED_RUNS_EXPORTED = 1


def _gpu_number(gpu: dict[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = gpu.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


class AirvisorCollector(Collector):
    def __init__(self, store: Store, gpus: CachedGPUs, started_at: float) -> None:
        self._store = store
        self._gpus = gpus
        self._started_at = started_at

    def _runs(self) -> list[RunRecord]:
        runs = {r.id: r for r in self._store.live_runs()}
        for r in self._store.list_runs(limit=FINISHED_RUNS_EXPORTED):
            runs.setdefault(r.id, r)
        return list(runs.values())

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        uptime = GaugeMetricFamily("airvisor_uptime_seconds", "Seconds since the daemon started.")
        uptime.add_metric([], now - self._started_at)
        yield uptime

        labels = ["run_id", "profile"]
        state = GaugeMetricFamily(
            "airvisor_run_state", "1 for the run's current state.", labels=[*labels, "state"])
        live = GaugeMetricFamily("airvisor_run_live", "1 while the run is supervised.",
                                 labels=labels)
        step = GaugeMetricFamily("airvisor_run_step", "Last training step seen.", labels=labels)
        attempt = GaugeMetricFamily("airvisor_run_attempt", "Current attempt number.",
                                    labels=labels)
        restarts = GaugeMetricFamily("airvisor_run_restarts", "Restarts of the run so far.",
                                     labels=labels)
        since = GaugeMetricFamily(
            "airvisor_run_seconds_since_progress",
            "Seconds since the step last advanced (absent before the first step).", labels=labels)
        component_restarts = GaugeMetricFamily(
            "airvisor_component_restarts", "Restarts of one component.",
            labels=[*labels, "component"])
        # Slurm mode (airvisor.slurm): the run's current job, its Slurm state and its nodes.
        slurm_job = GaugeMetricFamily(
            "airvisor_slurm_job", "1 for a Slurm-mode run's current job, with its Slurm state.",
            labels=[*labels, "job_id", "slurm_state"])
        slurm_nodes = GaugeMetricFamily(
            "airvisor_slurm_job_nodes", "Nodes allocated to a Slurm-mode run's current job.",
            labels=[*labels, "job_id"])
        for run in self._runs():
            values = [run.id, profile_name(run)]
            state.add_metric([*values, run.state], 1)
            live.add_metric(values, 1 if run.live else 0)
            attempt.add_metric(values, run.attempt)
            restarts.add_metric(values, run.restarts)
            if run.step is not None:
                step.add_metric(values, run.step)
            if run.last_progress_at is not None and run.live:
                since.add_metric(values, max(0.0, now - run.last_progress_at))
            for component in self._store.components(run.id):
                component_restarts.add_metric([*values, component.name], component.restarts)
            job_id = run.details.get("slurm_job_id")
            if job_id is not None:
                slurm_state = str(run.details.get("slurm_state") or "").split(" ", 1)[0]
                slurm_job.add_metric([*values, str(job_id), slurm_state.rstrip(",")], 1)
                slurm_nodes.add_metric([*values, str(job_id)],
                                       len(run.details.get("slurm_nodes") or []))
        yield from (state, live, step, attempt, restarts, since, component_restarts,
                    slurm_job, slurm_nodes)

        report = self._gpus.get()
        nvml = GaugeMetricFamily("airvisor_nvml_available", "1 when NVML answers.")
        nvml.add_metric([], 1 if report.nvml_available else 0)
        yield nvml
        gpu_labels = ["gpu", "name"]
        used = GaugeMetricFamily("airvisor_gpu_memory_used_bytes", "GPU memory in use.",
                                 labels=gpu_labels)
        total = GaugeMetricFamily("airvisor_gpu_memory_total_bytes", "GPU memory in all.",
                                  labels=gpu_labels)
        for position, gpu in enumerate(report.gpus):
            index = gpu.get("index", position)
            names = [str(index), str(gpu.get("name", ""))]
            used_bytes = _gpu_number(gpu, "memory_used", "used_bytes", "memory_used_bytes")
            total_bytes = _gpu_number(gpu, "memory_total", "total_bytes", "memory_total_bytes")
            if used_bytes is not None:
                used.add_metric(names, used_bytes)
            if total_bytes is not None:
                total.add_metric(names, total_bytes)
        yield used
        yield total


def metrics_registry(store: Store, gpus: CachedGPUs, started_at: float) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AirvisorCollector(store, gpus, started_at))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
