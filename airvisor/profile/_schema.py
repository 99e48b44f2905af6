"""The run profile: what `configs/<name>.toml` may contain.

Every section forbids unknown keys so a typo is reported (with the closest valid key) instead of
being silently ignored. Relative paths are resolved against the profile file's directory by the
loader, never against the process's working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

PrimeRLVersion = Literal["0.4", "main"]
ComponentName = Literal["inference", "trainer", "orchestrator"]
COMPONENTS: tuple[ComponentName, ...] = ("inference", "trainer", "orchestrator")


class _Section(BaseModel):
    # Every number is finite: `stop_grace = inf` (or nan) would wait forever on a process that
    # ignores SIGTERM, so the loader rejects it with the field's name.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RunSection(_Section):
    name: str
    # The prime-rl output directory; one airvisor run owns it for all its attempts.
    output_dir: Path
    # What `start` does when output_dir already holds checkpoints of an earlier run:
    # "refuse" (ask for --resume or --fresh), "resume" (continue from the newest complete
    # checkpoint), "archive" (move it aside to <output_dir>.old-<time>), "replace" (delete it;
    # only for throwaway runs such as the demo).
    on_existing: Literal["refuse", "resume", "archive", "replace"] = "refuse"
    max_steps: int | None = Field(default=None, ge=1)
    demo: bool = False  # the components are airvisor's own stand-ins, not prime-rl


class PrimeRLSection(_Section):
    version: PrimeRLVersion
    # How prime-rl's console scripts are reached, as an argument list prefix, e.g.
    # ["uv", "run", "--project", "/opt/prime-rl"]; "{python}" expands to airvisor's interpreter.
    command_prefix: list[str] = Field(default_factory=list)
    # Alternatively a virtual environment whose bin/ holds the scripts.
    venv: Path | None = None
    workdir: Path | None = None  # cwd of the components (default: output_dir's parent)
    env: dict[str, str] = Field(default_factory=dict)  # extra environment for all components


class ComponentSection(_Section):
    # prime-rl TOML files for this component (deep-merged in order), then the inline table.
    config_files: list[Path] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)  # appended verbatim to the argv
    env: dict[str, str] = Field(default_factory=dict)


class InferenceSection(ComponentSection):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)


class TrainerSection(ComponentSection):
    rdzv_port: int = Field(default=29501, ge=1, le=65535)
    # Free GPU memory each trainer GPU needs before launch (preflight).
    min_free_gib: float = Field(default=10.0, ge=0)


class OrchestratorSection(ComponentSection):
    pass


class GPUSection(_Section):
    inference: list[int] = Field(default_factory=list)
    trainer: list[int] = Field(default_factory=list)
    containers: list[int] = Field(default_factory=list)
    # Overlapping inference/trainer GPUs are allowed only with an explicit memory share:
    # the fraction of each shared GPU the inference server may take (vLLM's
    # gpu_memory_utilization); the rest is the trainer's.
    inference_memory_share: float | None = Field(default=None, gt=0, lt=1)


class HealthSection(_Section):
    ready_timeout: float = Field(default=900.0, gt=0)  # inference /health + /v1/models
    probe_interval: float = Field(default=10.0, gt=0)
    probe_failures: int = Field(default=3, ge=1)  # consecutive failed probes = unhealthy
    stall_timeout: float = Field(default=1800.0, gt=0)  # no step advance for this long = hung
    first_step_grace: float = Field(default=3600.0, gt=0)  # before the first step


class CheckpointSection(_Section):
    interval: int = Field(default=10, ge=1)
    keep: int | None = Field(default=3, ge=1)
    size_gib: float = Field(default=5.0, ge=0)  # estimate per checkpoint, for the disk check


class RestartSection(_Section):
    max_restarts: int = Field(default=5, ge=0)  # within `window` seconds, then the run fails
    window: float = Field(default=3600.0, gt=0)
    backoff_initial: float = Field(default=5.0, ge=0)
    backoff_factor: float = Field(default=2.0, ge=1)
    backoff_max: float = Field(default=300.0, ge=0)
    stop_grace: float = Field(default=30.0, ge=0)  # SIGTERM -> SIGKILL
    resume_on_boot: bool = True


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
    # The orchestrator env arg that receives the container names (list of str).
    env_arg: str = "container_names"


NotifyEvent = Literal["failed", "recovered", "stalled", "gpu_wait", "succeeded"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = ("failed", "recovered", "stalled", "gpu_wait",
                                          "succeeded")


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


class Profile(_Section):
    run: RunSection
    prime_rl: PrimeRLSection
    gpus: GPUSection = GPUSection()
    inference: InferenceSection = InferenceSection()
    trainer: TrainerSection = TrainerSection()
    orchestrator: OrchestratorSection = OrchestratorSection()
    health: HealthSection = HealthSection()
    checkpoint: CheckpointSection = CheckpointSection()
    restart: RestartSection = RestartSection()
    reaper: ReaperSection = ReaperSection()
    containers: ContainerSection = ContainerSection()
    notify: NotifySection = NotifySection()
    # Set by the loader: where the profile came from (not a TOML key).
    source: Path | None = Field(default=None, exclude=True)
    # Set by the loader: the positions of the profile's keys (an `airvisor.profile._locate.
    # KeyLocator`), so later checks can name the line of the field they complain about.
    _locator: Any = PrivateAttr(default=None)
