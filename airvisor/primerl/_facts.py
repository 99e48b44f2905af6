"""What airvisor needs to know about a resolved prime-rl run, and how it reads it.

prime-rl computes these (defaults, propagation of shared keys, derived directories); airvisor
reads them from the config *as prime-rl resolved it* (`resolve_config.py`, run with prime-rl's
own interpreter). Only where prime-rl cannot be reached does airvisor read the user's TOML files
itself (`facts_from_files`), for these few facts alone, and says so: that reading mirrors the
prime-rl defaults cited next to each line, and validates nothing.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from airvisor.primerl._tracker import tracker_facts
from airvisor.profile._configs import merge_into
from airvisor.profile._rlargs import flag_pairs, flag_value, toml_refs

Version = Literal["0.4", "main"]


@dataclass(frozen=True)
class RunFacts:
    """The resolved run, in the terms airvisor supervises it by. Paths are absolute."""

    version: Version
    output_dir: Path
    run_dir: Path  # where the run's artifacts live (v0.4: output_dir; main: output_dir/run.dir)
    orchestrator_output_dir: Path  # v0.4: output_dir/run_default; main: run_dir
    inference_host: str
    inference_port: int | None  # None: `rl` starts no inference server
    inference_gpus: tuple[int, ...]
    trainer_gpus: tuple[int, ...]
    ckpt_interval: int | None  # None: checkpointing off
    keep_last: int | None
    max_steps: int | None
    model_names: Mapping[str, str] = field(default_factory=dict)
    # The fraction of each inference GPU vLLM may take (gpu_memory_utilization), if set.
    inference_memory_share: float | None = None
    slurm: bool = False
    deployment_type: str = "single_node"
    # What the layout table needs besides (see _layout.layout_for): weight_broadcast_type,
    # wait_for_weights_timeout, ckpt_output_dir, log_file.
    extras: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version, "output_dir": str(self.output_dir),
            "run_dir": str(self.run_dir),
            "orchestrator_output_dir": str(self.orchestrator_output_dir),
            "inference_host": self.inference_host, "inference_port": self.inference_port,
            "inference_gpus": list(self.inference_gpus),
            "trainer_gpus": list(self.trainer_gpus), "ckpt_interval": self.ckpt_interval,
            "keep_last": self.keep_last, "max_steps": self.max_steps,
            "model_names": dict(self.model_names),
            "inference_memory_share": self.inference_memory_share, "slurm": self.slurm,
            "deployment_type": self.deployment_type, **dict(self.extras),
        }


def _get(data: Mapping[str, Any], *path: str) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, str):  # a CLI flag: "0,1,2" (the seeds' form)
        value = [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return [v for v in (_int(v) for v in value) if v is not None]
    return None


def _share(value: Any) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    return None


def memory_share(version: Version, inference: Any) -> float | None:
    """vLLM's gpu_memory_utilization in an inference config: v0.4 at the top of it
    (InferenceConfig.gpu_memory_utilization), main under [vllm]."""
    if version == "0.4":
        return _share(_get(inference, "gpu_memory_utilization"))
    return _share(_get(inference, "vllm", "gpu_memory_utilization"))


def physical_gpus(environ: Mapping[str, str]) -> list[int] | None:
    """The GPUs `CUDA_VISIBLE_DEVICES` names (numeric form), or None when unset/non-numeric.

    main's `rl` maps its local GPU indices onto these (`utils/process.py`
    `get_physical_gpu_ids`, used in `entrypoints/rl.py` rl_local).
    """
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        return None
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        return None


def split_gpus(num_infer: int, num_train: int,
               physical: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """main's single-node split: inference takes the first local GPUs, the trainer the next
    (`entrypoints/rl.py` rl_local: infer_local_gpu_ids, then trainer_local_gpu_ids)."""
    ids = list(physical) if physical is not None else list(range(num_infer + num_train))
    return ids[:num_infer], ids[num_infer:num_infer + num_train]


def layout_extras(version: Version, rl: Mapping[str, Any] | None) -> dict[str, Any]:
    """From prime-rl's resolved RLConfig, what decides which files a resume needs."""
    if not rl:
        return {}
    extras: dict[str, Any] = {}
    trainer, orchestrator = rl.get("trainer") or {}, rl.get("orchestrator") or {}
    broadcast = _get(trainer, "weight_broadcast", "type")
    if broadcast is not None:
        extras["weight_broadcast_type"] = broadcast
    wait = _get(orchestrator, "ckpt", "wait_for_weights_timeout")
    if wait is not None:
        extras["wait_for_weights_timeout"] = wait
    if version == "main":
        ckpt_dir = _get(rl, "ckpt", "output_dir")
        if ckpt_dir is not None:
            extras["ckpt_output_dir"] = ckpt_dir
        # Slurm mode (airvisor.slurm): prime-rl's resolved [slurm] (project_dir, partition,
        # exclude, pre_run_command, ...) and [deployment] (nodes), as prime-rl computed them.
        if isinstance(rl.get("slurm"), Mapping):
            extras["slurm_settings"] = dict(rl["slurm"])
            extras["deployment"] = dict(rl.get("deployment") or {})
    else:
        log_file = _get(rl, "log", "file")
        if log_file is not None:
            extras["log_file"] = log_file
    return extras


def facts_from_resolved(version: Version, facts: Mapping[str, Any], *, cwd: Path,
                        environ: Mapping[str, str],
                        rl: Mapping[str, Any] | None = None) -> RunFacts:
    """RunFacts from `resolve_config.py`'s `facts` (relative paths are the launcher's cwd's)."""
    def path(value: Any, default: Path) -> Path:
        return cwd / Path(value) if isinstance(value, str) and value else default

    output_dir = path(facts.get("output_dir"), cwd / "outputs")
    run_dir = path(facts.get("run_dir"), output_dir)
    orchestrator_dir = path(facts.get("orchestrator_output_dir"), run_dir)
    inference_gpus = _ints(facts.get("inference_gpu_ids"))
    trainer_gpus = _ints(facts.get("trainer_gpu_ids"))
    if inference_gpus is None or trainer_gpus is None:
        inference_gpus, trainer_gpus = split_gpus(
            _int(facts.get("num_infer_gpus")) or 0, _int(facts.get("num_train_gpus")) or 0,
            physical_gpus(environ))
    host = facts.get("inference_host")
    models = facts.get("model_names")
    return RunFacts(
        version=version, output_dir=output_dir, run_dir=run_dir,
        orchestrator_output_dir=orchestrator_dir,
        inference_host=host if isinstance(host, str) and host else "localhost",
        inference_port=_int(facts.get("inference_port")),
        inference_gpus=tuple(inference_gpus), trainer_gpus=tuple(trainer_gpus),
        ckpt_interval=_int(facts.get("ckpt_interval")),
        keep_last=_int(facts.get("keep_last")), max_steps=_int(facts.get("max_steps")),
        model_names={str(k): str(v) for k, v in models.items()}
        if isinstance(models, Mapping) else {},
        inference_memory_share=memory_share(version, (rl or {}).get("inference")),
        slurm=bool(facts.get("slurm")),
        deployment_type=str(facts.get("deployment_type") or "single_node"),
        extras={**layout_extras(version, rl), **resume_extras(facts),
                **tracker_facts(version, dict(rl) if rl else None)},
    )


def resume_extras(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The resume prime-rl resolved for this launch (`resolved_resume_step`, and
    `resolved_resume_latest` for -1 / main's `[resume]` without a step), so that a resume
    the user's own files ask for is seen before it overrides airvisor's choice."""
    step = facts.get("resume_step")
    return {"resolved_resume_step": step if isinstance(step, int) else None,
            "resolved_resume_latest": bool(facts.get("resume_latest"))}


# --- airvisor's own reading, only when prime-rl cannot be reached ----------------------------


def merged_toml(args: Sequence[str]) -> dict[str, Any]:
    """The `@` files of an `rl` argument list deep-merged in order, sections nested, then the
    dotted flags on top (values stay strings: prime-rl's parser would coerce them).
    Raises OSError / tomllib.TOMLDecodeError for an unreadable file."""
    data: dict[str, Any] = {}
    for ref in toml_refs(args):
        with ref.path.open("rb") as handle:
            loaded: dict[str, Any] = tomllib.load(handle)
        if ref.section is not None:
            for part in reversed(ref.section.replace("-", "_").split(".")):
                loaded = {part: loaded}
        merge_into(data, loaded)
    for key, value in flag_pairs(args):
        node: dict[str, Any] = {}
        parts = key.split(".")
        leaf: Any = flag_value(value)
        if parts[-1].startswith("no_") and value is None:
            parts[-1], leaf = parts[-1][3:], False
        for part in reversed(parts):
            node = {part: leaf}
            leaf = node
        merge_into(data, node)  # in place: linear in the number of flags
    return data


def facts_from_files(version: Version, args: Sequence[str], *, cwd: Path,
                     environ: Mapping[str, str]) -> RunFacts:
    """The facts from the user's files by airvisor's reading (prime-rl not reachable)."""
    data = merged_toml(args)
    output_dir = cwd / Path(str(data.get("output_dir") or "outputs"))  # both: default "outputs"
    trainer, orchestrator = data.get("trainer") or {}, data.get("orchestrator") or {}
    inference = data.get("inference")
    port = (_int(_get(inference, "server", "port")) or 8000) if isinstance(inference, dict) \
        else None  # v0.4 rl.py / main rl.py: no [inference] table, no inference server
    host = _get(inference, "server", "host") if isinstance(inference, dict) else None
    ckpt = _get(data, "ckpt") or {}
    interval = _int(_get(ckpt, "interval")) or _int(_get(trainer, "ckpt", "interval"))
    keep = _int(_get(ckpt, "keep_last")) or _int(_get(trainer, "ckpt", "keep_last"))
    max_steps = _int(data.get("max_steps")) or _int(trainer.get("max_steps"))
    models = {name: str(_get(section, "model", "name"))
              for name, section in (("trainer", trainer), ("orchestrator", orchestrator),
                                    ("inference", inference or {}))
              if _get(section, "model", "name") is not None}
    shared_model = _get(data, "model", "name")
    if shared_model is not None:
        models = {name: str(shared_model) for name in ("trainer", "orchestrator", "inference")}
    if version == "0.4":
        # rl.py RLConfig: inference_gpu_ids = [0], trainer_gpu_ids = [1];
        # auto_setup_output_dir: the orchestrator writes under output_dir / "run_default".
        infer_gpus = _ints(data.get("inference_gpu_ids")) or [0]
        train_gpus = _ints(data.get("trainer_gpu_ids")) or [1]
        run_dir, orchestrator_dir = output_dir, output_dir / "run_default"
    else:
        # configs/rl.py RLConfig.run_dir = output_dir / run.dir (run.dir defaults to run.name);
        # SingleNodeDeploymentConfig: num_train_gpus = 1, num_infer_gpus = 1.
        run = data.get("run") or {}
        run_dir = output_dir / str(run.get("dir") or run.get("name") or "unnamed")
        orchestrator_dir = run_dir
        deployment = data.get("deployment") or {}
        num_infer = (_int(deployment.get("num_infer_gpus")) or 1) \
            if isinstance(inference, dict) else 0
        infer_gpus, train_gpus = split_gpus(
            num_infer, _int(deployment.get("num_train_gpus")) or 1, physical_gpus(environ))
    return RunFacts(
        version=version, output_dir=output_dir, run_dir=run_dir,
        orchestrator_output_dir=orchestrator_dir,
        inference_host=str(host) if host else "localhost", inference_port=port,
        inference_gpus=tuple(infer_gpus), trainer_gpus=tuple(train_gpus),
        ckpt_interval=interval, keep_last=keep, max_steps=max_steps, model_names=models,
        inference_memory_share=memory_share(version, inference),
        slurm="slurm" in data,
        deployment_type=str(_get(data, "deployment", "type") or "single_node"),
    )
