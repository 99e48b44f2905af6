"""What both verifiers adapters share: argument checking, prompts, containers and episodes.

`EnvArgs.from_kwargs(**args)` takes the environment args of a profile (`[[orchestrator...env]]
args = {...}`) and rejects unknown or ill-typed ones with a message naming the argument and the
fix. `MLGymRunner` owns the docker client, the container leases and one `TaskSession` per
container (a session's shell survives across episodes; reset makes that safe).
"""

from __future__ import annotations

import difflib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from air_mlgym._actions import USAGE
from air_mlgym._containers import DEFAULT_LOCK_DIR, Lease, LeaseBook, OwnedContainers
from air_mlgym._episode import Episode, EpisodeConfig
from air_mlgym._freezer import FREEZE_MODES, KernelFreezer
from air_mlgym._reward import REWARD_MODES, MetricSpec, protection_table, resolve_metric
from air_mlgym._session import (
    SessionConfig,
    TaskSession,
    disk_bytes,
    memory_bytes,
    workspace_listing,
)
from air_mlgym._tasks import TaskSpec, load_task


class EnvArgsError(ValueError):
    """Bad environment args; the message names the argument and the fix."""


# The containers airvisor started for the run (comma-separated), when the env args name none.
AIRVISOR_CONTAINERS_ENV = "AIRVISOR_CONTAINER_NAMES"


def _default_trajectory_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.environ.get("AIR_MLGYM_TRAJECTORY_DIR") or os.path.join(
        state, "air-mlgym", "trajectories"
    )


@dataclass(frozen=True)
class EnvArgs:
    mlgym_path: str
    task: str | list[str]
    container_names: list[str] = field(default_factory=list)
    image: str | None = None  # standalone: start `containers` containers from this image
    containers: int = 1
    network: str = "host"  # network of containers started here (MLGym uses the host's)
    metric: str | None = None
    higher_is_better: bool | None = None
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # per task id
    max_turns: int = 30
    num_examples: int = 64  # dataset rows per task (identical prompts)
    trajectory_dir: str | None = field(default_factory=_default_trajectory_dir)
    system_prompt: str | None = None
    user: str = "agent"
    home: str = "/home/agent"
    shell_command: list[str] = field(default_factory=lambda: ["/bin/bash", "-l"])
    short_timeout: float | None = None  # default: MLGYM_AGENT_SHORT_TIMEOUT or 25
    long_timeout: float | None = None  # default: MLGYM_AGENT_LONG_TIMEOUT or 3600
    no_output_timeout: float | None = None
    container_wait: float = 60.0
    lease_timeout: float = 3600.0
    lock_dir: str | None = None
    window: int = 100
    max_observation_chars: int = 12_000
    clip_negative_rewards: bool = False
    reward_scale: float = 1.0
    reward_mode: str = "final"  # or "per_validate" (README "Reward")
    failure_reward: float = -1.0
    evaluate_on_exit: bool = True
    footer: bool = True  # MLGym's step / open file / cwd footer on observations
    format_error_limit: int = 3
    # The evaluator's interpreter: "auto" (a root-owned copy of the agent's environment, else a
    # root-owned /usr/bin/python3) or an absolute path (README "The task image").
    admin_python: str = "auto"
    python_env: str | None = None  # the agent's environment copied for "auto"
    setup_commands: list[str] = field(default_factory=list)
    conda_env: str | None = "mlgym_generic"
    mlgym_mount: str | None = None  # the checkout's mount point inside the containers
    # Limits of each task container (README "Limits"), applied by the engine before the
    # container's first episode; a stricter limit the container already has is kept. None: none.
    pids_limit: int | None = 1024
    memory: str | None = "4g"
    cpus: float | None = 1.0
    # What one episode may write to disk (the workspace and every other place the agent can
    # write), checked by the root side at every evaluation and by a watcher during the episode.
    disk: str | None = "8g"
    # How the agent's processes are held during an evaluation (README "Freeze"): "auto" (the
    # kernel's cgroup v2 freezer where the host has it, else signals), "kernel" (refuse to run
    # without it) or "signals".
    freeze: str = "auto"

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EnvArgs:
        known = {f.name: f for f in fields(cls)}
        for key in kwargs:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise EnvArgsError(
                    f"air-mlgym: unknown environment arg {key!r}{hint} "
                    f"(known: {', '.join(sorted(known))})"
                )
        for required in ("mlgym_path", "task"):
            if required not in kwargs or kwargs[required] in (None, "", []):
                raise EnvArgsError(
                    f"air-mlgym: environment arg {required!r} is required; fix: add it to the "
                    "env args (mlgym_path = absolute path of the MLGym checkout, task = config "
                    'name such as "battleOfSexes")'
                )
        if not kwargs.get("container_names") and os.environ.get(AIRVISOR_CONTAINERS_ENV):
            # airvisor started the task containers for this run and names them here (it never
            # edits the user's prime-rl config; `rl` passes its environment to every child).
            kwargs["container_names"] = [
                name for name in os.environ[AIRVISOR_CONTAINERS_ENV].split(",") if name]
        args = cls(**kwargs)
        args._check()
        return args

    def _check(self) -> None:
        def fail(name: str, message: str) -> None:
            raise EnvArgsError(f"air-mlgym: environment arg {name!r} {message}")

        if not isinstance(self.mlgym_path, str):
            fail("mlgym_path", "must be a string path")
        tasks = self.tasks
        if not tasks or not all(isinstance(t, str) and t for t in tasks):
            fail("task", "must be a task name or a list of task names")
        if not isinstance(self.container_names, list) or not all(
            isinstance(n, str) and n for n in self.container_names
        ):
            fail("container_names", "must be a list of container names")
        if not self.container_names and not self.image:
            fail(
                "container_names",
                "is empty and no image is given; fix: let airvisor inject container_names "
                '([containers] enabled in the profile) or pass image = "<docker image>" to '
                "start containers here",
            )
        for name in (
            "max_turns", "num_examples", "containers", "window", "max_observation_chars",
            "format_error_limit",
        ):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(name, f"must be a positive integer, got {value!r}")
        if self.reward_mode not in REWARD_MODES:
            fail("reward_mode", f"must be one of {list(REWARD_MODES)}, got {self.reward_mode!r}")
        if (
            isinstance(self.failure_reward, bool)
            or not isinstance(self.failure_reward, int | float)
            or self.failure_reward > 0
        ):
            fail("failure_reward", f"must be a number <= 0, got {self.failure_reward!r}")
        if self.admin_python != "auto" and not str(self.admin_python).startswith("/"):
            fail("admin_python", f'must be "auto" or an absolute path, got {self.admin_python!r}')
        if self.python_env is not None and not str(self.python_env).startswith("/"):
            fail("python_env", f"must be an absolute path, got {self.python_env!r}")
        if self.pids_limit is not None and (
            isinstance(self.pids_limit, bool) or not isinstance(self.pids_limit, int)
            or self.pids_limit < 32
        ):
            fail("pids_limit", f"must be an integer >= 32 or null, got {self.pids_limit!r}")
        if self.cpus is not None and (
            isinstance(self.cpus, bool) or not isinstance(self.cpus, int | float) or self.cpus <= 0
        ):
            fail("cpus", f"must be a positive number of CPUs or null, got {self.cpus!r}")
        if self.memory is not None:
            try:
                memory_bytes(self.memory)
            except ValueError as e:
                fail("memory", f"{e}")
        if self.disk is not None:
            try:
                disk_bytes(self.disk)
            except ValueError as e:
                fail("disk", f"{e}")
        if self.freeze not in FREEZE_MODES:
            fail("freeze", f"must be one of {', '.join(map(repr, FREEZE_MODES))}, got "
                 f"{self.freeze!r}")  # fmt: skip
        for name in ("container_wait", "lease_timeout", "reward_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                fail(name, f"must be a non-negative number, got {value!r}")

    @property
    def tasks(self) -> list[str]:
        return [self.task] if isinstance(self.task, str) else list(self.task)

    def session_config(self) -> SessionConfig:
        overrides: dict[str, Any] = {}
        if self.short_timeout is not None:
            overrides["short_timeout"] = float(self.short_timeout)
        if self.long_timeout is not None:
            overrides["long_timeout"] = float(self.long_timeout)
            overrides["long_timeout_explicit"] = True
        return SessionConfig(
            user=self.user,
            home=self.home.rstrip("/") or "/",
            shell_command=tuple(self.shell_command),
            no_output_timeout=self.no_output_timeout,
            container_wait=float(self.container_wait),
            setup_commands=tuple(self.setup_commands),
            conda_env=self.conda_env,
            mlgym_mount=self.mlgym_mount,
            admin_python=self.admin_python,
            python_env=self.python_env,
            pids_limit=self.pids_limit,
            memory_limit=None if self.memory is None else memory_bytes(self.memory),
            cpus=None if self.cpus is None else float(self.cpus),
            disk_limit=None if self.disk is None else disk_bytes(self.disk),
            freeze=self.freeze,
            **overrides,
        )

    def episode_config(self) -> EpisodeConfig:
        return EpisodeConfig(
            window=self.window,
            max_observation_chars=self.max_observation_chars,
            clip_negative=self.clip_negative_rewards,
            reward_scale=float(self.reward_scale),
            reward_mode="per_validate" if self.reward_mode == "per_validate" else "final",
            failure_reward=float(self.failure_reward),
            max_steps=self.max_turns,
            format_error_limit=self.format_error_limit,
            footer=self.footer,
            evaluate_on_exit=self.evaluate_on_exit,
            trajectory_dir=Path(self.trajectory_dir).expanduser() if self.trajectory_dir else None,
        )

    def metric_for(self, task_id: str) -> MetricSpec:
        row = self.metrics.get(task_id, {})
        return resolve_metric(
            task_id,
            metric=row.get("metric", self.metric),
            higher_is_better=row.get("higher_is_better", self.higher_is_better),
            scale=row.get("scale"),
        )


SYSTEM_PROMPT = """You are an autonomous machine-learning researcher working in a Linux shell \
inside a task container. Each reply must contain exactly ONE command, in a ```bash fenced block; \
you will see its output, then send the next command. Think briefly first if you like; only the \
fenced block is executed.

Commands (besides any shell command that does not need interaction):
{usage}

`validate` evaluates your current solution and shows the score; `submit` evaluates it a final \
time and ends the task. Improving the score over the baseline is the goal."""


def build_system_prompt(override: str | None = None) -> str:
    if override:
        return override
    usage = "\n".join(
        "\n".join(f"  {line}" for line in text.splitlines()) for text in USAGE.values()
    )
    return SYSTEM_PROMPT.format(usage=usage)


def build_user_prompt(task: TaskSpec, metric: MetricSpec, baseline: float | None) -> str:
    listing = "\n".join(f"  {name}" for name in workspace_listing(task))
    direction = "higher" if metric.higher_is_better else "lower"
    base = "none given" if baseline is None else f"{baseline}"
    return (
        f"TASK: {task.name}\n\n{task.prompt_description.strip()}\n\n"
        f"Your workspace (current directory /home/agent/workspace) contains:\n{listing}\n\n"
        f"The score is the `{metric.name}` metric ({direction} is better); baseline: {base}.\n"
        "Send your first command."
    )


class MLGymRunner:
    """Containers, leases and sessions for one loaded environment."""

    def __init__(self, args: EnvArgs) -> None:
        self.args = args
        self.tasks: dict[str, TaskSpec] = {}
        for name in args.tasks:
            spec = load_task(args.mlgym_path, name)
            if spec.id in self.tasks:
                raise EnvArgsError(
                    f"air-mlgym: environment arg 'task' names task id {spec.id!r} twice "
                    f"({self.tasks[spec.id].config_path.name} and {spec.config_path.name}); "
                    "fix: list each task once (num_examples sets how often it is played)"
                )
            self.tasks[spec.id] = spec
        self.protection = protection_table()
        for task_id, spec in self.tasks.items():
            wanted = self.protection.get(task_id)
            starter = {p.name for p in spec.starter_code}
            missing = [] if wanted is None else sorted(set(wanted.evaluation_files) - starter)
            if missing:
                raise EnvArgsError(
                    f"air-mlgym: metrics.toml row [{task_id}] names evaluation_files {missing} "
                    f"that are not in {spec.config_path}'s starter_code ({sorted(starter)}); "
                    "fix the row or the task config"
                )
        self.metrics = {task_id: args.metric_for(task_id) for task_id in self.tasks}
        self.session_config = args.session_config()
        self.episode_config = args.episode_config()
        self._client: Any = None
        self._owned: OwnedContainers | None = None
        self._leases: LeaseBook | None = None
        self._sessions: dict[str, TaskSession] = {}
        self._freezer: KernelFreezer | None = None  # one for all the sessions (README "Freeze")
        self._lock = threading.Lock()

    # Docker is reached lazily: loading the environment (e.g. to list its dataset) needs none.
    def _ensure_started(self) -> LeaseBook:
        with self._lock:
            if self._leases is not None:
                return self._leases
            import docker

            self._client = docker.from_env()
            names = list(self.args.container_names)
            if not names:
                assert self.args.image is not None
                self._owned = OwnedContainers(
                    self._client,
                    self.args.image,
                    count=self.args.containers,
                    workdir=self.args.home,
                    network_mode=self.args.network,
                )
                names = self._owned.start()
            lock_dir = Path(self.args.lock_dir) if self.args.lock_dir else DEFAULT_LOCK_DIR
            self._leases = LeaseBook(names, lock_dir)
            return self._leases

    def try_acquire(self) -> Lease | None:
        return self._ensure_started().try_acquire()

    def acquire_blocking(self, timeout: float | None = None, poll: float = 0.5) -> Lease | None:
        deadline = time.monotonic() + (self.args.lease_timeout if timeout is None else timeout)
        while True:
            lease = self.try_acquire()
            if lease is not None or time.monotonic() >= deadline:
                return lease
            time.sleep(poll)

    def session(self, name: str) -> TaskSession:
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                owned = self._owned
                if self._freezer is None:
                    self._freezer = KernelFreezer(self._client, home=self.session_config.home)
                session = TaskSession(
                    self._client,
                    name,
                    config=self.session_config,
                    revive=owned.revive if owned is not None else None,
                    recreate=owned.recreate if owned is not None else None,
                    protection=self.protection,
                    freezer=self._freezer,
                )
                self._sessions[name] = session
            return session

    def new_episode(
        self, task_id: str, lease: Lease, meta: Mapping[str, Any] | None = None
    ) -> Episode:
        return Episode(
            self.tasks[task_id],
            self.session(lease.name),
            self.metrics[task_id],
            self.episode_config,
            meta=dict(meta or {}),
        )

    @property
    def max_model_turns(self) -> int:
        """Model turns an episode can take: every step, each after up to
        `format_error_limit - 1` replies without a usable command."""
        return self.args.max_turns * self.args.format_error_limit

    def prompts(self, task_id: str) -> tuple[str, str]:
        task = self.tasks[task_id]
        metric = self.metrics[task_id]
        from air_mlgym._reward import baseline_score

        return (
            build_system_prompt(self.args.system_prompt),
            build_user_prompt(task, metric, baseline_score(task.baseline_scores, metric)),
        )

    def close(self) -> None:
        with self._lock:
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()
            if self._freezer is not None:
                self._freezer.close()
                self._freezer = None
            if self._owned is not None:
                self._owned.close()
                self._owned = None
            self._leases = None


def message_text(message: Any) -> str:
    """The text of a chat message: a dict or a pydantic message, str or content-part list."""
    content = (
        message.get("content")
        if isinstance(message, Mapping)
        else getattr(message, "content", None)
    )
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, Sequence):
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else getattr(part, "text", None)
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def message_role(message: Any) -> str | None:
    role = message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)
    return role if isinstance(role, str) else None


def last_assistant_text(messages: Sequence[Any]) -> str:
    for message in reversed(list(messages)):
        if message_role(message) == "assistant":
            return message_text(message)
    return ""
