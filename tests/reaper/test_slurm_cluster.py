"""On the real Slurm test cluster (tests/slurm/_cluster.py; scripts/setup.d/70-slurm.sh sets it
up): a training process that a batch job runs on this machine's own node, in the profile's way
(it listens on the profile's port), is that job's live work: discovery, asking Slurm through its
real commands, lists it as the job's and leaves it (only --all would stop it). Discovery only:
nothing is signalled (this machine is shared). The stop and the run's events are tested in the
PID-namespace scenarios (test_other_owners.py)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from airvisor.reaper import default_context, discover_all

STRICT = os.environ.get("CI", "").lower() == "true"
# Run as `<dir>/vllm serve ... --port P READY` (a script named vllm, as vLLM's console script):
# recognised as a vLLM API server by its argv. No retitle: Slurm's proctrack/linuxproc misreads
# /proc/<pid>/stat when the kernel's comm holds a space, and would not stop the job's process.
LISTENER = textwrap.dedent("""
    import os, socket, sys, time
    s = socket.socket()
    s.bind(("127.0.0.1", int(sys.argv[-2])))
    s.listen()
    open(sys.argv[-1] + ".tmp", "w").write(str(os.getpid()))
    os.rename(sys.argv[-1] + ".tmp", sys.argv[-1])
    time.sleep(600)
""")


def _cluster_module() -> ModuleType:
    name = "airvisor_test_slurm_cluster"  # shared with tests/slurm/conftest.py
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "slurm" / "_cluster.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster() -> Any:
    module = _cluster_module()
    try:
        return module.up(quiet=True, want_multi=False)
    except (module.ClusterError, OSError, subprocess.SubprocessError) as exc:
        if STRICT:
            pytest.fail(f"the Slurm test cluster must run in CI: {exc}")
        pytest.skip(f"no Slurm test cluster: {exc}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def job_server(cluster: Any) -> Iterator[tuple[str, int, int]]:
    """(job id, pid, port) of a `vllm serve` look-alike a batch job runs on the host node."""
    work = cluster.tmp_shared("reaper-job")
    port = free_port()
    vllm = work / "vllm"
    vllm.write_text(f"#!{cluster.python}\n{LISTENER}")
    vllm.chmod(0o755)
    script = work / "job.sh"
    script.write_text(f"#!/bin/bash\nexec {vllm} serve /models/tiny --port {port} "
                      f"{work / 'ready'}\n")
    job_id = cluster.sbatch("-p", "local", "--time=5", "-o", str(work / "job.out"),
                            str(script))
    try:
        deadline = time.monotonic() + 60
        while not (work / "ready").exists():
            assert time.monotonic() < deadline, (work / "job.out").read_text(errors="replace") \
                if (work / "job.out").exists() else cluster.job_state(job_id)
            time.sleep(0.2)
        pid = int((work / "ready").read_text())
        yield job_id, pid, port
    finally:
        cluster.run("scancel", job_id, check=False)
        cluster.wait_job(job_id, timeout=60)


def test_a_running_jobs_training_process_is_the_jobs(
        cluster: Any, job_server: tuple[str, int, int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    job_id, pid, port = job_server
    for key, value in cluster.env.items():  # Slurm's commands find the cluster (as a user's do)
        monkeypatch.setenv(key, value)
    assert cluster.job_state(job_id) == "RUNNING"
    found = discover_all(default_context(set(), profile_ports={port}), gpu_holders={})
    assert pid not in {c.pid for c in found.candidates}
    [left] = [c for c in found.blocked if c.pid == pid]
    assert left.owner == f"Slurm job {job_id} (running per Slurm)"
    assert f"live work of Slurm job {job_id}" in (left.blocked_by or "")
    # It is in the profile's way: without the job it would be stopped.
    assert f"listens on port {port}, which the profile needs" in left.reason
    # --all (reap_unowned) is the one way to stop it.
    found = discover_all(default_context(set(), profile_ports={port}, reap_unowned=True),
                         gpu_holders={})
    [chosen] = [c for c in found.candidates if c.pid == pid]
    assert "stopped because of --all" in chosen.reason
    assert os.path.exists(f"/proc/{pid}")
