#!/usr/bin/env python3
"""Resolve a prime-rl command line with prime-rl's OWN parser and print the result as JSON.

A standalone script: standard library and prime-rl only, no airvisor imports. airvisor runs it
with prime-rl's interpreter (Python 3.12, prime-rl importable), so what it reports is what that
prime-rl version makes of the user's config, never a re-reading of it.

    python resolve_config.py --version {0.4|main} [--component rl|trainer|orchestrator|inference]
        [--cwd DIR] [--split] -- <args exactly as they follow the `rl` (or component) command>

--split (with the component rl) adds "split": the run's two halves for a recovery that keeps
the inference server (the server as `rl` starts it, and the resolved config without
[inference], re-parsed and compared), or "refusals" saying why it cannot be kept (issue 22).

e.g. `-- @ /abs/rl.toml @ /abs/overrides.toml --ckpt.resume-step 5` (v0.4) or
`-- @ /abs/rl.toml --resume.step 5` (main). main also accepts `--component env-server`.

--cwd is the directory the run is launched from (default: the caller's cwd). prime-rl opens
`@ file` paths and every relative path of the config against the launch directory, so relative
`@` paths are made absolute against it (the parsers only open them) and the paths under "facts"
are joined onto it. The parse itself runs in a fresh temporary directory as cwd (v0.4 writes
`.pydantic_config/temp_*.toml` into the cwd for `--trainer @ f`: utils/pydantic_config.py:
121-127,279-283); main's resolved sub-configs are produced by prime-rl's own write_subconfigs
into that temporary directory and read back. Nothing is written anywhere else; the temporary
directory is removed at exit.

stderr carries two progress lines, so a caller whose time limit ran out can say what was slow:
`airvisor-resolve: importing prime-rl` once this script runs, and `airvisor-resolve: parsing
(import took N s)` once prime-rl's config classes and parser are imported.

stdout is ONE JSON object (anything prime-rl prints goes to stderr):
  exit 0  {"ok": true, "version", "component", "rl", "components", "env_servers", "facts",
           "warnings", "unknown_args"}
  exit 2  {"ok": false, "errors": [{"loc", "msg", "type"}], "message"}  prime-rl refused the
           config (pydantic's errors, or one error for any other exception, e.g. a missing file)
  exit 3  {"ok": false, "errors": [...], "message": "prime-rl is not importable with ..."}
  exit 4  usage error of this script; exit 5 an internal error of this script (a bug).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_NOT_IMPORTABLE = 3
EXIT_USAGE = 4
EXIT_INTERNAL = 5

COMPONENTS = ("rl", "trainer", "orchestrator", "inference", "env-server")

# The config class each entry point parses.
# v0.4.0 (pyproject.toml:47-51 [project.scripts]):
#   rl           rl.py:822-823                        rl(parse_argv(RLConfig))
#   trainer      trainer/rl/train.py:614-617          parse_argv(RLTrainerConfig) (rl.py:725-744
#                                                     starts it under torchrun -m)
#   orchestrator orchestrator/orchestrator.py:726-729 parse_argv(OrchestratorConfig)
#   inference    inference/server.py:5-6              parse_argv(InferenceConfig, allow_extras=True)
V04_CLASSES = {
    "rl": ("prime_rl.rl", "RLConfig"),
    "trainer": ("prime_rl.trainer.rl.config", "RLTrainerConfig"),
    "orchestrator": ("prime_rl.orchestrator.config", "OrchestratorConfig"),
    "inference": ("prime_rl.inference.config", "InferenceConfig"),
}
# main (pyproject.toml:50-57 [project.scripts] -> src/prime_rl/entrypoints/*.py):
#   rl           entrypoints/rl.py:664-666            rl(cli(RLConfig))
#   trainer      entrypoints/trainer.py:17-19         cli(TrainerConfig)
#   orchestrator entrypoints/orchestrator.py:19-21    cli(OrchestratorConfig)
#   inference    entrypoints/inference.py:237-239     cli(InferenceConfig)
#   env-server   entrypoints/env_server.py:35-38      cli(EnvServerConfig)
MAIN_CLASSES = {
    "rl": ("prime_rl.configs.rl", "RLConfig"),
    "trainer": ("prime_rl.configs.trainer", "TrainerConfig"),
    "orchestrator": ("prime_rl.configs.orchestrator", "OrchestratorConfig"),
    "inference": ("prime_rl.configs.inference", "InferenceConfig"),
    "env-server": ("prime_rl.configs.env_server", "EnvServerConfig"),
}


# The progress lines' prefix (airvisor/primerl/_resolve.py reads them after a timeout).
PROGRESS_PREFIX = "airvisor-resolve: "
# Where progress goes and when the import began: set by main() (stderr is redirected while
# prime-rl parses, and the progress must reach the caller's pipe).
_progress_stream: Any = None
_import_began: float | None = None


def _progress(line: str) -> None:
    if _progress_stream is not None:
        _progress_stream.write(PROGRESS_PREFIX + line + "\n")
        _progress_stream.flush()


def _parsing() -> None:
    """Marks the end of the import: prime-rl's classes and parser are loaded, the parse begins.
    Said once (main's resolution parses more than once)."""
    global _import_began
    if _import_began is not None:
        _progress(f"parsing (import took {time.monotonic() - _import_began:.1f} s)")
        _import_began = None


class Refused(Exception):
    """prime-rl refused the config: carries the JSON errors and prime-rl's own message."""

    def __init__(self, errors: list[dict[str, Any]], message: str) -> None:
        super().__init__(message)
        self.errors = errors
        self.message = message


class NotImportable(Exception):
    pass


# --------------------------------------------------------------------------- output


def _emit(stdout: Any, payload: dict[str, Any], code: int) -> int:
    stdout.write(json.dumps(payload, default=str) + "\n")
    stdout.flush()
    return code


def _failure(errors: list[dict[str, Any]], message: str) -> dict[str, Any]:
    return {"ok": False, "errors": errors, "message": message}


def _one_error(exc: BaseException) -> list[dict[str, Any]]:
    return [{"loc": "", "msg": str(exc), "type": type(exc).__name__}]


def _pydantic_errors(exc: Any) -> list[dict[str, Any]]:
    """A pydantic ValidationError as [{loc: "a.b.0.c", msg, type}]."""
    out = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error.get("loc", ()))
        out.append(
            {"loc": loc, "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
        )
    return out


# --------------------------------------------------------------------------- arguments


def _absolute_at_paths(args: list[str], cwd: Path, version: str) -> list[str]:
    """Make the file of every `@ file` (and, for main, `--key @file`) absolute against cwd.

    v0.4 reads only a standalone `@` followed by the path (utils/pydantic_config.py:152-177);
    main also `--key @file` without the space (pydantic_config/cli.py _process_args).
    """
    out = list(args)
    for index, arg in enumerate(out):
        if arg == "@" and index + 1 < len(out):
            path = Path(out[index + 1]).expanduser()
            if not path.is_absolute():
                out[index + 1] = str(cwd / path)
        elif (
            version == "main"
            and arg.startswith("@")
            and len(arg) > 1
            and index > 0
            and out[index - 1].startswith("--")
        ):
            path = Path(arg[1:]).expanduser()
            if not path.is_absolute():
                out[index] = "@" + str(cwd / path)
    return out


def _absolute(path: Any, cwd: Path) -> str | None:
    if path is None:
        return None
    candidate = Path(path).expanduser()
    return str(candidate if candidate.is_absolute() else cwd / candidate)


# --------------------------------------------------------------------------- v0.4


def _parse_v04(component: str, args: list[str]) -> tuple[Any, list[str]]:
    """v0.4's own parse: parse_argv reads sys.argv (utils/pydantic_config.py:251-276).

    Unknown flags make pydantic-settings' argparse print usage and `error: ...` to stderr and
    raise SystemExit(2); that message is the refusal. Only the inference entry point allows
    extras (inference/server.py:6): they are vLLM's arguments, returned as unknown_args.
    """
    module_name, class_name = V04_CLASSES[component]
    try:
        module = __import__(module_name, fromlist=[class_name])
        config_cls = getattr(module, class_name)
        from prime_rl.utils.pydantic_config import parse_argv
    except Exception as exc:
        raise NotImportable(f"{type(exc).__name__}: {exc}") from exc
    from pydantic import ValidationError

    _parsing()
    allow_extras = component == "inference"
    saved_argv = sys.argv
    sys.argv = [component, *args]
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            config = parse_argv(config_cls, allow_extras=allow_extras)
    except ValidationError as exc:
        raise Refused(_pydantic_errors(exc), str(exc)) from exc
    except SystemExit as exc:
        text = captured.getvalue()
        lines = [line for line in text.splitlines() if ": error: " in line]
        message = lines[-1] if lines else (text.strip() or f"prime-rl exited with {exc.code}")
        if exc.code == 0:
            message = "prime-rl printed its help and exited (--help / -h in the arguments)"
        raise Refused([{"loc": "", "msg": message, "type": "SystemExit"}], message) from exc
    except Exception as exc:  # e.g. FileNotFoundError, TOMLDecodeError
        where = _v04_bad_toml(args) if type(exc).__name__ == "TOMLDecodeError" else None
        message = f"{type(exc).__name__}: {exc}" + (f" in {where}" if where else "")
        error = {"loc": "", "msg": message, "type": type(exc).__name__}
        raise Refused([error], message) from exc
    finally:
        sys.argv = saved_argv
        # argparse's usage block is hundreds of lines: keep stderr to the error itself.
        text = captured.getvalue()
        kept = [line for line in text.splitlines() if not line.startswith(("usage:", " "))]
        sys.stderr.write("".join(line + "\n" for line in kept))
    unknown = list(config.get_unknown_args()) if allow_extras else []
    return config, unknown


def _v04_bad_toml(args: list[str]) -> str | None:
    """v0.4's TOML error does not name the file (utils/pydantic_config.py:118-119 and
    pydantic-settings read them): find the first `@` file the same parser (tomli) rejects."""
    import tomli

    for index, arg in enumerate(args[:-1]):
        if arg == "@":
            try:
                with open(args[index + 1], "rb") as handle:
                    tomli.load(handle)
            except (OSError, tomli.TOMLDecodeError):
                return args[index + 1]
    return None


def _v04_component_dump(config: Any) -> dict[str, Any]:
    # rl.py:611 (inference), rl.py:684 (orchestrator), rl.py:723 (trainer): what the launcher
    # writes to the temporary TOML each component is started with.
    dumped: dict[str, Any] = config.model_dump(exclude_none=True, mode="json")
    return dumped


def _v04_facts(config: Any, cwd: Path) -> dict[str, Any]:
    trainer, orchestrator, inference = config.trainer, config.orchestrator, config.inference
    output_dir = _absolute(config.output_dir, cwd)
    assert output_dir is not None
    # rl.py:377-386 sets orchestrator.output_dir = output_dir / "run_default", enforced by
    # utils/validation.py:50-57.
    orchestrator_dir = _absolute(orchestrator.output_dir, cwd)
    assert orchestrator_dir is not None
    log_dir = str(Path(output_dir) / "logs")  # rl.py:568, utils/pathing.py:8-9
    return {
        "output_dir": output_dir,
        "run_dir": output_dir,
        "orchestrator_output_dir": orchestrator_dir,
        # inference/config.py ServerConfig: host None = all interfaces, port 8000 by default.
        "inference_host": inference.server.host if inference is not None else None,
        "inference_port": inference.server.port if inference is not None else None,
        # orchestrator/config.py ClientConfig.base_url: a list in v0.4.
        "client_base_urls": list(orchestrator.client.base_url),
        # rl.py:144-145 (fields), rl.py:620,752: CUDA_VISIBLE_DEVICES of each process.
        "inference_gpu_ids": list(config.inference_gpu_ids) if inference is not None else None,
        "trainer_gpu_ids": list(config.trainer_gpu_ids),
        "gpu_ids_are_physical": True,
        "num_infer_gpus": len(config.inference_gpu_ids) if inference is not None else 0,
        "num_train_gpus": len(config.trainer_gpu_ids),  # rl.py:739 --nproc-per-node
        # rl.py:262-293 copies [ckpt] onto both halves; validate_shared_ckpt_config checks them.
        "ckpt_interval": trainer.ckpt.interval if trainer.ckpt is not None else None,
        "keep_last": trainer.ckpt.keep_last if trainer.ckpt is not None else None,
        "keep_interval": trainer.ckpt.keep_interval if trainer.ckpt is not None else None,
        "max_steps": trainer.max_steps,  # rl.py:355-364
        "resume_step": trainer.ckpt.resume_step if trainer.ckpt is not None else None,
        "resume_latest": trainer.ckpt is not None and trainer.ckpt.resume_step == -1,
        # orchestrator/ckpt.py:14-15 Progress.step = 0: steps are 0-based.
        "first_step": 0,
        "model_names": {
            "trainer": trainer.model.name,
            "orchestrator": orchestrator.model.name,
            "inference": inference.model.name if inference is not None else None,
        },
        "slurm": False,
        "deployment_type": "local",
        # rl.py:137-143 default True; rl.py:574-598 removes logs, rollouts and (unless resuming
        # with filesystem broadcast) broadcasts.
        "clean": bool(config.clean),
        "weight_broadcast_type": trainer.weight_broadcast.type,
        # trainer/ckpt.py:113 and orchestrator/ckpt.py:26: <output_dir>/checkpoints of each.
        "trainer_ckpt_dir": str(
            Path(_absolute(trainer.output_dir, cwd) or output_dir) / "checkpoints"
        ),
        "orchestrator_ckpt_dir": str(Path(orchestrator_dir) / "checkpoints"),
        "log_dir": log_dir,
        # rl.py:617,695,747 (component stdout+stderr), rl.py:560 (launcher, if log.file),
        # rl.py:735 (torchrun --log-dir, per-rank logs).
        "log_files": {
            "inference": str(Path(log_dir) / "inference.stdout") if inference is not None else None,
            "orchestrator": str(Path(log_dir) / "orchestrator.stdout"),
            "trainer": str(Path(log_dir) / "trainer.stdout"),
            "launcher": str(Path(log_dir) / "rl.log") if config.log.file else None,
        },
        "torchrun_log_dir": str(Path(output_dir) / "torchrun"),
        # rl.py:569: the orchestrator's own log dir, cleaned by rl.py:582-584
        "orchestrator_log_dir": str(Path(orchestrator_dir) / "logs"),
    }


# --------------------------------------------------------------------------- main


def _parse_main(component: str, args: list[str]) -> Any:
    """main's own parse: pydantic_config.cli(cls, args=...) (prime_rl/utils/config.py re-exports
    it). With explicit args it raises ConfigFileError instead of printing and exiting; a
    validation failure is a ConfigFileError whose __cause__ is pydantic's ValidationError."""
    module_name, class_name = MAIN_CLASSES[component]
    try:
        module = __import__(module_name, fromlist=[class_name])
        config_cls = getattr(module, class_name)
        from prime_rl.utils.config import cli
    except Exception as exc:
        raise NotImportable(f"{type(exc).__name__}: {exc}") from exc
    from pydantic import ValidationError

    _parsing()
    try:
        return cli(config_cls, args=args)
    except SystemExit as exc:  # --help: cli writes help and exits 0
        message = "prime-rl printed its help and exited (--help / -h in the arguments)"
        raise Refused([{"loc": "", "msg": message, "type": "SystemExit"}], message) from exc
    except ValidationError as exc:
        raise Refused(_pydantic_errors(exc), str(exc)) from exc
    except Exception as exc:
        cause = exc.__cause__
        if isinstance(cause, ValidationError):
            raise Refused(_pydantic_errors(cause), str(exc)) from exc
        raise Refused(_one_error(exc), str(exc)) from exc


def _main_subconfigs(config: Any, scratch: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Exactly what main's launcher writes: prime-rl's own write_subconfigs
    (entrypoints/rl.py:77-111), run into a scratch directory and read back, with env_servers
    (entrypoints/rl.py:51-62)."""
    from prime_rl.entrypoints.rl import (
        ENVS_DIR,
        INFERENCE_CONFIG,
        ORCHESTRATOR_CONFIG,
        TRAINER_CONFIG,
        env_servers,
        write_subconfigs,
    )

    config_dir = scratch / "configs"
    write_subconfigs(config, config_dir)

    def read(name: Path) -> Any:
        return json.loads(name.read_text())

    inference_file = config_dir / INFERENCE_CONFIG
    components = {
        "trainer": read(config_dir / TRAINER_CONFIG),
        "orchestrator": read(config_dir / ORCHESTRATOR_CONFIG),
        "inference": read(inference_file) if inference_file.exists() else None,
    }
    servers = []
    for split, source, address in env_servers(config):
        name = source.resolved_name
        servers.append(
            {
                "split": split,
                "name": name,
                "address": address,
                "config": read(config_dir / ENVS_DIR / split / f"{name}.json"),
            }
        )
    return components, servers


def _main_launch_checks(config: Any) -> None:
    """The config check main's launcher makes before it starts anything, outside the config
    classes: entrypoints/rl.py:163-173 (rl_local, single node), the orchestrator's client port
    must be the inference server's. Same condition, prime-rl's message."""
    from urllib.parse import urlparse

    if config.slurm is not None or config.deployment.type != "single_node":
        return
    if config.inference is None:
        return
    client_port = urlparse(config.orchestrator.model.client.base_url).port
    expected_port = config.inference.server.port
    if client_port != expected_port:
        message = (
            f"orchestrator.model.client.base_url port ({client_port}) does not match "
            f"inference.server.port ({expected_port}). "
            f"Update the base_url to use port {expected_port} to match the inference server."
        )
        loc = "orchestrator.model.client.base_url"
        raise Refused([{"loc": loc, "msg": message, "type": "launch_check"}], message)


def _next_attempt(logs_dir: Path) -> int:
    """The attempt number main's next launch will use (utils/pathing.py:14-34
    create_attempt_log_dir: 1 + the highest logs/attempt_<n>), computed read-only."""
    if not logs_dir.is_dir():
        return 1
    numbers = [
        int(p.name.removeprefix("attempt_"))
        for p in logs_dir.glob("attempt_*")
        if p.name.removeprefix("attempt_").isdigit()
    ]
    return 1 + max(numbers, default=0)


def _main_facts(config: Any, cwd: Path, run_name_given: bool) -> dict[str, Any]:
    trainer, orchestrator, inference = config.trainer, config.orchestrator, config.inference
    deployment = config.deployment
    run_dir = _absolute(config.run_dir, cwd)  # configs/rl.py:249-252 output_dir / run.dir
    assert run_dir is not None
    single_node = deployment.type == "single_node"
    num_infer = (deployment.num_infer_gpus if inference is not None else 0) if single_node else None
    num_train = deployment.num_train_gpus if single_node else None
    infer_ids: list[int] | None = None
    train_ids: list[int] | None = None
    if single_node and num_infer is not None and num_train is not None:
        # entrypoints/rl.py:130-148: local ids 0..n-1 for inference, then the trainer's, mapped
        # through the launcher's CUDA_VISIBLE_DEVICES (utils/process.py:36-44; without it,
        # NVML's order, i.e. the identity).
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        physical = (
            [int(token.strip()) for token in visible.split(",") if token.strip()]
            if visible is not None
            else list(range(num_infer + num_train))
        )
        if len(physical) >= num_infer + num_train:
            infer_ids = physical[:num_infer]
            train_ids = physical[num_infer : num_infer + num_train]
    resume = config.resume
    resume_step = None
    if resume is not None:  # entrypoints/rl.py:636-644
        resume_step = resume.dir_step if resume.dir is not None else resume.step
    ckpt = trainer.ckpt
    trainer_ckpt_base = (ckpt.output_dir if ckpt is not None else None) or trainer.output_dir
    logs_dir = Path(run_dir) / "logs"
    attempt = _next_attempt(logs_dir)
    attempt_dir = logs_dir / f"attempt_{attempt}"
    # entrypoints/rl.py:622-627 -> utils/pathing.py:156-193 validate_run_dir: a launch that
    # neither resumes nor cleans is refused when the run dir holds a previous run's artifacts
    # (or ckpt.output_dir holds checkpoints). prime-rl's own read-only predicates, on the disk
    # as it is now.
    from prime_rl.utils.pathing import has_checkpoints, has_run_artifacts

    ckpt_out = config.ckpt.output_dir if config.ckpt is not None else None
    abs_ckpt_out = Path(str(_absolute(ckpt_out, cwd))) if ckpt_out is not None else None
    artifacts = has_run_artifacts(Path(run_dir)) or (
        abs_ckpt_out is not None and abs_ckpt_out != Path(run_dir) and has_checkpoints(abs_ckpt_out)
    )
    return {
        "output_dir": _absolute(config.output_dir, cwd),
        "run_dir": run_dir,
        # configs/rl.py:388-405: both sub-configs' output_dir is the run dir.
        "orchestrator_output_dir": _absolute(orchestrator.output_dir, cwd),
        "run_name": config.run.name,
        # configs/rl.py:254-261: without run.name a random one is drawn at every parse, so
        # every launch (and every resume) would get a new run directory.
        "run_name_generated": not run_name_given,
        "inference_host": inference.server.host if inference is not None else None,
        "inference_port": inference.server.port if inference is not None else None,
        # configs/inference.py:440-444: a router on server.port, the engine on backend_port.
        "inference_backend_port": inference.backend_port if inference is not None else None,
        "inference_router": inference is not None and inference.router is not None,
        "client_base_urls": [orchestrator.model.client.base_url],
        "inference_gpu_ids": infer_ids,
        "trainer_gpu_ids": train_ids,
        "gpu_ids_are_physical": visible_is_set(),
        "num_infer_gpus": num_infer,
        "num_train_gpus": num_train,
        "ckpt_interval": ckpt.interval if ckpt is not None else None,
        "keep_last": ckpt.keep_last if ckpt is not None else None,
        "keep_interval": ckpt.keep_interval if ckpt is not None else None,
        "max_steps": trainer.max_steps,
        "resume_step": resume_step,
        "resume_latest": resume is not None and resume_step is None,
        # orchestrator/types.py:27-30 Progress.step = 1: steps are 1-based.
        "first_step": 1,
        "model_names": {
            "trainer": trainer.model.name,
            "orchestrator": orchestrator.model.name,
            # configs/inference.py: main's server model is [inference.vllm] model.
            "inference": inference.vllm.model if inference is not None else None,
        },
        "slurm": config.slurm is not None,
        "deployment_type": deployment.type,
        # configs/rl.py:246 default False; entrypoints/rl.py:622-627 validate_run_dir refuses a
        # used run dir unless resuming or clean (utils/pathing.py:156-193).
        "clean": bool(config.clean),
        "run_dir_has_artifacts": bool(artifacts),
        "fresh_launch_refused": bool(artifacts) and resume is None and not config.clean,
        "weight_broadcast_type": trainer.weight_broadcast.type,
        # trainer/ckpt.py:309-317 (ckpt.output_dir overrides), orchestrator/ckpt.py:74-77.
        "trainer_ckpt_dir": str(Path(_absolute(trainer_ckpt_base, cwd) or run_dir) / "checkpoints"),
        "orchestrator_ckpt_dir": str(
            Path(_absolute(orchestrator.output_dir, cwd) or run_dir) / "checkpoints"
        ),
        "log_dir": str(logs_dir),
        # entrypoints/rl.py:176 create_attempt_log_dir: logs/attempt_<n>, logs/latest -> it.
        "next_attempt": attempt,
        "attempt_log_dir": str(attempt_dir),
        "latest_log_dir": str(logs_dir / "latest"),  # utils/pathing.py:37-39
        # entrypoints/rl.py:199,257,287,326,338: in the attempt dir of the next launch.
        "log_files": {
            "inference": str(attempt_dir / "inference.log") if inference is not None else None,
            "orchestrator": str(attempt_dir / "orchestrator.log"),
            "trainer": str(attempt_dir / "trainer.log"),
            "env_servers": {
                f"{split}/{source.resolved_name}": str(
                    attempt_dir / "envs" / split / f"{source.resolved_name}.log"
                )
                for split, source in orchestrator.env_sources
                if source.serve.address is None
            },
        },
        "torchrun_log_dir": str(attempt_dir / "trainer" / "torchrun"),
        "config_dir": str(Path(run_dir) / "configs"),  # entrypoints/rl.py:122
    }


def visible_is_set() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES") is not None


def _component_facts(component: str, config: Any, version: str, cwd: Path) -> dict[str, Any]:
    """What one component's own config says (component mode): the rest is null."""
    facts: dict[str, Any] = {}
    if component in ("trainer", "orchestrator", "env-server"):
        facts["output_dir"] = _absolute(config.output_dir, cwd)
    if component in ("trainer", "orchestrator"):
        ckpt = config.ckpt
        facts["ckpt_interval"] = ckpt.interval if ckpt is not None else None
        facts["keep_last"] = ckpt.keep_last if ckpt is not None else None
        facts["max_steps"] = config.max_steps
        if version == "0.4":
            facts["resume_step"] = ckpt.resume_step if ckpt is not None else None
        else:
            resume = config.resume
            facts["resume_step"] = (
                None
                if resume is None
                else (resume.dir_step if resume.dir is not None else resume.step)
            )
        facts["model_names"] = {component: config.model.name}
    if component == "orchestrator":
        base = config.client.base_url if version == "0.4" else config.model.client.base_url
        facts["client_base_urls"] = list(base) if isinstance(base, list) else [base]
    if component == "inference":
        facts["inference_host"] = config.server.host
        facts["inference_port"] = config.server.port
        name = config.model.name if version == "0.4" else config.vllm.model
        facts["model_names"] = {"inference": name}
    facts["first_step"] = 0 if version == "0.4" else 1
    return facts


# --------------------------------------------------------------------------- split

# Why a run's inference server cannot be kept across a relaunch of the rest (codes are
# airvisor.primerl._split.SplitRefusal's).
def _refusal(code: str, detail: str) -> dict[str, str]:
    return {"code": code, "detail": detail}


def _client_ports(urls: list[str]) -> list[int | None]:
    from urllib.parse import urlparse

    return [urlparse(url).port for url in urls]


def _differences(left: Any, right: Any, where: str = "") -> list[str]:
    """The dotted keys whose values differ between two JSON values (at most 20)."""
    if isinstance(left, dict) and isinstance(right, dict):
        out: list[str] = []
        for key in sorted(set(left) | set(right)):
            out += _differences(left.get(key), right.get(key), f"{where}.{key}" if where else key)
        return out[:20]
    return [] if left == right else [where or "<root>"]


def _split_v04(config: Any, components: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """v0.4's two halves. The inference server as rl.py:608-627 starts it (the sub-config
    rl.py:611 dumps, CUDA_VISIBLE_DEVICES of rl.py:620); the rest is the same resolved RLConfig
    with `inference` None, which rl.py:121-126 allows ("only viable, if an inference server was
    started manually"), re-parsed here by v0.4's own parser so that what runs is what prime-rl
    makes of it, and compared with the full config's trainer and orchestrator."""
    import tomli_w

    refusals: list[dict[str, str]] = []
    inference = config.inference
    if inference is None:
        refusals.append(_refusal("no_inference", "the config starts no inference server"))
        return {"inference": None, "rest": None, "refusals": refusals}
    # NCCL broadcast is no refusal: the orchestrator forms the group at its own start, posting
    # /init_broadcaster to the server (orchestrator/orchestrator.py:232-236), whose worker builds
    # a new receiver on every call (inference/vllm/worker/nccl.py:89-109); on a resume it then
    # puts the server on the checkpoint step's weights before its loop (orchestrator.py:248-263)
    # and the resumed trainer broadcasts them first (trainer/rl/train.py:220-225). A worker stuck
    # in a receive from the dead trainer is caught by the kept server's responsiveness probe.
    port = inference.server.port
    urls = list(config.orchestrator.client.base_url)
    if any(p != port for p in _client_ports(urls)):
        refusals.append(_refusal("client_elsewhere", f"orchestrator.client.base_url {urls} is not "
                                 f"all on inference.server.port {port}"))
    rest = config.model_copy(update={"inference": None})
    rest_dump = rest.model_dump(exclude_none=True, mode="json")
    path = scratch / "rest.toml"
    path.write_bytes(tomli_w.dumps(rest_dump).encode())
    reparsed, _ = _parse_v04("rl", ["@", str(path)])
    diffs = []
    for name in ("trainer", "orchestrator"):
        diffs += [f"{name}.{key}" for key in _differences(
            components[name], _v04_component_dump(getattr(reparsed, name)))]
    if diffs:
        refusals.append(_refusal("rest_differs", "without [inference] prime-rl resolves the "
                                 f"rest differently: {', '.join(diffs)}"))
    return {
        "inference": {
            "config": components["inference"],
            "format": "toml",
            "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, config.inference_gpu_ids))},
            "gpus": list(config.inference_gpu_ids),
            "host": inference.server.host,
            "port": port,
        },
        "rest": {"config": rest_dump, "format": "toml", "env": {}},
        "refusals": refusals,
    }


def _split_main(config: Any, components: dict[str, Any], scratch: Path,
                facts: dict[str, Any]) -> dict[str, Any]:
    """main's two halves. The inference server as entrypoints/rl.py:194-213 starts it (the
    inference.json write_subconfigs wrote, the launcher's environment defaults from
    prime_rl.utils.process, env_vars, CUDA_VISIBLE_DEVICES, and the PRL_RUN_NAME rl() sets); the
    rest is the resolved RLConfig with `inference` None (configs/rl.py:234-235), dumped as prime-rl
    dumps its own resolved config (dump_resolved_config: JSON keeps the nulls), re-parsed by
    main's parser and its sub-configs compared with the full config's. Without inference the
    launcher gives the trainer local GPUs 0.. (entrypoints/rl.py:132), so its
    CUDA_VISIBLE_DEVICES must name the trainer's physical GPUs."""
    from prime_rl.utils.config import dump_resolved_config
    from prime_rl.utils.process import DEFAULT_COMMON_ENV_VARS, DEFAULT_INFERENCE_ENV_VARS

    refusals: list[dict[str, str]] = []
    inference = config.inference
    if config.slurm is not None:
        refusals.append(_refusal("slurm", "the run is submitted to Slurm"))
    if config.deployment.type != "single_node":
        refusals.append(_refusal("multi_node", f"deployment.type = {config.deployment.type!r}"))
    if inference is None:
        refusals.append(_refusal("no_inference", "the config starts no inference server"))
        return {"inference": None, "rest": None, "refusals": refusals}
    if inference.deployment.type != "single_node":
        refusals.append(_refusal("disaggregated" if inference.deployment.type == "disaggregated"
                                 else "multi_node",
                                 f"inference.deployment.type = {inference.deployment.type!r}"))
    if refusals:
        # Slurm or more than one node: no split on this box. Stop before the re-parse below:
        # main refuses a multi-node config without [inference] (configs/rl.py:333-338), and
        # that refusal is about the half, not the user's config, which prime-rl accepted.
        return {"inference": None, "rest": None, "refusals": refusals}
    # NCCL broadcast (main's default with [inference]) is no refusal: the orchestrator forms the
    # group at its own start (orchestrator/orchestrator.py:281-290, utils/client.py:420-440
    # posting /init_broadcaster), the worker builds a new receiver on every call
    # (inference/vllm/worker/nccl.py:95-130), and before its first rollout the orchestrator syncs
    # the server to v{resume step}, the trainer's startup broadcast (orchestrator.py:332-350). A
    # worker stuck in a receive from the dead trainer fails /liveness (inference/vllm/server.py:
    # 120-130), which the kept server's probe asks. NIXL stays refused: its kept worker takes the
    # first "trainer" its ModelExpress server lists (worker/nixl.py:122-131), a server that
    # outlives the trainer, so a dead trainer's entry is not shown to be gone.
    if config.trainer.weight_broadcast.type == "nixl":
        refusals.append(_refusal("nixl_weight_broadcast", "weight_broadcast.type = 'nixl': the "
                                 "kept server's worker takes the first trainer its ModelExpress "
                                 "server lists (prime-rl inference/vllm/worker/nixl.py:122-131); "
                                 "that server outlives the trainer, so the dead trainer's entry "
                                 "may be the one it takes"))
    port = inference.server.port
    url = config.orchestrator.model.client.base_url
    if _client_ports([url]) != [port]:
        refusals.append(_refusal("client_elsewhere", f"orchestrator.model.client.base_url {url} "
                                 f"is not on inference.server.port {port}"))
    rest = config.model_copy(update={"inference": None})
    rest_dump = dump_resolved_config(rest)
    path = scratch / "rest.json"
    path.write_text(json.dumps(rest_dump))
    reparsed = _parse_main("rl", ["@", str(path)])
    again, _ = _main_subconfigs(reparsed, scratch / "rest")
    diffs = []
    for name in ("trainer", "orchestrator"):
        diffs += [f"{name}.{key}" for key in _differences(components[name], again[name])]
    if diffs:
        refusals.append(_refusal("rest_differs", "without [inference] prime-rl resolves the "
                                 f"rest differently: {', '.join(diffs)}"))
    infer_gpus, trainer_gpus = facts["inference_gpu_ids"], facts["trainer_gpu_ids"]
    if infer_gpus is None or trainer_gpus is None:
        refusals.append(_refusal("gpus_unknown", "fewer GPUs visible than the deployment asks"))
        infer_gpus, trainer_gpus = infer_gpus or [], trainer_gpus or []
    env = {
        **DEFAULT_COMMON_ENV_VARS,
        **DEFAULT_INFERENCE_ENV_VARS,
        **config.env_vars,
        **inference.env_vars,
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, infer_gpus)),
        "PRL_RUN_NAME": config.run.name,
    }
    return {
        "inference": {
            "config": components["inference"],
            "format": "json",
            "env": env,
            "gpus": infer_gpus,
            "host": inference.server.host,
            "port": port,
        },
        "rest": {"config": rest_dump, "format": "json",
                 "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, trainer_gpus)),
                         "PRL_RUN_NAME": config.run.name}},
        "refusals": refusals,
    }


# --------------------------------------------------------------------------- entry point


def _arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise ValueError("missing `--` before prime-rl's arguments")
    split = argv.index("--")
    own, rest = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(prog="resolve_config.py", add_help=False, exit_on_error=False)
    parser.add_argument("--version", required=True, choices=["0.4", "main"])
    parser.add_argument("--component", default="rl", choices=list(COMPONENTS))
    parser.add_argument("--cwd", default=None)
    parser.add_argument("--split", action="store_true")
    namespace = parser.parse_args(own)
    if namespace.split and namespace.component != "rl":
        raise ValueError("--split needs --component rl")
    if namespace.component == "env-server" and namespace.version != "main":
        raise ValueError("--component env-server exists only in prime-rl main")
    return namespace, rest


def _resolve(options: argparse.Namespace, args: list[str], scratch: Path) -> dict[str, Any]:
    version: str = options.version
    component: str = options.component
    cwd = Path(options.cwd).expanduser().resolve() if options.cwd else Path.cwd()
    args = _absolute_at_paths(args, cwd, version)
    result: dict[str, Any] = {
        "ok": True,
        "version": version,
        "component": component,
        "cwd": str(cwd),
        "rl": None,
        "components": {"trainer": None, "orchestrator": None, "inference": None},
        "env_servers": [],
        "facts": {},
        "warnings": [],
        "unknown_args": [],
    }
    os.chdir(scratch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if version == "0.4":
            config, unknown = _parse_v04(component, args)
            result["unknown_args"] = unknown
            if component == "rl":
                result["rl"] = config.model_dump(mode="json")
                result["components"] = {
                    "trainer": _v04_component_dump(config.trainer),
                    "orchestrator": _v04_component_dump(config.orchestrator),
                    "inference": (
                        _v04_component_dump(config.inference)
                        if config.inference is not None
                        else None
                    ),
                }
                result["facts"] = _v04_facts(config, cwd)
                if options.split:
                    result["split"] = _split_v04(config, result["components"], scratch)
        else:
            config = _parse_main(component, args)
            if component == "rl":
                _main_launch_checks(config)
                run_name_given = _run_name_given(config, component, args)
                result["rl"] = config.model_dump(mode="json")
                components, servers = _main_subconfigs(config, scratch)
                result["components"] = components
                result["env_servers"] = servers
                result["facts"] = _main_facts(config, cwd, run_name_given)
                if options.split:
                    result["split"] = _split_main(config, components, scratch, result["facts"])
        if component != "rl":
            from pydantic import BaseModel

            assert isinstance(config, BaseModel)
            key = component
            dumped = (
                _v04_component_dump(config) if version == "0.4" else config.model_dump(mode="json")
            )
            result["components"] = {"trainer": None, "orchestrator": None, "inference": None}
            result["components"][key] = dumped
            result["facts"] = _component_facts(component, config, version, cwd)
    result["warnings"] = [str(w.message) for w in caught]
    return result


def _run_name_given(config: Any, component: str, args: list[str]) -> bool:
    """Whether run.name came from the user. configs/rl.py:254-261 (_resolve_run_name) draws
    `<envs>--<model>--<uuid8>` when it is unset, by attribute assignment (which also marks the
    field as set), so the only faithful test is a second parse: a given name comes back equal."""
    again = _parse_main(component, args)
    return bool(again.run.name == config.run.name)


def main(argv: list[str] | None = None) -> int:
    global _progress_stream, _import_began
    _progress_stream, _import_began = sys.stderr, time.monotonic()
    _progress("importing prime-rl")
    stdout = sys.stdout
    # Everything else prime-rl prints (help, warnings, loguru) goes to stderr: stdout carries
    # exactly one JSON object.
    sys.stdout = sys.stderr
    try:
        try:
            options, args = _arguments(list(sys.argv[1:] if argv is None else argv))
        except (ValueError, argparse.ArgumentError, SystemExit) as exc:
            message = f"usage: resolve_config.py --version {{0.4|main}} [...] -- ARGS: {exc}"
            return _emit(stdout, _failure(_one_error(exc), message), EXIT_USAGE)
        scratch = Path(tempfile.mkdtemp(prefix="airvisor-resolve-"))
        start = os.getcwd()
        try:
            payload = _resolve(options, args, scratch)
            return _emit(stdout, payload, EXIT_OK)
        except NotImportable as exc:
            message = f"prime-rl is not importable with {sys.executable}: {exc}"
            errors = [{"loc": "", "msg": message, "type": "ImportError"}]
            return _emit(stdout, _failure(errors, message), EXIT_NOT_IMPORTABLE)
        except Refused as exc:
            return _emit(stdout, _failure(exc.errors, exc.message), EXIT_REFUSED)
        finally:
            os.chdir(start)
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException as exc:
        traceback.print_exc(file=sys.stderr)
        message = f"internal error of resolve_config.py: {type(exc).__name__}: {exc}"
        return _emit(stdout, _failure(_one_error(exc), message), EXIT_INTERNAL)
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
