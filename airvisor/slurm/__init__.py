"""Slurm mode: a profile whose prime-rl config has a [slurm] table runs as Slurm jobs that
airvisor submits (prime-rl writes the script), watches and recovers. See docs/slurm.md.

The engine's RunManager makes a `SlurmRunSupervisor` instead of a `RunSupervisor` for such a
profile (`is_slurm_profile`); both have the same surface. `SlurmClient` is the adapter to
Slurm's commands (`CommandSlurm`), replaced by a fake in the replay tests.
"""

from airvisor.slurm._jobs import is_slurm_profile
from airvisor.slurm._node_check import read_reports, run_node_check
from airvisor.slurm._script import (
    NODE_PYTHON_ENV,
    SBATCH_FILE,
    JobScript,
    ScriptError,
    node_check_command,
    render_job_script,
    report_dir_for,
    slurm_settings,
)
from airvisor.slurm._supervisor import SlurmRunSupervisor
from airvisor.slurmctl._client import COMMAND_TIMEOUT, CommandSlurm, SlurmClient, SlurmError
from airvisor.slurmctl._states import (
    NODE_FAILURES_TO_EXCLUDE,
    EndDecision,
    Exclusion,
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

__all__ = [
    "COMMAND_TIMEOUT",
    "NODE_FAILURES_TO_EXCLUDE",
    "NODE_PYTHON_ENV",
    "SBATCH_FILE",
    "CommandSlurm",
    "EndDecision",
    "Exclusion",
    "JobInfo",
    "JobScript",
    "ScriptError",
    "SlurmClient",
    "SlurmError",
    "SlurmParseError",
    "SlurmRunSupervisor",
    "blamed_nodes",
    "decide_job_end",
    "is_slurm_profile",
    "job_from_sacct",
    "job_from_scontrol",
    "job_phase",
    "node_check_command",
    "nodes_to_exclude",
    "parse_node_states",
    "parse_sbatch_parsable",
    "read_reports",
    "render_job_script",
    "report_dir_for",
    "run_node_check",
    "slurm_settings",
    "split_hostlist_option",
]
