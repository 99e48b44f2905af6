"""/metrics shows a Slurm-mode run's job (id, Slurm state) and its node count."""

from __future__ import annotations

import time
from pathlib import Path

from airvisor.daemon._machine import CachedGPUs
from airvisor.daemon._metrics import metrics_registry, render_metrics
from airvisor.store import Store

from ..records import move_run


def test_slurm_gauges(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.create_run(run_id="r1", name="slurm-run", profile_path=None, profile={},
                     run_dir=str(tmp_path), gpus=[], supervisor_pid=None)
    store.create_run(run_id="r2", name="box", profile_path=None, profile={},
                     run_dir=str(tmp_path), gpus=[], supervisor_pid=None)
    move_run(store, "r1", "running")
    move_run(store, "r2", "running")
    store.merge_run_details("r1", slurm_job_id="77", slurm_nodes=["node1", "node2"],
                            slurm_state="RUNNING")
    text = render_metrics(metrics_registry(store, CachedGPUs(), time.time())).decode()
    lines = [line for line in text.splitlines() if line.startswith("airvisor_slurm_")]
    assert ('airvisor_slurm_job{job_id="77",profile="slurm-run",run_id="r1",'
            'slurm_state="RUNNING"} 1.0') in lines
    assert 'airvisor_slurm_job_nodes{job_id="77",profile="slurm-run",run_id="r1"} 2.0' in lines
    assert not any('run_id="r2"' in line for line in lines)  # a one-box run has no job
