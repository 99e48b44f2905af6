"""Slurm's commands (sbatch, squeue, scontrol, sacct, scancel) behind one adapter, and what
their answers mean (job states, pure verdicts). Below both the Slurm backend
(`airvisor.slurm`) and the reaper, which asks whether a job still runs."""

from airvisor.slurmctl._client import COMMAND_TIMEOUT, CommandSlurm, SlurmClient, SlurmError
from airvisor.slurmctl._states import JobInfo, job_phase

__all__ = ["COMMAND_TIMEOUT", "CommandSlurm", "JobInfo", "SlurmClient", "SlurmError", "job_phase"]
