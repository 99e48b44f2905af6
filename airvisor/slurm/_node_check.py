"""The node check of Slurm mode: run once on every node of a job (an `srun` step that prime-rl's
own `pre_run_command` starts, see `_script.py`), before the training steps. It is airvisor's
reaper and GPU preflight (`airvisor.reaper.prepare_machine`) on that node, judged by ownership:

- the job's own processes (those whose environment names this `SLURM_JOB_ID`) are kept;
- processes carrying this run's marker from an earlier job are leftovers and are stopped;
- known training processes (vLLM, torchrun, prime-rl's entry points) holding the node's GPUs
  or the run's ports are stopped; anything else is listed as left alone, with the reason.

Its report (`<report dir>/<host>.json`) is read by the supervisor into the run's events.
Exit status 1 when the node cannot host the job (GPU memory not freed in time): the job fails
with that reason instead of an out-of-memory error minutes later.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from airvisor.gpu import GPUUnavailable, list_gpus
from airvisor.profile._schema import Profile
from airvisor.reaper import PreflightError, prepare_machine

REPORT_SUFFIX = ".json"


def job_pids(job_id: str) -> set[int]:
    """The processes of Slurm job `job_id` on this node (its environment names the job)."""
    wanted = f"SLURM_JOB_ID={job_id}".encode()
    found: set[int] = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as handle:
                if wanted in handle.read().split(b"\0"):
                    found.add(proc.pid)
        except OSError:
            continue
    return found


def _node_profile(profile: Any, gpus: list[int]) -> Any:
    """The run's profile as this node sees it: every GPU of the node is the job's (Slurm's
    --exclusive allocation), nothing else of the profile's one-box GPU lists applies."""
    node_gpus = profile.gpus.model_copy(update={"inference": [], "trainer": gpus,
                                                "containers": []})
    containers = profile.containers.model_copy(update={"enabled": False, "gpus": []})
    return profile.model_copy(update={"gpus": node_gpus, "containers": containers})


def _node_gpus() -> list[int]:
    try:
        return [g.index for g in list_gpus()]
    except GPUUnavailable:
        return []  # no driver here (a CPU node, or the tests): nothing to wait for


def run_node_check(*, run_id: str, report_dir: Path, host: str | None = None) -> dict[str, Any]:
    host = host or socket.gethostname()
    started = time.time()
    job_id = os.environ.get("SLURM_JOB_ID", "")
    report: dict[str, Any] = {"host": host, "job_id": job_id, "run_id": run_id,
                              "started_at": started, "ok": False}
    events: list[dict[str, Any]] = []
    try:
        profile = Profile.model_validate(json.loads((report_dir / "profile.json").read_text()))
        live_file = report_dir / "live_runs.json"
        live = set(json.loads(live_file.read_text())) if live_file.is_file() else set()
        gpus = _node_gpus()
        own = job_pids(job_id) if job_id else set()

        def log(kind: str, data: dict[str, Any]) -> None:
            if kind in ("reaper.candidate", "reaper.left_alone", "reaper.reaped",
                        "preflight.waiting"):
                events.append({**data, "event": kind})

        result = prepare_machine(_node_profile(profile, gpus), run_id=run_id,
                                 live_run_ids=live, own_pids=own, log=log)
        report.update(ok=True, summary=result.summary, gpus=gpus,
                      reaped=[e for e in events if e["event"] == "reaper.candidate"],
                      left_alone=[e for e in events if e["event"] == "reaper.left_alone"])
    except PreflightError as exc:
        report.update(summary=f"preflight failed: {exc}", error=str(exc), events=events)
    except Exception as exc:  # the report must be written whatever happened
        report.update(summary=f"node check failed: {type(exc).__name__}: {exc}",
                      error=str(exc), events=events)
    report["seconds"] = round(time.time() - started, 3)
    report_dir.mkdir(parents=True, exist_ok=True)
    target = report_dir / f"{host}{REPORT_SUFFIX}"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(report, default=str))
    partial.replace(target)  # the supervisor never reads half a report
    return report


def read_reports(report_dir: Path) -> dict[str, dict[str, Any]]:
    """host -> report, for the reports written so far."""
    reports: dict[str, dict[str, Any]] = {}
    try:
        entries = sorted(report_dir.glob(f"*{REPORT_SUFFIX}"))
    except OSError:
        return reports
    for path in entries:
        if path.name in ("profile.json", "live_runs.json"):
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "host" in data:
            reports[str(data["host"])] = data
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airvisor.slurm")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("node-check", help="reaper + GPU preflight on this node of the job")
    check.add_argument("--run-id", required=True)
    check.add_argument("--report-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    report = run_node_check(run_id=args.run_id, report_dir=args.report_dir)
    print(f"[airvisor node-check] {report['host']}: {report['summary']}", flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
