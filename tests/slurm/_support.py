"""Helpers of the Slurm-mode tests: a fake Slurm (the adapter's interface, scripted by the test)
and a driver that plays the manager's part (events in, ticks) for one SlurmRunSupervisor."""

from __future__ import annotations

import itertools
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from airvisor.core import Event
from airvisor.policy import Phase
from airvisor.primerl import prepare_run
from airvisor.profile import Profile, load_profile
from airvisor.slurm import JobInfo, JobScript, SlurmRunSupervisor, report_dir_for
from airvisor.store import Store

from ..primerl.test_layout import main_orchestrator_save, main_trainer_save


@dataclass
class Submission:
    job_id: str
    script: Path
    options: list[str]
    env: dict[str, str]


@dataclass
class FakeSlurm:
    """The adapter's interface over a dictionary of job states that the test sets."""

    jobs: dict[str, JobInfo] = field(default_factory=dict)
    submissions: list[Submission] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)
    fail_submit: str | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(100))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, script: Path, *, options: Sequence[str], env: Mapping[str, str],
               cwd: Path) -> str:
        from airvisor.slurm import SlurmError

        if self.fail_submit:
            raise SlurmError(self.fail_submit)
        with self.lock:
            job_id = str(next(self._ids))
            self.submissions.append(Submission(job_id, script, list(options), dict(env)))
            self.jobs[job_id] = JobInfo(job_id=job_id, state="PENDING", reason="Resources")
        return job_id

    def job(self, job_id: str) -> JobInfo:
        with self.lock:
            return self.jobs.get(job_id, JobInfo(job_id=job_id, state="GONE"))

    def cancel(self, job_id: str) -> None:
        with self.lock:
            self.cancelled.append(job_id)
            old = self.jobs[job_id]
            self.jobs[job_id] = JobInfo(job_id=job_id, state="CANCELLED", nodes=old.nodes,
                                        exit_code=0, signal=15)

    def node_states(self, nodes: Sequence[str]) -> dict[str, str]:
        return {n: self.nodes[n] for n in nodes if n in self.nodes}

    # -- what the test does to a job --------------------------------------------------------
    def set(self, job_id: str, state: str, nodes: Sequence[str] = ("node1",),
            code: int = 0) -> None:
        with self.lock:
            self.jobs[job_id] = JobInfo(job_id=job_id, state=state, nodes=tuple(nodes),
                                        nodelist=",".join(nodes), exit_code=code, signal=0)

    @property
    def last(self) -> str:
        return self.submissions[-1].job_id


def slurm_rl_config(out: Path, *, slurm: Mapping[str, Any] | None = None,
                    **extra: Any) -> dict[str, Any]:
    """A prime-rl main config with a [slurm] table (the shape of docs/scaling.md's example)."""
    config: dict[str, Any] = {
        "max_steps": 6,
        "output_dir": str(out),
        "run": {"name": "slurm-run"},
        "model": {"name": "Qwen/Qwen3-0.6B"},
        "deployment": {"gpus_per_node": 2, "num_train_gpus": 1, "num_infer_gpus": 1},
        "slurm": {"job_name": "airvisor-test", "partition": "local", **(slurm or {})},
        "ckpt": {"interval": 2},
        "orchestrator": {"batch_size": 16, "group_size": 4,
                         "train": {"sampling": {"max_completion_tokens": 16}}},
        "trainer": {"optim": {"lr": 3e-6}},
        "inference": {},
    }
    config.update(extra)
    return config


def slurm_profile(tmp: Path, *, python: Sequence[str] = (), rl: Mapping[str, Any] | None = None,
                  **extra: Any) -> Profile:
    """A bound airvisor profile over `slurm_rl_config`, resolved with prime-rl when `python`
    names prime-rl's interpreter (else airvisor's own reading)."""
    config = tmp / "rl.toml"
    config.write_text(tomli_w.dumps(slurm_rl_config(tmp / "outputs", **(rl or {}))))
    data: dict[str, Any] = {
        "run": {"name": "slurm-run", "demo": True},
        "prime_rl": {"version": "main", "python": list(python), "args": ["@", str(config)],
                     "workdir": str(tmp)},
        "health": {"probe_interval": 0.5, "stall_timeout": 30, "first_step_grace": 60},
        "checkpoint": {"size_gib": 0},
        "restart": {"max_restarts": 3, "window": 120, "backoff_initial": 0.1,
                    "backoff_factor": 2, "backoff_max": 0.5, "stop_grace": 1},
        "reaper": {"enabled": False},
    }
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value}
    path = tmp / "profile.toml"
    path.write_text(tomli_w.dumps(data))
    prepared = prepare_run(load_profile(path), machine=False)
    assert prepared.problems == [], prepared.problems
    return prepared.profile


class FakeRender:
    """Stands for prime-rl's `rl --dry-run`: writes a script, records the resume step."""

    def __init__(self) -> None:
        self.resume_steps: list[int | None] = []

    def __call__(self, profile: Profile, *, run_id: str, attempt: int, resume_step: int | None,
                 attempt_dir: Path) -> JobScript:
        self.resume_steps.append(resume_step)
        attempt_dir.mkdir(parents=True, exist_ok=True)
        script = attempt_dir / "rl.sbatch"
        script.write_text("#!/bin/bash\necho fake\n")
        assert profile.resolved is not None
        report_dir = report_dir_for(Path(profile.resolved["run_dir"]), run_id, attempt)
        report_dir.mkdir(parents=True, exist_ok=True)
        return JobScript(path=script, text=script.read_text(), argv=["rl", "--dry-run"],
                         env={"AIRVISOR_RUN_ID": run_id}, report_dir=report_dir)


class NoHooks:
    def live_run_ids(self) -> set[str]:
        return set()


class Driver:
    """The manager's part for one supervisor: its event queue, ticks, and a fake clock."""

    def __init__(self, store: Store, profile: Profile, *, slurm: Any,
                 render: Callable[..., JobScript] | None = None, run_id: str | None = None,
                 create: bool = True, real_time: bool = False,
                 wall_offset: float | None = None) -> None:
        """`wall_offset`: the supervisor's wall clock is the fake clock plus this (`real_time`:
        time.time() plus this; None: time.time): a takeover's test gives the new daemon one
        unrelated to the dead one's."""
        self.now = 1000.0
        self.real_time = real_time
        self.store = store
        self.events: queue.Queue[Event] = queue.Queue()
        if run_id is None:
            run_id = f"slurm-{time.monotonic_ns()}"
        if create:
            store.create_run(run_id=run_id, name=profile.run.name, profile_path=None,
                             profile=profile.model_dump(mode="json"),
                             run_dir=str(profile.run.output_dir), gpus=[], supervisor_pid=None)
        self.run_id = run_id
        self.sup = SlurmRunSupervisor(run_id=run_id, profile=profile, store=store,
                                      post=self.events.put, hooks=NoHooks(),
                                      clock=time.monotonic if real_time else lambda: self.now,
                                      wall=self._wall_clock(wall_offset),
                                      slurm=slurm, render=render or FakeRender(),
                                      # a supervisor for an existing run: a daemon's takeover
                                      phase=Phase.PENDING if create else Phase.TAKEOVER)
        if not real_time:
            self.sup.finish_grace = 0.0
            self.sup.poll_interval = 0.0  # every tick (the fake clock moves only when told)
        else:
            self.sup.poll_interval = 0.5

    def _wall_clock(self, offset: float | None) -> Callable[[], float]:
        if offset is None:
            return time.time
        if self.real_time:
            return lambda: time.time() + offset
        return lambda: self.now + offset

    def pump(self, until: Callable[[], bool], *, timeout: float = 20.0,
             advance: float = 0.05) -> None:
        """Deliver events and tick (moving the fake clock by `advance` per tick) until
        `until()` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; state {self.sup.state}, events: "
                                     f"{[e.message for e in self.store.events(self.run_id)]}")
            try:
                event = self.events.get(timeout=0.02)
            except queue.Empty:
                event = None
            while event is not None:
                self.sup.handle(event)
                try:
                    event = self.events.get_nowait()
                except queue.Empty:
                    event = None
            self.now += advance
            self.sup.on_tick()

    def kinds(self) -> list[str]:
        return [e.kind for e in self.store.events(self.run_id)]

    def messages(self, kind: str) -> list[str]:
        return [e.message for e in self.store.events(self.run_id) if e.kind == kind]


def write_log(run_dir: Path, attempt: int, component: str, *lines: str) -> None:
    """What main's `rl` in the job writes: logs/attempt_N/<component>.log, logs/latest -> it."""
    logs = run_dir / "logs"
    directory = logs / f"attempt_{attempt}"
    directory.mkdir(parents=True, exist_ok=True)
    latest = logs / "latest"
    if latest.is_symlink() and latest.readlink().name != directory.name:
        latest.unlink()
    if not latest.is_symlink():
        latest.symlink_to(directory.name)
    with open(directory / f"{component}.log", "a") as handle:
        for line in lines:
            handle.write(line + "\n")


def full_step(run_dir: Path, step: int) -> None:
    """A complete main checkpoint of `step` (both halves, as tests/primerl/test_layout.py)."""
    main_trainer_save(run_dir, step)
    main_orchestrator_save(run_dir, step)


def make_project(project: Path, python: str) -> Path:
    """A prime-rl checkout as the templates use it (`cd $PROJECT_DIR; source .venv/bin/activate;
    uv sync ...; uv run rl|inference|orchestrator|torchrun|env-server ...`), whose `uv` runs
    airvisor's stand-ins: `uv sync` does nothing, `uv run X ARGS` is `python -m airvisor.demo
    --prime-rl main X ARGS`. `vllm-router` (multi-node template, inference node 0) is a stand-in
    inference server on the router's port; `python3` is the venv's interpreter.

    So the single-node template's `uv run rl` runs the demo's stand-in of main's launcher, not
    prime-rl's own: the nodes (tests/slurm/_cluster.py) mount airvisor's checkout, its venv and
    its Python, not the prime-rl main test venv, its Python 3.12 and the sources its `.pth`
    names, which prime-rl's `rl` needs (tests/service/test_systemd_scenarios.py mounts those for
    its container). What these tests check is airvisor's side of a job: prime-rl's own job
    script, sbatch, the node check, and what airvisor reads from the job's logs and nodes."""
    import os

    bin_dir = project / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "activate").write_text(
        f'export VIRTUAL_ENV="{project / ".venv"}"\n'
        f'export PATH="{bin_dir}:$PATH"\n')
    scripts = {
        "uv": f"""#!/bin/bash
# test shim of uv (tests/slurm/_support.py make_project)
case "$1" in
  sync) exit 0 ;;
  run) shift; command="$1"; shift
       exec "{python}" -m airvisor.demo --prime-rl main "$command" "$@" ;;
esac
echo "uv shim: unsupported: $*" >&2
exit 2
""",
        "python3": f'#!/bin/bash\nexec "{python}" "$@"\n',
        "vllm-router": f"""#!/bin/bash
# test shim of vllm-router: a stand-in inference server on --port
port=8000
while [ $# -gt 0 ]; do
  case "$1" in --port) port="$2"; shift 2 ;; *) shift ;; esac
done
exec "{python}" -m airvisor.demo --prime-rl main inference --server.host 0.0.0.0 \\
  --server.port "$port"
""",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        os.chmod(path, 0o755)
    return project


STRICT = os.environ.get("CI", "").lower() == "true"
MAIN_VENV = Path(os.environ.get("AIRVISOR_PRIMERL_MAIN_VENV", "/opt/airvisor-test/primerl-main"))


def primerl_main_python(scratch: Path) -> str:
    """prime-rl main's interpreter with its `rl` entry point and jinja2 (its templates); a
    missing one fails the test in CI and skips it elsewhere."""
    import pytest

    python = MAIN_VENV / "bin" / "python"
    check = "import jinja2; from prime_rl.entrypoints.rl import rl_slurm, write_slurm_script"
    problem = f"no prime-rl main test venv at {MAIN_VENV}" if not python.exists() else ""
    if not problem:
        done = subprocess.run([str(python), "-c", check], capture_output=True, text=True,
                              cwd=scratch, timeout=120)
        if done.returncode != 0:
            problem = f"{check!r} fails in {MAIN_VENV}: " + \
                (done.stderr.strip().splitlines() or ["?"])[-1]
    if problem:
        message = f"{problem}; build it with scripts/setup_primerl_venvs.sh"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    return str(python)
