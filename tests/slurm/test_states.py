"""The pure decisions of Slurm mode: Slurm's text, job verdicts, node blame and exclusion."""

from __future__ import annotations

import pytest

from airvisor.slurm import (
    JobInfo,
    SlurmParseError,
    blamed_nodes,
    decide_job_end,
    job_from_sacct,
    job_from_scontrol,
    job_phase,
    nodes_to_exclude,
    parse_node_states,
    parse_sbatch_parsable,
    split_hostlist_option,
)

# `scontrol show job -o 42` of Slurm 22.05 (abridged: the keys in their order, one line).
SCONTROL_NODE_FAIL = (
    "JobId=42 JobName=airvisor-test UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 "
    "Nice=0 Account=(null) QOS=(null) JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
    "Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:21 "
    "TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-26T10:00:00 Partition=multi "
    "NodeList=node[1-2] BatchHost=node1 NumNodes=2 NumCPUs=2 "
    "Command=/tmp/a b/rl.sbatch WorkDir=/tmp StdOut=/shared/run/job_42.log Power="
)


def test_sbatch_parsable_gives_the_job_id_with_or_without_a_cluster() -> None:
    assert parse_sbatch_parsable("1234\n") == "1234"
    assert parse_sbatch_parsable("1234;cluster\n") == "1234"
    with pytest.raises(SlurmParseError):
        parse_sbatch_parsable("sbatch: error: Batch job submission failed\n")
    with pytest.raises(SlurmParseError):
        parse_sbatch_parsable("")


def test_scontrol_line_is_read_by_key() -> None:
    job = job_from_scontrol("42", SCONTROL_NODE_FAIL, nodes=["node1", "node2"])
    assert (job.state, job.reason, job.exit_code, job.signal) == ("NODE_FAIL", "NodeDown", 0, 0)
    assert job.nodelist == "node[1-2]" and job.nodes == ("node1", "node2")
    assert job.phase == "ended" and job.outcome == "node_fail"
    pending = job_from_scontrol("7", "JobId=7 JobState=PENDING Reason=Resources "
                                     "ExitCode=0:0 NodeList=(null)")
    assert pending.phase == "queued" and pending.nodelist == "" and pending.outcome is None
    with pytest.raises(SlurmParseError):
        job_from_scontrol("7", "slurm_load_jobs error: Invalid job id specified")


def test_sacct_line_and_cancelled_by_uid() -> None:
    text = "43|CANCELLED by 0|0:15|node2|None\n43.batch|CANCELLED|0:15|node2|\n"
    job = job_from_sacct("43", text)
    assert job is not None
    assert (job.state, job.exit_code, job.signal, job.nodelist) == ("CANCELLED", 0, 15, "node2")
    assert job_from_sacct("44", text) is None


@pytest.mark.parametrize(("state", "phase"), [
    ("PENDING", "queued"), ("CONFIGURING", "queued"), ("REQUEUED", "queued"),
    ("RUNNING", "running"), ("COMPLETING", "ending"), ("COMPLETED", "ended"),
    ("FAILED", "ended"), ("TIMEOUT", "ended"), ("NODE_FAIL", "ended"),
    ("OUT_OF_MEMORY", "ended"), ("CANCELLED by 0", "ended"), ("GONE", "ended"),
    ("SOMETHING_NEW", "unknown"),
])
def test_job_phases(state: str, phase: str) -> None:
    assert job_phase(state) == phase


def ended(state: str, code: int = 0, nodes: tuple[str, ...] = ("n1",)) -> JobInfo:
    return JobInfo(job_id="9", state=state, nodes=nodes, exit_code=code, signal=0)


def test_a_completed_job_succeeds_and_a_failed_one_recovers() -> None:
    assert decide_job_end(ended("COMPLETED"), training_done=False,
                          stop_requested=False).action == "succeeded"
    failed = decide_job_end(ended("FAILED", 1), training_done=False, stop_requested=False,
                            child_failure="trainer exited with status 1")
    assert failed.action == "recover" and failed.kind == "crash"
    assert failed.reason == "job 9 failed (FAILED, exit 1): trainer exited with status 1"
    timeout = decide_job_end(ended("TIMEOUT"), training_done=False, stop_requested=False)
    assert "hit its time limit" in timeout.reason and timeout.action == "recover"


def test_finished_training_is_success_whatever_the_job_ends_in() -> None:
    # The multi-node template's inference nodes never exit: airvisor cancels the job.
    decision = decide_job_end(ended("CANCELLED"), training_done=True, stop_requested=False)
    assert decision.action == "succeeded"


def test_a_requested_stop_wins_and_a_live_job_means_wait() -> None:
    assert decide_job_end(ended("CANCELLED"), training_done=False,
                          stop_requested=True).action == "stopped"
    running = JobInfo(job_id="9", state="RUNNING")
    assert decide_job_end(running, training_done=True, stop_requested=False).action == "wait"


def test_node_failures_blame_the_nodes_slurm_marks_down() -> None:
    job = ended("NODE_FAIL", nodes=("node1", "node2"))
    states = parse_node_states("node1|down*\nnode2|allocated\n")
    assert states == {"node1": "down*", "node2": "allocated"}
    assert blamed_nodes(job, states) == ["node1"]
    assert blamed_nodes(job, {"node1": "idle*"}) == ["node1"]  # `*`: not responding
    assert blamed_nodes(job, {}) == []  # unknown which one: nobody is blamed
    assert blamed_nodes(ended("NODE_FAIL", nodes=("solo",)), {}) == ["solo"]
    # A plain failure blames no node, but a failed node check does.
    assert blamed_nodes(ended("FAILED", 1, ("node1", "node2")), states) == []
    assert blamed_nodes(ended("FAILED", 1, ("node1", "node2")), {},
                        failed_checks=["node2", "elsewhere"]) == ["node2"]


def test_a_node_is_excluded_after_two_failures_plus_the_users_own() -> None:
    once = nodes_to_exclude([["node1"]], user_exclude=["bad0"])
    assert once.nodes == ("bad0",) and once.describe() == "excluding bad0 (failed 0 times)"
    twice = nodes_to_exclude([["node1"], ["node1", "node2"]])
    assert twice.nodes == ("node1",) and twice.counts == {"node1": 2, "node2": 1}
    assert "node1 (failed 2 times)" in twice.describe()
    assert nodes_to_exclude([]).describe() == "no node excluded"


def test_hostlist_option_keeps_bracket_ranges_whole() -> None:
    assert split_hostlist_option("a,n[1-3,5],b") == ["a", "n[1-3,5]", "b"]
    assert split_hostlist_option(None) == [] and split_hostlist_option("") == []
