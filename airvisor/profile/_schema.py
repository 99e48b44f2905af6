"""The run profile: what `configs/<name>.toml` may contain.

Every section forbids unknown keys so a typo is reported (with the closest valid key) instead of
being silently ignored. Relative paths are resolved against the profile file's directory by the
loader, never against the process's working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

PrimeRLVersion = Literal["0.4", "main"]
ComponentName = Literal["inference", "trainer", "orchestrator"]
COMPONENTS: tuple[ComponentName, ...] = ("inference", "trainer", "orchestrator")


class _Section(BaseModel):
    # Every number is finite: `stop_grace = inf` (or nan) would wait forever on a process that
    # ignores SIGTERM, so the loader rejects it with the field's name.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RunSection(_Section):
    name: str
    # Derived, not set in a profile: the run directory as prime-rl resolves it from the user's
    # config (v0.4 `output_dir`; main `output_dir / run.name`). One airvisor run owns it.
    output_dir: Path | None = None
    # What `start` does when output_dir already holds checkpoints of an earlier run:
    # "refuse" (ask for --resume or --fresh), "resume" (continue from the newest complete
    # checkpoint), "archive" (move it aside to <output_dir>.old-<time>), "replace" (delete it;
    # only for throwaway runs such as the demo).
    on_existing: Literal["refuse", "resume", "archive", "replace"] = "refuse"
    # Derived, not set in a profile: prime-rl's resolved max_steps (None: no limit).
    max_steps: int | None = Field(default=None, ge=1)
    demo: bool = False  # the components are airvisor's own stand-ins, not prime-rl


class PrimeRLSection(_Section):
    version: PrimeRLVersion
    # How prime-rl's console scripts are reached, as an argument list prefix, e.g.
    # ["uv", "run", "--project", "/opt/prime-rl"]; "{python}" expands to airvisor's interpreter.
    command_prefix: list[str] = Field(default_factory=list)
    # Alternatively a virtual environment whose bin/ holds the scripts.
    venv: Path | None = None
    # prime-rl's Python, to resolve the config with prime-rl's own code (default: the venv's
    # python, else `<command_prefix> python`). `[]`: do not ask prime-rl (check only airvisor's
    # part). "{python}" expands to airvisor's interpreter (the demo's stand-in resolver).
    python: list[str] | None = None
    # Seconds the resolver (prime-rl's interpreter importing prime-rl, then parsing the config)
    # may take before `check`/`start` refuse; a loaded box or a `uv run` that syncs first needs
    # more.
    resolve_timeout: float = Field(default=120.0, gt=0)
    # The user's own command line after `rl`, unchanged: ["@", "rl.toml"] or
    # ["--trainer", "@", "train.toml", "--orchestrator", "@", "orch.toml", ...]. Paths after
    # "@" are relative to the profile file.
    args: list[str] = Field(min_length=1)
    # prime-rl keys on top of the user's files (written to a TOML file passed as the last "@").
    overrides: dict[str, Any] = Field(default_factory=dict)
    # "launcher": start prime-rl's own `rl` and supervise its tree (the default);
    # "components": start inference, trainer and orchestrator separately with exactly the argv
    # and environment prime-rl's launcher uses (readiness gating per component).
    mode: Literal["launcher", "components"] = "launcher"
    workdir: Path | None = None  # cwd of `rl` (default: the profile's directory)
    env: dict[str, str] = Field(default_factory=dict)  # extra environment for prime-rl


class InferenceSection(_Section):
    # Derived, not set in a profile: where prime-rl's inference server listens
    # (`inference.server` of the resolved config; None: `rl` starts no server).
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)


class TrainerSection(_Section):
    # Free GPU memory each trainer GPU needs before launch (preflight).
    min_free_gib: float = Field(default=10.0, ge=0)
    # The trainer's torchrun rendezvous port, for the port check. prime-rl's launchers pick a
    # free port per launch (v0.4 rl.py `get_free_port()`), so none is fixed by default.
    rdzv_port: int | None = Field(default=None, ge=1, le=65535)


class GPUSection(_Section):
    # The GPUs to check before launch. Inference and trainer GPUs come from prime-rl's resolved
    # config (v0.4 inference_gpu_ids / trainer_gpu_ids; main [deployment]); set here, they
    # must agree with it.
    inference: list[int] = Field(default_factory=list)
    trainer: list[int] = Field(default_factory=list)
    containers: list[int] = Field(default_factory=list)
    # Derived, not set in a profile: the fraction of each GPU the inference server may take
    # (vLLM's gpu_memory_utilization in the resolved inference config).
    inference_memory_share: float | None = Field(default=None, gt=0, le=1)


class HealthSection(_Section):
    ready_timeout: float = Field(default=900.0, gt=0)  # inference /health + /v1/models
    probe_interval: float = Field(default=10.0, gt=0)
    probe_failures: int = Field(default=3, ge=1)  # consecutive failed probes = unhealthy
    stall_timeout: float = Field(default=1800.0, gt=0)  # no step advance for this long = hung
    first_step_grace: float = Field(default=3600.0, gt=0)  # before the first step
    # Errored rollouts in a row (episodes the environment could not serve, from its episode
    # log: airvisor.policy._rollouts) after which the run stops as failed, marked as needing a
    # person (the `needs_person` notification); each run of them is a warning before that.
    # 0: warnings only. A few in a row are normal (a task container being replaced).
    rollout_error_limit: int = Field(default=20, ge=0)


class CheckpointSection(_Section):
    # Cadence and retention are prime-rl's (`[ckpt] interval`, `keep_last` in its config);
    # this is airvisor's estimate per checkpoint, for the disk check.
    size_gib: float = Field(default=5.0, ge=0)


class RestartSection(_Section):
    max_restarts: int = Field(default=5, ge=0)  # within `window` seconds, then the run fails
    window: float = Field(default=3600.0, gt=0)
    backoff_initial: float = Field(default=5.0, ge=0)
    backoff_factor: float = Field(default=2.0, ge=1)
    backoff_max: float = Field(default=300.0, ge=0)
    # The first restart within `window` is at once (no backoff_initial wait: a one-off crash
    # of a week-long run costs nothing more than its recovery); the backoff starts with the
    # second. Off: every restart waits, backoff_initial first.
    immediate_first: bool = True
    stop_grace: float = Field(default=30.0, ge=0)  # SIGTERM -> SIGKILL
    resume_on_boot: bool = True
    # What a recovery restarts (issue 22): "auto" keeps a healthy inference server when only
    # the trainer, orchestrator or an env server failed, where the prime-rl version and settings
    # allow it (airvisor.policy._scope); "all" restarts everything every time.
    scope: Literal["auto", "all"] = "auto"

    @field_validator("scope", mode="before")
    @classmethod
    def _known_scope(cls, value: Any) -> Any:
        if value not in ("auto", "all"):
            raise ValueError(
                'restart.scope is "auto" (keep a healthy inference server when only the '
                'trainer, orchestrator or an env server failed) or "all" (every recovery '
                "restarts everything)")
        return value


class ReaperSection(_Section):
    enabled: bool = True
    allow_other_users: bool = False
    # Ports a new run needs free; listeners of reaped kinds on them are stopped.
    ports: list[int] = Field(default_factory=lambda: [8000, 8100, 5555, 5556, 29501])
    gpu_free_timeout: float = Field(default=60.0, ge=0)


class Mount(_Section):
    source: Path
    target: str
    read_only: bool = True


class ContainerSection(_Section):
    enabled: bool = False
    image: str = "aigym/mlgym-agent:latest"
    count: int = Field(default=1, ge=1)
    gpus: list[int] = Field(default_factory=list)  # default: gpus.containers
    cpus: float | None = Field(default=None, gt=0)
    memory: str | None = None  # docker syntax, e.g. "16g"
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    network: str = "host"
    user: str = "agent"
    workdir: str = "/home/agent"
    command: list[str] = Field(default_factory=lambda: ["/bin/bash", "-l"])
    exec_timeout: float = Field(default=10.0, gt=0)
    health_interval: float = Field(default=15.0, gt=0)
    max_recreates: int = Field(default=5, ge=0)
    # The health round-trip: run in each container as `user` through `docker exec`; exit code 0
    # within exec_timeout is healthy. E.g. ["/bin/bash", "-lc", "true"] to include the login
    # shell's startup (MLGym's shell is `bash -l`).
    health_command: list[str] = Field(
        default_factory=lambda: ["/bin/sh", "-c", "echo ok"], min_length=1
    )
    stop_grace: float = Field(default=2.0, ge=0)  # SIGTERM -> SIGKILL when stopping a container
    # The environment variable through which prime-rl's processes (and so the environment
    # that the orchestrator or its env-server loads) learn the task containers' names
    # (comma-separated): the user's prime-rl config stays unchanged.
    env_var: str = "AIRVISOR_CONTAINER_NAMES"


NotifyEvent = Literal["failed", "recovered", "stalled", "gpu_wait", "succeeded", "needs_person"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = ("failed", "recovered", "stalled", "gpu_wait",
                                          "succeeded", "needs_person")


class WebhookTarget(_Section):
    # May hold a secret (a Slack webhook's path is one): shown redacted everywhere. Checked in
    # the model validator, so a validation error never repeats the URL itself.
    url: str
    format: Literal["json", "slack"] = "json"  # slack: {"text": ...} for incoming webhooks
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    name: str | None = None  # shown on the run page and in logs instead of the redacted URL

    @model_validator(mode="after")
    def _http_url(self) -> WebhookTarget:
        if not self.url.startswith(("http://", "https://")) or any(c.isspace() for c in self.url):
            raise ValueError("url must be an http:// or https:// URL without spaces")
        return self


class NotifySection(_Section):
    """Webhooks for runs that need a person (airvisor.notify); also the daemon-wide default,
    read from the `[notify]` table of `<state dir>/notify.toml`."""

    webhooks: list[WebhookTarget] = Field(default_factory=list)
    use_daemon_default: bool = True  # also send to the daemon-wide webhooks
    timeout: float = Field(default=5.0, gt=0)  # per HTTP request
    retries: int = Field(default=5, ge=0)  # after the first try
    backoff_initial: float = Field(default=2.0, ge=0)
    backoff_max: float = Field(default=300.0, ge=0)


class StateSection(_Section):
    """Retention of the state directory (airvisor.store._retention), daemon-wide: the `[state]`
    table of `<state dir>/settings.toml` (not a profile key: every run of the box shares the
    state directory). A finished run goes (its rows, its run directory under the state dir,
    the earlier attempts' and moved-aside logs kept there) once it is older than `keep_days`
    or beyond the newest `keep_runs` finished runs; live runs and the runs' own output
    directories are never touched. 0 turns a limit off.

    The defaults keep a year of a busy box: a short run costs about 75 KB (rows ~20 KB, run
    directory ~45 KB), so 1000 runs are ~75 MB; each log airvisor writes is capped at
    `log_max_mib` plus `log_backups` rotated copies."""

    keep_runs: int = Field(default=1000, ge=0)  # finished runs kept, newest first; 0: no limit
    keep_days: float = Field(default=365.0, ge=0)  # finished runs kept this long; 0: no limit
    log_max_mib: float = Field(default=16.0, ge=0)  # a component log's cap; 0: no cap
    log_backups: int = Field(default=1, ge=0, le=9)  # rotated copies kept (<log>.1 ...)


class Profile(_Section):
    run: RunSection
    prime_rl: PrimeRLSection
    gpus: GPUSection = GPUSection()
    inference: InferenceSection = InferenceSection()
    trainer: TrainerSection = TrainerSection()
    health: HealthSection = HealthSection()
    checkpoint: CheckpointSection = CheckpointSection()
    restart: RestartSection = RestartSection()
    reaper: ReaperSection = ReaperSection()
    containers: ContainerSection = ContainerSection()
    notify: NotifySection = NotifySection()
    # airvisor's stand-ins only: pacing and injected faults per component, passed to the
    # stand-in launcher as AIRVISOR_DEMO (JSON). See configs/demo.toml.
    demo: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Set by airvisor, not a TOML key: the run facts prime-rl resolved (airvisor.primerl.bind),
    # kept with the run so a later daemon finds the run's files without resolving again.
    resolved: dict[str, Any] | None = None
    # Set by the loader: where the profile came from (not a TOML key).
    source: Path | None = Field(default=None, exclude=True)
    # Set by the loader: the positions of the profile's keys (an `airvisor.profile._locate.
    # KeyLocator`), so later checks can name the line of the field they complain about.
    _locator: Any = PrivateAttr(default=None)
