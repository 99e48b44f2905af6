"""The `rl` launcher stand-in: what that prime-rl version's `rl` does, with the demo components.

v0.4 follows `src/prime_rl/rl.py` `rl()`; main follows `src/prime_rl/entrypoints/rl.py` `rl()` and
`rl_local()` (single node). The config comes from prime-rl itself when AIRVISOR_DEMO_PRIMERL_PYTHON
names an interpreter that has it (`airvisor/primerl/resolve_config.py`, so the stand-in refuses
what prime-rl refuses); otherwise from a lenient reading of the TOML files that applies the few
propagations of that version's RLConfig the demo needs (cited inline), and says so.

Children are started with this process's own prefix (`python -m airvisor.demo --prime-rl V`) in
place of prime-rl's console scripts (`uv run inference`, `orchestrator`, `torchrun`), with that
version's argv, environment and log files.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

import psutil
import tomli_w

from airvisor.demo._config import (
    DemoConfigError,
    OrchestratorSettings,
    drop_none,
    load_toml,
    split_argv,
)
from airvisor.demo._inference import RUN_DIR_ENV
from airvisor.demo._layout import DemoVersion, list_steps, remove_steps_after
from airvisor.demo._log import StandinLogger
from airvisor.demo._process import set_title
from airvisor.primerl._resolve import EXIT_NO_PRIME_RL, last_json_object
from airvisor.profile._configs import merge_into
from airvisor.profile._rlargs import flag_value as parse_flag_value

PRIMERL_PYTHON_ENV = "AIRVISOR_DEMO_PRIMERL_PYTHON"
RESOLVE_TIMEOUT = 180.0
STOP_GRACE = 60.0  # both versions: terminate, wait 60 s, kill (cleanup_processes)
MONITOR_POLL = 1.0  # both versions sleep 1 s between checks of the error queue

# main src/prime_rl/utils/process.py:17-33
MAIN_COMMON_ENV = {
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "PYTHONUNBUFFERED": "1",
    "OMP_NUM_THREADS": "1",
    "GIT_LFS_SKIP_SMUDGE": "1",
}
MAIN_TRAINER_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
MAIN_INFERENCE_ENV = {
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
    "VLLM_ENGINE_READY_TIMEOUT_S": "4200",
    "UCX_TLS": "all",
}
LAUNCHER_ARTIFACTS = ("configs", "rl.sbatch", "sft.sbatch", "job_*.log")  # main pathing.py:145


class LaunchRefused(Exception):
    """The launcher stops before starting anything (prime-rl raises; exit status 1)."""


@dataclass
class Resolved:
    """The run as `rl` sees it after its config validators ran."""

    rl: dict[str, Any]
    components: dict[str, Any]  # inference (or None), orchestrator, trainer
    source: str  # "prime-rl" or "airvisor (lenient)"
    env_servers: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Reading the config


def lenient_config(argv: Sequence[str]) -> dict[str, Any]:
    """`@` files deep-merged left to right, then `--a.b value` flags; every key accepted."""
    files, flags = split_argv(argv)
    merged: dict[str, Any] = {}
    for path in files:
        merge_into(merged, load_toml(path))
    for key, raw in flags:
        parts = [part.replace("-", "_") for part in key.split(".")]
        value: Any
        if raw is None:
            if parts[-1].startswith("no_"):
                parts[-1], value = parts[-1][3:], False
            elif parts == ["resume"]:
                value = {}  # main: a bare --resume resumes from the latest step
            else:
                value = True
        else:
            value = parse_flag_value(raw)
        nested: Any = value
        for part in reversed(parts):
            nested = {part: nested}
        merge_into(merged, nested)  # in place: linear in the flags
    return merged


def _section(config: dict[str, Any], *path: str) -> dict[str, Any]:
    node = config
    for key in path:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    return node


def resolve_v04_lenient(config: Mapping[str, Any]) -> Resolved:
    """v0.4 RLConfig's propagations (rl.py:227-422) for the keys the demo reads."""
    rl = copy.deepcopy(dict(config))
    rl.setdefault("output_dir", "outputs")
    rl.setdefault("inference_gpu_ids", [0])
    rl.setdefault("trainer_gpu_ids", [1])
    rl.setdefault("clean", True)
    rl.setdefault("log", {}).setdefault("file", True)
    trainer = copy.deepcopy(rl.get("trainer") or {})
    orchestrator = copy.deepcopy(rl.get("orchestrator") or {})
    inference = copy.deepcopy(rl["inference"]) if isinstance(rl.get("inference"), dict) else None
    output_dir = Path(rl["output_dir"])
    trainer["output_dir"] = str(output_dir)  # rl.py:380-382
    orchestrator["output_dir"] = str(output_dir / "run_default")
    ckpt = rl.get("ckpt")
    if isinstance(ckpt, dict):  # rl.py:263-289
        for sub in (trainer, orchestrator):
            target = _section(sub, "ckpt")
            for key in ("interval", "resume_step", "keep_last", "keep_interval"):
                if ckpt.get(key) is not None:
                    target[key] = ckpt[key]
    model = rl.get("model")
    if isinstance(model, dict) and model.get("name"):  # rl.py:343-349
        for sub in (trainer, orchestrator, inference):
            if sub is not None:
                _section(sub, "model")["name"] = model["name"]
    for key in ("max_steps", "max_async_level"):  # rl.py:356-375
        if rl.get(key) is not None:
            trainer[key] = orchestrator[key] = rl[key]
    if rl.get("seq_len") is not None:  # rl.py:389-393
        _section(trainer, "model")["seq_len"] = rl["seq_len"]
        orchestrator["seq_len"] = rl["seq_len"]
    broadcast = rl.get("weight_broadcast")
    if isinstance(broadcast, dict) and broadcast.get("type"):  # rl.py:404-418
        for sub in (trainer, orchestrator, inference):
            if sub is not None:
                _section(sub, "weight_broadcast")["type"] = broadcast["type"]
    return Resolved(rl=rl, components={"inference": inference, "orchestrator": orchestrator,
                                       "trainer": trainer}, source="airvisor (lenient)")


def resolve_main_lenient(config: Mapping[str, Any]) -> Resolved:
    """main RLConfig's propagations (packages/prime-rl-configs/.../configs/rl.py) the demo reads."""
    rl = copy.deepcopy(dict(config))
    rl.setdefault("output_dir", "outputs")
    rl.setdefault("clean", False)
    run = _section(rl, "run")
    trainer = copy.deepcopy(rl.get("trainer") or {})
    orchestrator = copy.deepcopy(rl.get("orchestrator") or {})
    inference = copy.deepcopy(rl["inference"]) if isinstance(rl.get("inference"), dict) else None
    model: dict[str, Any] = rl["model"] if isinstance(rl.get("model"), dict) else {}
    if not run.get("name"):  # configs/rl.py _resolve_run_name
        short = str(model.get("name") or "Qwen/Qwen3-0.6B").split("/")[-1]
        run["name"] = f"no-env--{short}--{uuid.uuid4().hex[:8]}".lower()
    run.setdefault("dir", run["name"])
    run_dir = Path(rl["output_dir"]) / run["dir"]
    for sub in (trainer, orchestrator):  # configs/rl.py:388-405
        sub["output_dir"] = str(run_dir)
    ckpt = rl.get("ckpt")
    if isinstance(ckpt, dict):
        trainer_ckpt = _section(trainer, "ckpt")
        orchestrator_ckpt = _section(orchestrator, "ckpt")
        for key in ("interval", "keep_last", "keep_interval", "output_dir"):
            if ckpt.get(key) is not None:
                trainer_ckpt[key] = ckpt[key]
        if ckpt.get("interval") is not None:
            orchestrator_ckpt["interval"] = ckpt["interval"]
    if isinstance(rl.get("resume"), dict):  # configs/rl.py auto_setup_resume
        trainer["resume"] = dict(rl["resume"])
        orchestrator["resume"] = dict(rl["resume"])
    if model.get("name"):
        for sub in (trainer, orchestrator, inference):
            if sub is not None:
                _section(sub, "model")["name"] = model["name"]
    if rl.get("max_steps") is not None:
        trainer["max_steps"] = orchestrator["max_steps"] = rl["max_steps"]
    servers = _lenient_env_servers(orchestrator)
    deployment = _section(rl, "deployment")
    deployment.setdefault("type", "single_node")
    deployment.setdefault("num_train_gpus", 1)
    deployment.setdefault("num_infer_gpus", 1)
    return Resolved(rl=rl, components={"inference": inference, "orchestrator": orchestrator,
                                       "trainer": trainer}, source="airvisor (lenient)",
                    env_servers=servers)


def _lenient_env_servers(orchestrator: Mapping[str, Any]) -> list[dict[str, Any]]:
    """entrypoints/rl.py env_servers + write_subconfigs: one server per source without its own
    serve.address, at the orchestrator's derived address."""
    settings = OrchestratorSettings.model_validate(drop_none(orchestrator))
    sources = [*settings.train.source, *(settings.eval.source if settings.eval else [])]
    servers = []
    for (split, name, address), source in zip(settings.env_addresses(), sources, strict=True):
        if source.serve.get("address"):
            continue  # externally managed: rl neither writes nor starts it
        servers.append({"split": split, "name": name, "address": address,
                        "config": {"env": source.env, "serve": {**source.serve,
                                                                "address": address}}})
    return servers


def resolver_script() -> Path:
    return Path(__file__).resolve().parent.parent / "primerl" / "resolve_config.py"


def resolve_with_prime_rl(
    python: str, version: DemoVersion, argv: Sequence[str], logger: StandinLogger
) -> Resolved | None:
    """prime-rl's own resolution, or None when prime-rl is not importable there (then the
    lenient reading is used). Raises LaunchRefused with prime-rl's reasons when it refuses."""
    script = resolver_script()
    if not script.is_file():
        raise LaunchRefused(f"{PRIMERL_PYTHON_ENV} is set but {script} is missing")
    try:
        done = subprocess.run(
            [python, str(script), "--version", version, "--", *argv],
            capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"},
        )
    except FileNotFoundError:
        raise LaunchRefused(f"{PRIMERL_PYTHON_ENV}={python}: no such interpreter") from None
    payload = last_json_object(done.stdout)
    if done.returncode == 0 and payload is not None and payload.get("ok"):
        components = payload.get("components") or {}
        return Resolved(rl=dict(payload.get("rl") or {}), components=dict(components),
                        source="prime-rl", env_servers=list(payload.get("env_servers") or []))
    if done.returncode == EXIT_NO_PRIME_RL:
        logger.warning(f"prime-rl is not importable with {python}; reading the config leniently")
        return None
    reasons = _refusal_lines(payload) if payload is not None else []
    if not reasons:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:]
        reasons = tail or [f"resolve_config.py exited with {done.returncode}"]
    raise LaunchRefused("prime-rl refused the config:\n" + "\n".join(f"  {r}" for r in reasons))


def _refusal_lines(payload: Mapping[str, Any]) -> list[str]:
    lines = []
    for error in payload.get("errors") or []:
        if isinstance(error, Mapping):
            loc = error.get("loc")
            key = ".".join(str(p) for p in loc) if isinstance(loc, list | tuple) else str(loc or "")
            lines.append(f"{key}: {error.get('msg')}" if key else str(error.get("msg")))
    if not lines and payload.get("message"):
        lines.append(str(payload["message"]))
    return lines


# ---------------------------------------------------------------------------------------------
# Children and their supervision (both versions: a thread per child, 1 s poll of the errors)


class _Tee:
    """A stream writing to stdout and, while it is open, a log file (v0.4's rl.log sink)."""

    def __init__(self, path: Path | None) -> None:
        self._file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w")

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        if self._file is not None:
            self._file.write(text)
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()
        if self._file is not None:
            self._file.flush()


@dataclass
class Launcher:
    version: DemoVersion
    logger: StandinLogger
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stopped: dict[str, threading.Event] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: Mapping[str, str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as handle:
            process = subprocess.Popen(argv, env=dict(env), stdout=handle, stderr=handle,
                                       stdin=subprocess.DEVNULL)
        self.processes.append(process)
        event = threading.Event()
        self.stopped[name] = event
        thread = threading.Thread(target=self._monitor, args=(process, event, name), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _monitor(self, process: subprocess.Popen[bytes], event: threading.Event, name: str) -> None:
        process.wait()
        if process.returncode != 0:
            self.errors.append(f"{name.capitalize()} failed with exit code {process.returncode}")
        event.set()

    def tail(self, path: Path) -> None:
        self.processes.append(subprocess.Popen(["tail", "-F", str(path)],
                                               stdin=subprocess.DEVNULL))

    def wait(self, finished: str) -> int:
        """The monitor loop: exit 1 after the first failure, 0 once trainer and orchestrator
        both ended (rl.py:779-808 / entrypoints/rl.py:378-407)."""
        try:
            while not (self.stopped["orchestrator"].is_set() and self.stopped["trainer"].is_set()):
                if self.errors:
                    self.logger.error(f"Error: {self.errors[0]}")
                    self.logger.error("Terminating all processes...")
                    self.cleanup()
                    return 1
                time.sleep(MONITOR_POLL)
            for name in ("orchestrator", "trainer"):
                failed = [e for e in self.errors if e.startswith(name.capitalize())]
                if failed:
                    self.logger.error(failed[0])
                    self.cleanup()
                    return 1
            self.logger.success(finished)
            self.cleanup()
            return 0
        except KeyboardInterrupt:
            self.logger.warning("Received interrupt signal, terminating all processes...")
            self.cleanup()
            return 1

    def cleanup(self) -> None:
        for thread in self.threads:
            thread.join(timeout=5)
        for process in self.processes:
            if process.poll() is not None:
                continue
            if self.version == "0.4":  # rl.py cleanup_processes: the direct child only
                process.terminate()
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()
            else:  # main utils/process.py cleanup_processes: the whole tree via psutil
                _signal_tree(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    _signal_tree(process.pid, signal.SIGKILL)


def _signal_tree(pid: int, signum: int) -> None:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def own_prefix(version: DemoVersion) -> list[str]:
    return [sys.executable, "-m", "airvisor.demo", "--prime-rl", version]


# ---------------------------------------------------------------------------------------------
# v0.4: src/prime_rl/rl.py rl()


def run_v04(resolved: Resolved, argv: Sequence[str]) -> int:
    rl, parts = resolved.rl, resolved.components
    output_dir = Path(rl["output_dir"])
    log_cfg = rl.get("log") or {}
    log_dir = output_dir / "logs"  # rl.py:568 get_log_dir
    # setup_logger opens <output_dir>/logs/rl.log at once (loguru sinks open eagerly) ...
    stream = _Tee(log_dir / "rl.log" if log_cfg.get("file", True) else None)
    logger = StandinLogger(stream)  # type: ignore[arg-type]
    logger.info("Starting RL run")
    logger.info(f"Config read by {resolved.source}")
    orchestrator_dir = Path(parts["orchestrator"]["output_dir"])
    if rl.get("clean", True):  # rl.py:573-598 ... and the clean then deletes that directory
        logger.info("Cleaning checkpoint, logs, weights, broadcast and rollout directories")
        logger.info(f"Cleaning log dir ({log_dir})")
        shutil.rmtree(log_dir, ignore_errors=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        orch_log_dir = orchestrator_dir / "logs"
        logger.info(f"Cleaning orchestrator log dir ({orch_log_dir})")
        shutil.rmtree(orch_log_dir, ignore_errors=True)
        orch_log_dir.mkdir(parents=True, exist_ok=True)
        ckpt = rl.get("ckpt") or {}
        broadcast_type = ((parts["trainer"].get("weight_broadcast") or {}).get("type")
                          or "filesystem")
        if not (ckpt.get("resume_step") and broadcast_type == "filesystem"):
            logger.info(f"Cleaning broadcast directory ({orchestrator_dir / 'broadcasts'})")
            shutil.rmtree(orchestrator_dir / "broadcasts", ignore_errors=True)
        logger.info(f"Cleaning rollout dir ({orchestrator_dir / 'rollouts'})")
        shutil.rmtree(orchestrator_dir / "rollouts", ignore_errors=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher("0.4", logger)
    prefix = own_prefix("0.4")
    start_command = ["rl", *argv]
    base_env = {**os.environ, RUN_DIR_ENV: str(output_dir.resolve())}
    if parts.get("inference") is not None:
        inference_file = _temp_toml(parts["inference"])
        gpus = ",".join(map(str, rl.get("inference_gpu_ids", [0])))
        logger.info(f"Starting inference process on GPU(s) {' '.join(gpus.split(','))}")
        launcher.start("inference", [*prefix, "inference", "@", inference_file.as_posix()],
                       {**base_env, "CUDA_VISIBLE_DEVICES": gpus}, log_dir / "inference.stdout")
    else:
        logger.warning("No inference config specified, skipping starting inference server. "
                       "Is your inference server running?")
    orchestrator_file = _temp_toml(parts["orchestrator"])
    logger.info("Starting orchestrator process")
    launcher.start(
        "orchestrator", [*prefix, "orchestrator", "@", orchestrator_file.as_posix()],
        {**base_env, "LOGURU_FORCE_COLORS": "1", "WANDB_PROGRAM": "uv run rl",
         "WANDB_ARGS": json.dumps(start_command)},
        log_dir / "orchestrator.stdout",
    )
    trainer_file = _temp_toml(parts["trainer"])
    trainer_gpus = [int(g) for g in rl.get("trainer_gpu_ids", [1])]
    trainer_cmd = [  # rl.py:725-744, `uv run` -> this stand-in's prefix
        "env", "PYTHONUNBUFFERED=1", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        *prefix, "torchrun",
        f"--rdzv-endpoint=localhost:{free_port()}",
        f"--rdzv-id={uuid.uuid4().hex}",
        f"--log-dir={output_dir / 'torchrun'}",
        "--local-ranks-filter=0",
        "--redirect=3",
        "--tee=3",
        f"--nproc-per-node={len(trainer_gpus)}",
        "-m", "prime_rl.trainer.rl.train", "@", trainer_file.as_posix(),
    ]
    logger.info(f"Starting trainer process on GPU(s) {' '.join(map(str, trainer_gpus))}")
    launcher.start(
        "trainer", trainer_cmd,
        {**base_env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, trainer_gpus)),
         "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "LOGURU_FORCE_COLORS": "1",
         "WANDB_PROGRAM": "uv run rl", "WANDB_ARGS": json.dumps(start_command)},
        log_dir / "trainer.stdout",
    )
    logger.success("Startup complete. Showing trainer logs...")
    launcher.tail(log_dir / "trainer.stdout")
    return launcher.wait("RL training finished!")


def _temp_toml(config: Mapping[str, Any]) -> Path:
    """utils/pydantic_config.py get_temp_toml_file + tomli_w.dump(model_dump(exclude_none))."""
    root = Path(".pydantic_config")
    root.mkdir(exist_ok=True)
    path = root / f"temp_{uuid.uuid4()}.toml"
    path.write_text(tomli_w.dumps(drop_none(config)))
    return path


# ---------------------------------------------------------------------------------------------
# main: src/prime_rl/entrypoints/rl.py rl() + rl_local()


def _has_run_artifacts(run_dir: Path) -> bool:
    if not run_dir.exists():
        return False
    allowed = {entry for pattern in LAUNCHER_ARTIFACTS for entry in run_dir.glob(pattern)}
    return any(entry not in allowed for entry in run_dir.iterdir())


def run_main(resolved: Resolved, argv: Sequence[str], logger: StandinLogger) -> int:
    rl, parts = resolved.rl, resolved.components
    os.environ.setdefault("PRL_RUN_ID", uuid.uuid4().hex)
    run = rl.get("run") or {}
    os.environ["PRL_RUN_NAME"] = str(run.get("name"))
    output_dir = Path(rl.get("output_dir", "outputs"))
    run_dir = Path(parts["trainer"]["output_dir"])
    resume = rl.get("resume")
    resuming = isinstance(resume, dict)
    clean = bool(rl.get("clean")) and not os.environ.get("NEVER_CLEAN")
    ckpt = rl.get("ckpt") or {}
    ckpt_output_dir = Path(ckpt["output_dir"]) if ckpt.get("output_dir") else None
    logger.info(f"Config read by {resolved.source}")
    # pathing.py:156-193 validate_run_dir
    if not resuming:
        if clean:
            if not run_dir.resolve().is_relative_to(output_dir.resolve()):
                raise LaunchRefused(f"clean requires the run directory ({run_dir}) to remain "
                                    f"under output_dir ({output_dir})")
            for directory in [run_dir, *([ckpt_output_dir] if ckpt_output_dir else [])]:
                if directory.exists():
                    logger.warning(f"Cleaning existing directory: {directory}")
                    shutil.rmtree(directory)
        else:
            blocked = None
            if _has_run_artifacts(run_dir):
                blocked = (f"Run directory '{run_dir}' already contains artifacts from a "
                           "previous run.")
            elif (ckpt_output_dir is not None and ckpt_output_dir != run_dir
                  and (ckpt_output_dir / "checkpoints").exists()
                  and any((ckpt_output_dir / "checkpoints").iterdir())):
                blocked = (f"Checkpoint directory '{ckpt_output_dir}' already contains "
                           "checkpoints from a previous run.")
            if blocked:
                raise LaunchRefused(
                    f"FileExistsError: {blocked} To resume the latest step of the previous run, "
                    "pass --resume (or --resume.step N). To delete the existing directory and "
                    "start fresh, set clean=true or --clean via CLI. Otherwise use a unique run "
                    "name (run.name or --run.name via CLI) or output_dir for this run."
                )
    run_dir.mkdir(parents=True, exist_ok=True)
    if ckpt_output_dir is not None:
        ckpt_output_dir.mkdir(parents=True, exist_ok=True)
    resume_step: int | None = None
    if resuming:
        assert isinstance(resume, dict)
        resume_step = resume.get("step")
        if resume_step is None:
            steps = list_steps((ckpt_output_dir or run_dir) / "checkpoints")
            resume_step = steps[-1] if steps else None
    if resume_step is not None:  # entrypoints/rl.py:646-651 clean_future_steps
        logger.info(f"Resuming from step {resume_step}, cleaning future rollouts and broadcasts")
    else:
        logger.info("Training from scratch, cleaning any stale rollouts and broadcasts")
    for directory in (run_dir / "rollouts", run_dir / "broadcasts"):
        remove_steps_after(directory, resume_step if resume_step is not None else -1)
    return _rl_local(resolved, argv, logger, run_dir)


def _rl_local(resolved: Resolved, argv: Sequence[str], logger: StandinLogger,
              run_dir: Path) -> int:
    rl, parts = resolved.rl, resolved.components
    config_dir = run_dir / "configs"  # write_subconfigs
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "trainer.json").write_text(json.dumps(parts["trainer"], indent=2))
    (config_dir / "orchestrator.json").write_text(json.dumps(parts["orchestrator"], indent=2))
    inference = parts.get("inference")
    if inference is not None:
        trimmed = {k: v for k, v in inference.items()
                   if k not in {"deployment", "slurm", "output_dir", "dry_run"}}
        (config_dir / "inference.json").write_text(json.dumps(trimmed, indent=2))
    for server in resolved.env_servers:  # one EnvServerConfig per launcher-managed source
        config_file = config_dir / "envs" / str(server["split"]) / f"{server['name']}.json"
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(json.dumps(server.get("config") or {}, indent=2))
    logger.info(f"Wrote subconfigs to {config_dir}")
    if rl.get("dry_run"):
        logger.success("Dry run complete. To start an RL run locally, remove --dry-run from "
                       "your command.")
        return 0
    deployment = rl.get("deployment") or {}
    num_infer = int(deployment.get("num_infer_gpus", 1)) if inference is not None else 0
    num_train = int(deployment.get("num_train_gpus", 1))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    # No NVML on a demo box: without CUDA_VISIBLE_DEVICES the requested GPUs are assumed.
    physical = ([int(t) for t in visible.split(",") if t.strip()] if visible is not None
                else list(range(num_infer + num_train)))
    if num_infer + num_train > len(physical):
        raise LaunchRefused(
            f"Requested {num_infer + num_train} GPUs via deployment settings, but only "
            f"{len(physical)} physical GPU(s) are available: {physical}"
        )
    infer_gpus, trainer_gpus = physical[:num_infer], physical[num_infer:num_infer + num_train]
    logger.info("Starting RL run")
    wandb_shared = {"WANDB_SHARED_MODE": "1", "WANDB_RUN_ID": os.environ["PRL_RUN_ID"]}
    env_vars = {str(k): str(v) for k, v in (rl.get("env_vars") or {}).items()}
    if inference is not None:
        base_url = ((parts["orchestrator"].get("model") or {}).get("client") or {}).get(
            "base_url", "http://localhost:8000/v1")
        client_port = urlparse(str(base_url)).port
        expected = (inference.get("server") or {}).get("port", 8000)
        if client_port != expected:
            raise LaunchRefused(
                f"orchestrator.model.client.base_url port ({client_port}) does not match "
                f"inference.server.port ({expected}). Update the base_url to use port "
                f"{expected} to match the inference server."
            )
    log_dir = _create_attempt_log_dir(run_dir)
    launcher = Launcher("main", logger)

    def on_sigterm(signum: int, frame: object) -> None:
        logger.warning("Received SIGTERM, terminating all processes...")
        launcher.cleanup()
        sys.exit(1)

    signal.signal(signal.SIGTERM, on_sigterm)
    prefix = own_prefix("main")
    start_command = ["rl", *argv]
    base_env = {**os.environ, RUN_DIR_ENV: str(run_dir.resolve())}
    if inference is not None:
        logger.info(f"Starting inference on GPU(s) {' '.join(map(str, infer_gpus))}")
        launcher.start(
            "inference", [*prefix, "inference", "@", (config_dir / "inference.json").as_posix()],
            {**base_env, **MAIN_COMMON_ENV, **MAIN_INFERENCE_ENV, **env_vars,
             **_str_env(inference.get("env_vars")),
             "CUDA_VISIBLE_DEVICES": ",".join(map(str, infer_gpus))},
            log_dir / "inference.log",
        )
    else:
        logger.warning("No [inference] block configured - the policy inference server will not "
                       "be started here.")
    for server in resolved.env_servers:  # entrypoints/rl.py:249-282
        split, name = str(server["split"]), str(server["name"])
        config_file = config_dir / "envs" / split / f"{name}.json"
        logger.info(f"Starting {split} env server {name} at {server['address']}")
        launcher.start(
            f"{split} env server {name}", [*prefix, "env-server", "@", config_file.as_posix()],
            {**base_env, **MAIN_COMMON_ENV, **env_vars,
             **_str_env(parts["orchestrator"].get("env_vars"))},
            log_dir / "envs" / split / f"{name}.log",
        )
    logger.info("Starting orchestrator process")
    launcher.start(
        "orchestrator",
        [*prefix, "orchestrator", "@", (config_dir / "orchestrator.json").as_posix()],
        {**base_env, **MAIN_COMMON_ENV, "LOGURU_FORCE_COLORS": "1", "WANDB_PROGRAM": "uv run rl",
         "WANDB_ARGS": json.dumps(start_command), **env_vars,
         **_str_env(parts["orchestrator"].get("env_vars")), **wandb_shared,
         "WANDB_SHARED_LABEL": "orchestrator"},
        log_dir / "orchestrator.log",
    )
    ranks = ((parts["trainer"].get("log") or {}).get("ranks_filter")) or [0]
    trainer_cmd = [  # entrypoints/rl.py:320-334, `torchrun` -> this stand-in's
        *prefix, "torchrun", "--role=trainer",
        f"--rdzv-endpoint=localhost:{free_port()}",
        f"--rdzv-id={uuid.uuid4().hex}",
        f"--log-dir={log_dir / 'trainer' / 'torchrun'}",
        f"--local-ranks-filter={','.join(map(str, ranks))}",
        "--redirect=3",
        "--tee=3",
        f"--nproc-per-node={len(trainer_gpus)}",
        "-m", "prime_rl.trainer.rl.train", "@", (config_dir / "trainer.json").as_posix(),
    ]
    logger.info(f"Starting trainer on GPU(s) {' '.join(map(str, trainer_gpus))}")
    launcher.start(
        "trainer", trainer_cmd,
        {**base_env, **MAIN_COMMON_ENV, **MAIN_TRAINER_ENV, "LOGURU_FORCE_COLORS": "1",
         "WANDB_PROGRAM": "uv run rl", "WANDB_ARGS": json.dumps(start_command), **env_vars,
         **_str_env(parts["trainer"].get("env_vars")), **wandb_shared,
         "WANDB_SHARED_LABEL": "trainer", "CUDA_VISIBLE_DEVICES": ",".join(map(str, trainer_gpus))},
        log_dir / "trainer.log",
    )
    logger.success("Startup complete. Showing orchestrator logs...")
    launcher.tail(log_dir / "orchestrator.log")
    return launcher.wait("Training finished!")


def _str_env(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _create_attempt_log_dir(run_dir: Path) -> Path:
    """main utils/pathing.py:14-34: logs/attempt_<1 + highest>, `logs/latest` repointed."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    attempts = [int(p.name.removeprefix("attempt_")) for p in logs.glob("attempt_*")
                if p.name.removeprefix("attempt_").isdigit()]
    attempt = logs / f"attempt_{1 + max(attempts, default=0)}"
    attempt.mkdir()
    link = logs / f".{attempt.name}"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(attempt.name, link)
    os.replace(link, logs / "latest")
    return attempt


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str], version: DemoVersion) -> int:
    if version == "main":
        set_title("PRIME-RL::Launcher")
    logger = StandinLogger()
    try:
        resolved = None
        python = os.environ.get(PRIMERL_PYTHON_ENV, "").strip()
        if python:
            resolved = resolve_with_prime_rl(python, version, argv, logger)
        if resolved is None:
            config = lenient_config(argv)
            resolved = (resolve_v04_lenient(config) if version == "0.4"
                        else resolve_main_lenient(config))
        if version == "0.4":
            return run_v04(resolved, argv)
        return run_main(resolved, argv, logger)
    except LaunchRefused as refused:
        logger.error(f"Error occurred: {refused}")
        sys.stderr.write(f"{refused}\n")
        return 1
    except DemoConfigError:
        raise
