"""airvisor's node check, as a Slurm job runs it (the `srun` step of `node_check_command`), on a
real container node: a leftover of an earlier job of the same run (it escaped Slurm's clean-up
by double-forking into its own session) is stopped by its run marker, the job's own processes
are kept, and the per-node report says so."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from airvisor.slurm import node_check_command, read_reports

from ._support import slurm_profile


def test_node_check_reaps_a_leftover_of_the_run_and_keeps_the_job(slurm_multi: Any) -> None:
    cluster = slurm_multi
    node = cluster.partitions["multi"][0]
    base = cluster.tmp_shared("nodecheck")
    run_id = f"nodecheck-{secrets.token_hex(3)}"
    python = str(cluster.python)
    # An earlier job of the run leaves a process behind (setsid + double fork: Slurm's
    # proctrack/linuxproc loses it once it is re-parented to the node's init).
    (base / "leftover.sh").write_text(
        "#!/bin/bash\n"
        f"( AIRVISOR_RUN_ID={run_id} setsid sleep 600 >/dev/null 2>&1 & )\n"
        "sleep 1\n")
    earlier = cluster.sbatch("-p", "multi", "-w", node, "--time=5",
                             f"--output={base}/earlier.out", str(base / "leftover.sh"))
    assert cluster.wait_job(earlier, timeout=60) == "COMPLETED"
    marked = f"AIRVISOR_RUN_ID={run_id}"

    def leftovers() -> list[str]:
        return [line for line in cluster.node_processes(node) if line == "sleep 600"]

    assert leftovers() == ["sleep 600"]
    # The job that runs the check carries the same marker (as airvisor submits it).
    profile = slurm_profile(base, reaper={"enabled": True})
    reports = base / "reports"
    reports.mkdir()
    (reports / "profile.json").write_text(json.dumps(profile.model_dump(mode="json"),
                                                     default=str))
    (reports / "live_runs.json").write_text("[]")
    step = node_check_command(run_id=run_id, report_dir=reports, python=[python])
    (base / "job.sh").write_text(f"#!/bin/bash\nset -e\nexport {marked}\n{step}\n"
                                 "echo job-survived-its-own-check\n")
    job = cluster.sbatch("-p", "multi", "-w", node, "--time=5", f"--output={base}/job.out",
                         str(base / "job.sh"))
    assert cluster.wait_job(job, timeout=90) == "COMPLETED"
    assert "job-survived-its-own-check" in (base / "job.out").read_text()
    report = read_reports(reports)[node]
    assert report["ok"] and report["job_id"] == job
    (reaped,) = report["reaped"]
    assert f"run {run_id}" in reaped["reason"] and reaped["command"] == "sleep 600"
    deadline = time.monotonic() + 30
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftovers() == []
