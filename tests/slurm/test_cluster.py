"""The Slurm test cluster itself works: jobs run on the machine's node and across container
nodes, their final states are read back (scontrol, squeue --json, the job completion file,
``sacct -c``), scancel cancels, and a node killed mid-job fails the job and comes back."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _sacct_completion(cluster: Any, job_id: str) -> str:
    """The job's line in the job completion file, through ``sacct -c`` (no slurmdbd here)."""
    deadline = time.monotonic() + 60  # a bound, not an expected delay: seconds on an idle box
    while time.monotonic() < deadline:
        out = cluster.run("sacct", "-c", "-j", job_id, "--noheader", "--parsable2",
                          "--format=JobID,State").stdout
        for line in out.splitlines():
            fields = line.split("|")
            if fields[0] == job_id:
                return fields[1]
        time.sleep(0.3)  # slurmctld writes the line just after the job's state changes
    raise AssertionError(f"job {job_id} not in the job completion file")


def test_a_job_on_the_local_node_completes_and_its_state_is_read_back(slurm_cluster: Any) -> None:
    out_dir = slurm_cluster.tmp_shared("local")
    job = slurm_cluster.sbatch(
        "--partition=local", "--time=5", f"--output={out_dir}/out.txt",
        f"--wrap={slurm_cluster.python} -c 'import airvisor, socket; print(socket.gethostname())'")
    assert slurm_cluster.wait_job(job, timeout=60) == "COMPLETED"
    info = slurm_cluster.job_info(job)
    assert info["ExitCode"] == "0:0"
    assert info["NodeList"] == slurm_cluster.host_node
    assert (out_dir / "out.txt").read_text().split() == [slurm_cluster.host_node]
    assert _sacct_completion(slurm_cluster, job) == "COMPLETED"
    # squeue --json lists finished jobs too (MinJobAge), and ignores -j: filter by job id.
    jobs = json.loads(slurm_cluster.run("squeue", "--json").stdout)["jobs"]
    mine = [j for j in jobs if str(j["job_id"]) == job]
    assert [(j["job_state"], j["exit_code"]) for j in mine] == [("COMPLETED", 0)]


def test_a_failing_job_ends_failed_with_its_exit_code(slurm_cluster: Any) -> None:
    job = slurm_cluster.sbatch("--partition=local", "--time=5", "--output=/dev/null",
                               "--wrap=exit 3")
    assert slurm_cluster.wait_job(job, timeout=60) == "FAILED"
    assert slurm_cluster.job_info(job)["ExitCode"] == "3:0"
    assert _sacct_completion(slurm_cluster, job) == "FAILED"


def test_a_two_node_job_runs_a_step_on_both_container_nodes(slurm_multi: Any) -> None:
    cluster = slurm_multi
    out_dir = cluster.tmp_shared("multi")
    # Each task writes into the shared directory from its own node, with the checkout's venv.
    script = (f"import airvisor, socket, pathlib; host = socket.gethostname(); "
              f"pathlib.Path('{out_dir}', host).write_text(airvisor.__file__)")
    job = cluster.sbatch(
        "--partition=multi", "--nodes=2", "--time=5", f"--output={out_dir}/out.txt",
        f"--wrap=srun hostname && srun {cluster.python} -c \"{script}\"")
    assert cluster.wait_job(job, timeout=60) == "COMPLETED"
    assert sorted((out_dir / "out.txt").read_text().split()) == sorted(cluster.partitions["multi"])
    written = {p.name: p.read_text() for p in out_dir.iterdir() if p.name != "out.txt"}
    assert written == {node: str(cluster.repo / "airvisor" / "__init__.py")
                       for node in cluster.partitions["multi"]}


def test_prime_rl_template_allocation_gets_gpus_and_hostnames(slurm_multi: Any) -> None:
    """What prime-rl's multi-node sbatch template asks for (--exclusive, --gres=gpu:N, one task
    per node) and calls on the batch node (scontrol show hostnames) and on every node (hostname
    -I, ip) works here; each node's step sees its GPUs in CUDA_VISIBLE_DEVICES."""
    cluster = slurm_multi
    out_dir = cluster.tmp_shared("template")
    script = out_dir / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:8\n"
        "#SBATCH --partition=multi\n#SBATCH --time=5\n#SBATCH --exclusive\n"
        f"#SBATCH --output={out_dir}/job_%j.log\n"
        "set -e\n"
        "HOSTNAMES=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )\n"
        f"echo \"${{HOSTNAMES[*]}}\" > {out_dir}/hostnames\n"
        "srun bash -c 'echo $(hostname) $(hostname -I) $CUDA_VISIBLE_DEVICES "
        f"$(ip -o -4 addr show eth0 | wc -l)' > {out_dir}/steps\n")
    job = cluster.sbatch(str(script))
    log = out_dir / f"job_{job}.log"
    assert cluster.wait_job(job, timeout=60) == "COMPLETED", log.read_text()
    assert (out_dir / "hostnames").read_text().split() == cluster.partitions["multi"]
    steps = sorted(line.split() for line in (out_dir / "steps").read_text().splitlines())
    assert [(s[0], s[2], s[3]) for s in steps] == [
        (node, "0,1,2,3,4,5,6,7", "1") for node in cluster.partitions["multi"]]
    assert cluster.job_info(job)["NumCPUs"] == "16"  # --exclusive: both nodes whole


def _wait_running(cluster: Any, job: str) -> None:
    cluster.wait_job(job, timeout=30, states={"RUNNING"})


def _processes_on(cluster: Any, node: str, needle: str) -> list[str]:
    return [line for line in cluster.node_processes(node) if needle in line]


def test_scancel_ends_a_running_job_cancelled_and_nothing_is_left(slurm_multi: Any) -> None:
    cluster = slurm_multi
    seconds = str(600 + secrets.randbelow(1000))  # tells this job's sleeps from any other's
    job = cluster.sbatch("--partition=multi", "--nodes=2", "--time=5",
                         "--output=/dev/null", f"--wrap=srun sleep {seconds}")
    _wait_running(cluster, job)
    nodes = cluster.partitions["multi"]
    deadline = time.monotonic() + 60  # bounds, not expected delays (a loaded box is slower)
    while not all(_processes_on(cluster, n, f"sleep {seconds}") for n in nodes):
        assert time.monotonic() < deadline, "the step's sleeps never started on both nodes"
        time.sleep(0.2)
    cluster.run("scancel", job)
    assert cluster.wait_job(job, timeout=30) == "CANCELLED"
    deadline = time.monotonic() + 60
    while any(_processes_on(cluster, n, f"sleep {seconds}") for n in nodes):
        assert time.monotonic() < deadline, "the cancelled job's processes outlived it"
        time.sleep(0.2)


def test_a_node_killed_mid_job_fails_the_job_and_is_restored(slurm_multi: Any) -> None:
    cluster = slurm_multi
    victim = cluster.partitions["multi"][1]
    job = cluster.sbatch("--partition=multi", "--nodes=2", "--time=5",
                         "--output=/dev/null", "--wrap=srun sleep 300")
    _wait_running(cluster, job)
    cluster.kill_node(victim)
    # Which of the two Slurm records depends on timing: NODE_FAIL when slurmctld marks the
    # node down first, FAILED when srun on the surviving node loses its peer first. Either way
    # the job ends failed, never COMPLETED, and is not requeued.
    assert cluster.wait_job(job, timeout=60) in ("NODE_FAIL", "FAILED")
    # The dead node is marked down (SlurmdTimeout), whichever state the job got; how soon
    # depends on slurmctld's ping schedule, so wait for it rather than assert a delay.
    deadline = time.monotonic() + 60
    while not cluster.node_states().get(victim, "").startswith("down"):
        assert time.monotonic() < deadline, f"{victim} never marked down: {cluster.node_states()}"
        time.sleep(0.5)
    cluster.restore_node(victim)
    # The restored node runs jobs again.
    out_dir = cluster.tmp_shared("restored")
    again = cluster.sbatch("--partition=multi", "--nodes=2", "--time=5",
                           f"--output={out_dir}/out.txt", "--wrap=srun hostname")
    assert cluster.wait_job(again, timeout=60) == "COMPLETED"
    assert sorted((out_dir / "out.txt").read_text().split()) == sorted(cluster.partitions["multi"])


def test_a_session_needing_only_the_local_node_keeps_the_container_nodes(
        slurm_multi: Any) -> None:
    """`up(want_multi=False)` (tests that need only this machine's node, e.g. the reaper's)
    on a cluster with container nodes changes nothing: rewriting slurm.conf without them would
    restart slurmctld and end the jobs of a multi-node test running side by side."""
    import airvisor_test_slurm_cluster as module  # loaded by conftest.py

    cluster = slurm_multi
    pid_file = cluster.layout.run / "slurmctld.pid"
    before = (pid_file.read_text(), cluster.conf_path.read_text())
    job = cluster.sbatch("--partition=multi", "--nodes=2", "--time=5", "--output=/dev/null",
                         "--wrap=srun sleep 30")
    _wait_running(cluster, job)
    again = module.up(want_multi=False, quiet=True)
    assert "multi" in again.partitions
    assert (pid_file.read_text(), cluster.conf_path.read_text()) == before
    assert cluster.job_state(job) == "RUNNING"
    cluster.run("scancel", job)
    assert cluster.wait_job(job, timeout=30) == "CANCELLED"
