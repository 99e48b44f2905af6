"""What a Slurm job writes to the shared run directory, read by the supervisor on its main loop:
the components' logs and metrics (the job's progress), the job's own log (prime-rl's launcher's
line naming a child that failed), and the reports of airvisor's node check on each node.

A small collaborator of `SlurmRunSupervisor` (which turns what is read here into events and
decisions): which files are the current job's, and what of them was read already.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail
from airvisor.core import LogView
from airvisor.primerl import ChildFailure, RunLayout, child_failure_from_line
from airvisor.slurm._node_check import read_reports

VIEWED = ("trainer", "orchestrator", "inference")


class JobFiles:
    """The current job's files on the shared filesystem and what of them was read."""

    def __init__(self) -> None:
        self.views: dict[str, LogView] = {}
        self.job_log: LogView | None = None
        self.metrics: LogTail | None = None
        self.report_dir: Path | None = None  # the node check's reports of the current attempt
        self.reported: set[str] = set()  # the hosts whose report was said
        # prime-rl's launcher's line in the job's log naming the first child that failed.
        self.child_failure: ChildFailure | None = None

    def new_job(self, report_dir: Path | None) -> None:
        """A job was submitted: nothing of it read or said yet."""
        self.report_dir = report_dir
        self.reported = set()
        self.child_failure = None

    def open(self, layout: RunLayout | None, job_id: str | None, *, catch_up: bool) -> None:
        """The job's logs on the shared filesystem. Right after a submission, what the paths
        name now is an earlier job's (read only once the new job wrote new files); on
        re-attaching to a live job (`catch_up`), the files there are this job's."""
        self.views = {}
        if layout is None:
            return
        for name in VIEWED:
            self.views[name] = LogView(lambda name=name: layout.log_file(name),  # type: ignore[misc]
                                       skip_existing=not catch_up)
        metrics = layout.metrics_file()
        self.metrics = LogTail(metrics, from_end=not catch_up) if metrics is not None else None
        # One log per job id: never an earlier job's.
        self.job_log = LogView(lambda: layout.run_dir / f"job_{job_id}.log",
                               skip_existing=False)

    def failure_lines(self) -> list[str]:
        """The last lines that show a failure: the job's log's, else the trainer's."""
        lines: list[str] = []
        if self.job_log is not None:
            lines = self.job_log.last_lines
        trainer = self.views.get("trainer")
        if not lines and trainer is not None:
            lines = trainer.last_lines
        return lines

    def sources(self) -> list[tuple[str, LogView | LogTail]]:
        """The logs to read for progress, by name; the job's own log as "job"."""
        sources: list[tuple[str, LogView | LogTail]] = list(self.views.items())
        if self.job_log is not None:
            sources.append(("job", self.job_log))
        return sources

    def on_line(self, source: str, line: str) -> None:
        """A line that is neither a step nor a milestone: the first child failure the
        launcher names in the job's log is kept."""
        if source == "job" and self.child_failure is None:
            self.child_failure = child_failure_from_line(line)

    def reports(self) -> dict[str, dict[str, Any]]:
        """The node check's reports of the current attempt, by host."""
        return read_reports(self.report_dir) if self.report_dir is not None else {}

    def unsaid_reports(self) -> list[tuple[str, dict[str, Any]]]:
        """The reports not said yet (each said once), by host."""
        unsaid = [(host, report) for host, report in self.reports().items()
                  if host not in self.reported]
        self.reported.update(host for host, _ in unsaid)
        return unsaid
