"""Pure decisions of Slurm mode: what Slurm's answers mean for the run, and which nodes to leave
out of the next job. No I/O: the adapter (`_client.py`) hands in Slurm's text, the supervisor the
facts it gathered.

Job states are Slurm 22.05's (`squeue(1)` JOB STATE CODES, `sacct(1)` JOB STATE CODES); sacct
writes `CANCELLED by <uid>`, scontrol `CANCELLED`; both are read by their first word.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Phase = Literal["queued", "running", "ending", "ended", "unknown"]
Outcome = Literal["completed", "failed", "cancelled", "timeout", "node_fail", "oom",
                  "preempted", "boot_fail", "deadline", "gone"]

# Waiting for or between allocations: no training can progress, no stall is counted.
_QUEUED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                     "RESV_DEL_HOLD", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING"})
_RUNNING = frozenset({"RUNNING"})
# The batch script ended; Slurm is still killing and cleaning up on the nodes.
_ENDING = frozenset({"COMPLETING", "STAGE_OUT"})
_ENDED: Mapping[str, Outcome] = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "SPECIAL_EXIT": "failed",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_fail",
    "OUT_OF_MEMORY": "oom",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "boot_fail",
    "DEADLINE": "deadline",
    "GONE": "gone",  # airvisor's word: neither scontrol nor sacct knows the job any more
}
# Outcomes that say a node, not the training, failed.
NODE_OUTCOMES: frozenset[Outcome] = frozenset({"node_fail", "boot_fail"})
# Node states (sinfo %T, lower case; a trailing `*` means "not responding") that mark a node bad.
_BAD_NODE = re.compile(r"^(down|drain|drained|draining|fail|failing|not_responding)\b|\*$")

NODE_FAILURES_TO_EXCLUDE = 2  # a node blamed for this many failed jobs is left out (--exclude)


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about one job."""

    job_id: str
    state: str  # Slurm's word, upper case (PENDING, RUNNING, NODE_FAIL, ...)
    nodes: tuple[str, ...] = ()  # expanded host names (empty while pending)
    nodelist: str = ""  # Slurm's compact form (n[1-3])
    reason: str = ""  # why pending, or why it ended (Slurm's Reason)
    exit_code: int | None = None  # the batch script's status
    signal: int | None = None  # the signal that ended it (0: none)

    @property
    def phase(self) -> Phase:
        return job_phase(self.state)

    @property
    def outcome(self) -> Outcome | None:
        return _ENDED.get(self.state) if self.phase == "ended" else None

    def describe(self) -> str:
        text = self.state
        if self.reason and self.reason not in ("None", "(null)"):
            text += f" ({self.reason})"
        if self.phase == "ended" and self.exit_code is not None:
            text += f", exit {self.exit_code}"
            if self.signal:
                text += f" signal {self.signal}"
        return text


def job_phase(state: str) -> Phase:
    word = state.split()[0].upper().rstrip("+") if state.strip() else ""
    if word in _QUEUED:
        return "queued"
    if word in _RUNNING:
        return "running"
    if word in _ENDING:
        return "ending"
    if word in _ENDED:
        return "ended"
    return "unknown"


def normal_state(state: str) -> str:
    """`CANCELLED by 0` -> `CANCELLED`; `RUNNING` stays."""
    return state.split()[0].upper().rstrip("+") if state.strip() else "UNKNOWN"


# -- Slurm's text ---------------------------------------------------------------------------------

class SlurmParseError(ValueError):
    pass


def parse_sbatch_parsable(stdout: str) -> str:
    """`sbatch --parsable` prints `<job id>` or `<job id>;<cluster>` (sbatch(1))."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError("sbatch printed no job id")
    job_id = lines[-1].split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmParseError(f"sbatch printed {lines[-1]!r}, not a job id")
    return job_id


_KV = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(\S*)")


def parse_scontrol_job(text: str) -> dict[str, str]:
    """The fields of `scontrol show job -o <id>` (one line of Key=Value pairs). Values with
    spaces (Command, Comment) are cut at the first space: none of the keys read here has one."""
    fields: dict[str, str] = {}
    for key, value in _KV.findall(text):
        fields.setdefault(key, value)
    return fields


def _exit(value: str) -> tuple[int | None, int | None]:
    if ":" not in value:
        return None, None
    code, _, sig = value.partition(":")
    try:
        return int(code), int(sig)
    except ValueError:
        return None, None


def job_from_scontrol(job_id: str, text: str, nodes: Sequence[str] = ()) -> JobInfo:
    fields = parse_scontrol_job(text)
    if "JobState" not in fields:
        raise SlurmParseError(f"scontrol printed no JobState for job {job_id}")
    code, sig = _exit(fields.get("ExitCode", ""))
    nodelist = fields.get("NodeList", "")
    return JobInfo(job_id=job_id, state=normal_state(fields["JobState"]), nodes=tuple(nodes),
                   nodelist="" if nodelist == "(null)" else nodelist,
                   reason=fields.get("Reason", ""), exit_code=code, signal=sig)


SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList", "Reason")


def job_from_sacct(job_id: str, text: str, nodes: Sequence[str] = ()) -> JobInfo | None:
    """The allocation's line of `sacct -n -P -X -j <id> -o JobID,State,ExitCode,NodeList,Reason`
    (None when sacct has no record)."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or parts[0] != job_id:
            continue
        code, sig = _exit(parts[2])
        nodelist = parts[3] if len(parts) > 3 and parts[3] != "None assigned" else ""
        return JobInfo(job_id=job_id, state=normal_state(parts[1]), nodes=tuple(nodes),
                       nodelist=nodelist, reason=parts[4] if len(parts) > 4 else "",
                       exit_code=code, signal=sig)
    return None


def parse_node_states(text: str) -> dict[str, str]:
    """`sinfo -h -N -o %N|%T` lines -> host -> state (lower case, `*` kept)."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        host, sep, state = line.strip().partition("|")
        if sep and host:
            states[host] = state.strip().lower()
    return states


# -- decisions ------------------------------------------------------------------------------------

Action = Literal["wait", "succeeded", "recover", "stopped"]


@dataclass(frozen=True)
class EndDecision:
    action: Action
    reason: str
    kind: Literal["crash", "hang", "operator", "boot", "none"] = "none"


def decide_job_end(job: JobInfo, *, training_done: bool, stop_requested: bool,
                   child_failure: str | None = None) -> EndDecision:
    """What an ended job means for the run.

    `training_done`: the logs show the trainer and orchestrator finished (or the last step). A
    multi-node job whose training finished may still end non-zero: prime-rl's inference nodes
    never exit by themselves, so airvisor cancels the job once training is done.
    """
    if job.phase != "ended":
        return EndDecision("wait", f"job {job.job_id} is {job.describe()}")
    if stop_requested:
        return EndDecision("stopped", f"job {job.job_id} ended ({job.describe()}) on request")
    if training_done:
        return EndDecision("succeeded", f"training finished; job {job.job_id} ended "
                                        f"({job.describe()})")
    if job.outcome == "completed" and job.exit_code in (0, None):
        return EndDecision("succeeded", f"job {job.job_id} completed")
    what = {
        "completed": "ended with a non-zero status",
        "failed": "failed",
        "cancelled": "was cancelled outside airvisor",
        "timeout": "hit its time limit (#SBATCH --time)",
        "node_fail": "lost a node (NODE_FAIL)",
        "oom": "ran out of memory",
        "preempted": "was preempted",
        "boot_fail": "could not boot a node (BOOT_FAIL)",
        "deadline": "missed its deadline",
        "gone": "is no longer known to Slurm",
    }.get(job.outcome or "failed", "ended")
    reason = f"job {job.job_id} {what} ({job.describe()})"
    if child_failure:
        reason += f": {child_failure}"
    return EndDecision("recover", reason, "crash")


def blamed_nodes(job: JobInfo, node_states: Mapping[str, str],
                 failed_checks: Iterable[str] = ()) -> list[str]:
    """The nodes a failed job can be blamed on: those whose node check failed, and, when Slurm
    says a node failed, the job's nodes that Slurm now marks down, drained or not responding
    (one node alone is blamed when the job had only one)."""
    blamed = set(failed_checks) & set(job.nodes) if job.nodes else set(failed_checks)
    if job.outcome in NODE_OUTCOMES:
        bad = {n for n in job.nodes if _BAD_NODE.search(node_states.get(n, ""))}
        if not bad and len(job.nodes) == 1:
            bad = set(job.nodes)
        blamed |= bad
    return sorted(blamed)


@dataclass(frozen=True)
class Exclusion:
    nodes: tuple[str, ...]
    counts: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        if not self.nodes:
            return "no node excluded"
        return "excluding " + ", ".join(f"{n} (failed {self.counts.get(n, 0)} times)"
                                        for n in self.nodes)


def nodes_to_exclude(blames: Iterable[Sequence[str]], *, user_exclude: Sequence[str] = (),
                     threshold: int = NODE_FAILURES_TO_EXCLUDE) -> Exclusion:
    """Each failed attempt's blamed nodes -> the nodes the next job leaves out: those blamed at
    least `threshold` times, plus the user's own `[slurm] exclude` (sbatch's --exclude replaces
    the script's, so both go on the command line)."""
    counts = Counter(node for blamed in blames for node in set(blamed))
    failing = {node for node, count in counts.items() if count >= threshold}
    nodes = sorted(failing | {n for n in user_exclude if n})
    return Exclusion(tuple(nodes), dict(counts))


def split_hostlist_option(value: str | None) -> list[str]:
    """`[slurm] exclude = "a,b"` -> ["a", "b"] (a comma list; bracket ranges are kept as they
    are, Slurm expands them itself)."""
    if not value:
        return []
    return [part.strip() for part in re.split(r",(?![^\[]*\])", value) if part.strip()]
