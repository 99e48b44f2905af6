"""The Slurm adapter: `sbatch`, `scontrol`, `sacct`, `sinfo`, `scancel` as argv lists (never a
shell string), behind one small interface the supervisor uses (`SlurmClient`); the replay tests
put a fake in its place.

Why these commands (Slurm 22.05, what Debian ships): `scontrol show job -o` answers for pending,
running and recently ended jobs (for MinJobAge, 300 s by default) with the state, reason, exit
code and node list, from slurmctld itself, with no accounting database; `sacct` answers for
older jobs when accounting storage is configured (a daemon restarted long after its job ended);
`--json` output needs the data_parser plugins, which 22.05 builds only with libjson-c and the
openapi plugins, so the plain `-o` / `-P` formats are read instead. See docs/slurm.md.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from airvisor.slurmctl._states import (
    SACCT_FIELDS,
    JobInfo,
    SlurmParseError,
    job_from_sacct,
    job_from_scontrol,
    parse_node_states,
    parse_sbatch_parsable,
)

COMMAND_TIMEOUT = 60.0  # seconds for one Slurm command (slurmctld may be slow to answer)


class SlurmError(Exception):
    """A Slurm command failed; the message names the command and Slurm's own words."""


class SlurmClient(Protocol):
    def submit(self, script: Path, *, options: Sequence[str], env: Mapping[str, str],
               cwd: Path) -> str: ...

    def job(self, job_id: str) -> JobInfo: ...

    def cancel(self, job_id: str) -> None: ...

    def node_states(self, nodes: Sequence[str]) -> dict[str, str]: ...


class CommandSlurm:
    """The real Slurm, through its client commands on PATH (or `bin_dir`)."""

    def __init__(self, *, bin_dir: Path | None = None, environ: Mapping[str, str] | None = None,
                 timeout: float = COMMAND_TIMEOUT) -> None:
        self._bin_dir = bin_dir
        self._environ = dict(environ) if environ is not None else None
        self._timeout = timeout

    def _cmd(self, name: str) -> str:
        return str(self._bin_dir / name) if self._bin_dir is not None else name

    def _run(self, argv: list[str], *, env: Mapping[str, str] | None = None,
             cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self._timeout,
                                  env=dict(env) if env is not None else self._environ,
                                  cwd=cwd, check=False)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} is not installed here (Slurm's client commands must be "
                             "on PATH: run airvisor on a login or head node)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv[:3])} did not answer within "
                             f"{self._timeout:g} s (is slurmctld up?)") from None
        if check and done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise SlurmError(f"{' '.join(argv[:3])} failed (exit {done.returncode}): "
                             f"{' | '.join(said[-3:]) or 'no output'}")
        return done

    def submit(self, script: Path, *, options: Sequence[str], env: Mapping[str, str],
               cwd: Path) -> str:
        done = self._run([self._cmd("sbatch"), "--parsable", *options, str(script)],
                         env=env, cwd=cwd)
        try:
            return parse_sbatch_parsable(done.stdout)
        except SlurmParseError as exc:
            raise SlurmError(str(exc)) from None

    def hostnames(self, nodelist: str) -> list[str]:
        """Slurm's own expansion of a compact node list (`n[1-3]`)."""
        if not nodelist:
            return []
        done = self._run([self._cmd("scontrol"), "show", "hostnames", nodelist])
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]

    def job(self, job_id: str) -> JobInfo:
        done = self._run([self._cmd("scontrol"), "show", "job", "-o", job_id], check=False)
        if done.returncode == 0 and "JobState=" in done.stdout:
            try:
                info = job_from_scontrol(job_id, done.stdout)
            except SlurmParseError as exc:
                raise SlurmError(str(exc)) from None
            return _with_nodes(info, self.hostnames(info.nodelist))
        if "Invalid job id" not in (done.stderr + done.stdout):
            said = (done.stderr or done.stdout).strip()
            raise SlurmError(f"scontrol show job {job_id} failed (exit {done.returncode}): "
                             f"{said or 'no output'}")
        # Older than MinJobAge: accounting, where it is configured.
        acct = self._run([self._cmd("sacct"), "-n", "-P", "-X", "-j", job_id, "-o",
                          ",".join(SACCT_FIELDS)], check=False)
        found = job_from_sacct(job_id, acct.stdout) if acct.returncode == 0 else None
        if found is None:
            return JobInfo(job_id=job_id, state="GONE",
                           reason="neither scontrol nor sacct knows the job")
        return _with_nodes(found, self.hostnames(found.nodelist))

    def cancel(self, job_id: str) -> None:
        self._run([self._cmd("scancel"), job_id])

    def node_states(self, nodes: Sequence[str]) -> dict[str, str]:
        if not nodes:
            return {}
        done = self._run([self._cmd("sinfo"), "-h", "-N", "-n", ",".join(nodes),
                          "-o", "%N|%T"], check=False)
        return parse_node_states(done.stdout) if done.returncode == 0 else {}


def _with_nodes(info: JobInfo, nodes: list[str]) -> JobInfo:
    return JobInfo(job_id=info.job_id, state=info.state, nodes=tuple(nodes),
                   nodelist=info.nodelist, reason=info.reason, exit_code=info.exit_code,
                   signal=info.signal)
