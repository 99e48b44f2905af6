"""How each supported prime-rl version is started: argv, environment and config files.

airvisor starts prime-rl's three components itself (not through prime-rl's `rl` launcher, which
leaves orphans and cannot resume from an explicit, verified step). Each adapter reproduces what
that version's `rl` launcher does for one machine, per component.

Verified against prime-rl's own sources and docs (read through the code search, 2026-11):
- v0.4 era `src/prime_rl/rl.py` (the launcher with `inference_gpu_ids`/`trainer_gpu_ids`): starts
  `inference @ file`, `orchestrator @ file`, and the trainer as
  `torchrun --rdzv-endpoint=localhost:P --rdzv-id=ID --local-ranks-filter=0 --nproc-per-node=N
  -m prime_rl.trainer.rl.train @ file`, with CUDA_VISIBLE_DEVICES per component and
  LOGURU_FORCE_COLORS=1 / PYTHONUNBUFFERED=1. Its shared `ckpt.resume_step` is copied into
  `trainer.ckpt.resume_step` and `orchestrator.ckpt.resume_step`, so started separately each
  component takes `--ckpt.resume-step N`; checkpoint retention is `[ckpt] keep`; it sets
  `orchestrator.num_train_workers = len(trainer_gpu_ids)` when there is more than one trainer GPU;
  output_dir is shared by trainer and orchestrator.
- main (after v0.8): resume is `--resume` (latest) or `--resume.step N` (docs/training.md and the
  launcher's "pass --resume (or --resume.step N)" error); retention is `[ckpt] keep_last`
  (`CheckpointConfig.keep_last`); `[client] base_url` is a list of URLs (`ClientConfig.base_url:
  list[str]`). The trainer entry point is still `-m prime_rl.trainer.rl.train` under torchrun.
airvisor never passes -1 ("latest"): prime-rl's latest is the highest `step_*` name, which may
hold only one half of a checkpoint; the engine chooses a complete step and passes it explicitly.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from airvisor.profile import Profile, component_config
from airvisor.profile._configs import deep_merge
from airvisor.profile._schema import COMPONENTS, ComponentName

TRAINER_MODULE = "prime_rl.trainer.rl.train"


@dataclass(frozen=True)
class LaunchSpec:
    """One component's process: the engine writes `files`, then runs `argv` in `cwd` with `env`
    added to its own environment."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: dict[Path, str] = field(default_factory=dict)


class AdapterError(ValueError):
    """The profile cannot be expressed for this prime-rl version (preflight catches these)."""


def _client_host(host: str) -> str:
    # A server bound to every interface is reached on loopback.
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class Adapter(ABC):
    """One prime-rl version's dialect."""

    version: str

    # --- what differs between versions ---------------------------------------------------------

    @abstractmethod
    def resume_flags(self, component: ComponentName, step: int) -> list[str]:
        """Flags that make `component` resume from checkpoint `step` (never -1)."""

    @abstractmethod
    def checkpoint_table(self, interval: int, keep: int | None) -> dict[str, Any]:
        """The `[ckpt]` table for trainer and orchestrator."""

    @abstractmethod
    def client_base_url(self, url: str) -> Any:
        """The orchestrator's `[client] base_url` value."""

    def orchestrator_extras(self, profile: Profile) -> dict[str, Any]:
        return {}

    # --- shared --------------------------------------------------------------------------------

    def script(self, profile: Profile, name: str) -> list[str]:
        """The argv that runs prime-rl console script `name` (prefix, venv's bin/, or PATH)."""
        venv = profile.prime_rl.venv
        executable = str(venv / "bin" / name) if venv is not None else name
        return [*profile.prime_rl.command_prefix, executable]

    def config_path(self, attempt_dir: Path, component: ComponentName) -> Path:
        return attempt_dir / f"{component}.toml"

    def environment(
        self, profile: Profile, component: ComponentName, environ: Mapping[str, str]
    ) -> dict[str, str]:
        gpus = {"inference": profile.gpus.inference, "trainer": profile.gpus.trainer}.get(
            component, [])
        env = {
            # NVML (the preflight, `airvisor gpus`) numbers GPUs in PCI bus order; CUDA's
            # default order is "fastest first". Same order, so a profile index is one GPU.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            # prime-rl's launcher forces loguru's colours on; the supervisor strips them.
            "LOGURU_FORCE_COLORS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(profile.prime_rl.env)
        env.update(getattr(profile, component).env)
        has_key = "WANDB_API_KEY" in env or "WANDB_API_KEY" in environ
        if not has_key and "WANDB_MODE" not in env:
            env["WANDB_MODE"] = "offline"
        return env

    def effective_config(
        self,
        profile: Profile,
        component: ComponentName,
        *,
        run_dir: Path,
        container_names: list[str],
    ) -> dict[str, Any]:
        """The merged config plus what airvisor owns: output dir, steps, checkpoints, wiring."""
        config = component_config(profile, component)
        inference = profile.inference
        if component == "inference":
            injected: dict[str, Any] = {"server": {"host": inference.host, "port": inference.port}}
            if profile.gpus.inference_memory_share is not None:
                injected["gpu_memory_utilization"] = profile.gpus.inference_memory_share
            if profile.run.demo:
                # Only the demo stand-in reads output_dir here; prime-rl's inference has none.
                injected["output_dir"] = str(run_dir)
            return deep_merge(config, injected)
        injected = {
            "output_dir": str(run_dir),
            "ckpt": self.checkpoint_table(profile.checkpoint.interval, profile.checkpoint.keep),
        }
        if profile.run.max_steps is not None:
            injected["max_steps"] = profile.run.max_steps
        if component == "orchestrator":
            url = f"http://{_client_host(inference.host)}:{inference.port}/v1"
            injected["client"] = {"base_url": self.client_base_url(url)}
            injected.update(self.orchestrator_extras(profile))
        config = deep_merge(config, injected)
        if component == "orchestrator" and profile.containers.enabled:
            envs = config.get("env")
            if not (isinstance(envs, list) and envs and isinstance(envs[0], dict)):
                raise AdapterError(
                    "[containers] is enabled but the orchestrator config has no [[env]] table "
                    "to pass the container names to")
            args = dict(envs[0].get("args") or {})
            args[profile.containers.env_arg] = list(container_names)
            config["env"] = [{**envs[0], "args": args}, *envs[1:]]
        return config

    def argv(
        self,
        profile: Profile,
        component: ComponentName,
        *,
        run_id: str,
        config_file: Path,
        resume_step: int | None,
    ) -> list[str]:
        if component == "trainer":
            nproc = max(len(profile.gpus.trainer), 1)
            argv = [
                *self.script(profile, "torchrun"),
                f"--nproc-per-node={nproc}",
                f"--rdzv-endpoint=localhost:{profile.trainer.rdzv_port}",
                f"--rdzv-id={run_id}",
                "--local-ranks-filter=0",
                "-m", TRAINER_MODULE,
            ]
        else:
            argv = self.script(profile, component)
        argv += ["@", str(config_file)]
        if resume_step is not None and component != "inference":
            argv += self.resume_flags(component, resume_step)
        return argv + list(getattr(profile, component).extra_args)

    def launch_specs(
        self,
        profile: Profile,
        *,
        run_id: str,
        run_dir: Path,
        attempt_dir: Path,
        resume_step: int | None,
        container_names: list[str],
        environ: Mapping[str, str] | None = None,
    ) -> dict[str, LaunchSpec]:
        """Specs for inference, trainer and orchestrator (in start order)."""
        if resume_step is not None and resume_step < 1:
            raise AdapterError(f"resume step must be a checkpoint step >= 1, got {resume_step}")
        environ = os.environ if environ is None else environ
        cwd = profile.prime_rl.workdir or run_dir.parent
        specs: dict[str, LaunchSpec] = {}
        for component in COMPONENTS:
            config_file = self.config_path(attempt_dir, component)
            config = self.effective_config(
                profile, component, run_dir=run_dir, container_names=container_names)
            specs[component] = LaunchSpec(
                argv=self.argv(profile, component, run_id=run_id, config_file=config_file,
                               resume_step=resume_step),
                env=self.environment(profile, component, environ),
                cwd=cwd,
                files={config_file: tomli_w.dumps(config)},
            )
        return specs


class PrimeRL04(Adapter):
    """prime-rl v0.4 (the seeds' version)."""

    version = "0.4"

    def resume_flags(self, component: ComponentName, step: int) -> list[str]:
        # `rl --trainer.ckpt.resume-step N` / `--orchestrator.ckpt.resume-step N`, per component.
        return ["--ckpt.resume-step", str(step)]

    def checkpoint_table(self, interval: int, keep: int | None) -> dict[str, Any]:
        return {"interval": interval} if keep is None else {"interval": interval, "keep": keep}

    def client_base_url(self, url: str) -> Any:
        return url

    def orchestrator_extras(self, profile: Profile) -> dict[str, Any]:
        # What v0.4's `rl` does: one orchestrator data shard per trainer rank.
        if len(profile.gpus.trainer) > 1:
            return {"num_train_workers": len(profile.gpus.trainer)}
        return {}


class PrimeRLMain(Adapter):
    """prime-rl main (after v0.8)."""

    version = "main"

    def resume_flags(self, component: ComponentName, step: int) -> list[str]:
        return ["--resume.step", str(step)]

    def checkpoint_table(self, interval: int, keep: int | None) -> dict[str, Any]:
        return {"interval": interval} if keep is None else {"interval": interval,
                                                            "keep_last": keep}

    def client_base_url(self, url: str) -> Any:
        return [url]


_ADAPTERS: dict[str, Adapter] = {"0.4": PrimeRL04(), "main": PrimeRLMain()}
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(_ADAPTERS)


def get_adapter(version: str) -> Adapter:
    """The adapter for a prime-rl version ("0.4" or "main")."""
    try:
        return _ADAPTERS[version]
    except KeyError:
        raise AdapterError(
            f"prime-rl version {version!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_VERSIONS)}") from None
