"""The torchrun stand-in: start N demo trainer workers and supervise them like the elastic agent.

prime-rl's launcher starts it with the trainer's command line (v0.4 rl.py:725-746 through
`uv run env ...`, main entrypoints/rl.py:320-334 by bare name).

It takes torchrun's options in `--opt=v` and `--opt v` form, with dashes or underscores, ignores
the ones it does not know, and runs the worker command (a script path, `-m module`, or
`--no-python command`: whichever form the adapter picked) as the demo trainer with the remaining
arguments. Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT. The first worker to fail decides the exit status; the others are terminated.
SIGTERM is forwarded to the workers. Like the c10d rendezvous store, it listens on the
rendezvous port, so a stale torchrun holding the port makes a new one fail at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from airvisor.demo._config import DemoConfigError
from airvisor.demo._process import SIGTERM_EXIT, Terminated, install_termination_handlers

# torchrun's options (dash spelling) that take no value; every other known one takes a value.
FLAG_OPTIONS = frozenset({"standalone", "module", "no-python", "run-path", "virtual-local-rank"})
VALUE_OPTIONS = frozenset(
    {
        "nnodes",
        "nproc-per-node",
        "rdzv-backend",
        "rdzv-endpoint",
        "rdzv-id",
        "rdzv-conf",
        "max-restarts",
        "monitor-interval",
        "start-method",
        "role",
        "node-rank",
        "master-addr",
        "master-port",
        "local-addr",
        "log-dir",
        "redirects",
        "tee",
        "local-ranks-filter",
        "logs-specs",
        "event-log-handler",
        "numa-binding",
        "signals-to-handle",
    }
)
SHORT_OPTIONS = {"-m": "module", "-r": "redirects", "-t": "tee"}
# argparse accepts unambiguous prefixes; prime-rl's trainer_cmd spells `--redirect=3`.
ALIASES = {"redirect": "redirects"}
DEFAULT_MASTER_PORT = 29500
WORKER_STOP_GRACE = 30.0  # torchrun's own SIGTERM -> SIGKILL wait for its workers


@dataclass(frozen=True)
class TorchrunArgs:
    nproc_per_node: int
    master_addr: str
    master_port: int
    rdzv_id: str
    worker_command: tuple[str, ...]  # what real torchrun would run (for the log only)
    worker_args: tuple[str, ...]
    ignored: tuple[str, ...] = field(default=())
    role: str = "default"
    log_dir: str | None = None
    redirects: int = 0  # 0 none, 1 stdout, 2 stderr, 3 both: into <log_dir>/.../<rank>/*.log
    tee: int = 0  # the same streams also to torchrun's own, for ranks in local_ranks_filter
    local_ranks_filter: frozenset[int] | None = None  # None: every rank


def parse_torchrun_argv(argv: Sequence[str], *, visible_gpus: int = 1) -> TorchrunArgs:
    """torchrun's command line, split into its options, the worker command and the worker's args."""
    options: dict[str, str] = {}
    ignored: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token in SHORT_OPTIONS:
            name, value, i = _take(SHORT_OPTIONS[token], None, argv, i)
            options[name] = value
            continue
        if not token.startswith("--"):
            break  # the training script / module / command
        body = token[2:]
        name, _, inline = body.partition("=")
        name = name.replace("_", "-")
        name = ALIASES.get(name, name)
        if name in FLAG_OPTIONS or name in VALUE_OPTIONS:
            name, value, i = _take(name, inline if "=" in body else None, argv, i)
            options[name] = value
        else:
            ignored.append(token)  # unknown: a `--opt=v` or a bare flag
            i += 1
    if i >= len(argv):
        raise DemoConfigError(
            "torchrun: missing the training script (e.g. `-m prime_rl.trainer.rl.train` or "
            "`--no-python trainer`) and its arguments"
        )
    prefix = ("-m",) if "module" in options else ()
    worker_command = (*prefix, argv[i])
    endpoint = options.get("rdzv-endpoint", "")
    host, _, port_text = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    master_addr = options.get("master-addr") or host or "127.0.0.1"
    port_source = port_text or options.get("master-port") or str(DEFAULT_MASTER_PORT)
    try:
        master_port = int(port_source)
    except ValueError:
        raise DemoConfigError(f"torchrun: bad rendezvous port {port_source!r}") from None
    return TorchrunArgs(
        nproc_per_node=_nproc(options.get("nproc-per-node", "1"), visible_gpus),
        master_addr="127.0.0.1" if master_addr == "localhost" else master_addr,
        master_port=master_port,
        rdzv_id=options.get("rdzv-id", "none"),
        worker_command=worker_command,
        worker_args=tuple(argv[i + 1 :]),
        ignored=tuple(ignored),
        role=options.get("role", "default"),
        log_dir=options.get("log-dir"),
        redirects=_std_streams(options.get("redirects", "0"), "redirects"),
        tee=_std_streams(options.get("tee", "0"), "tee"),
        local_ranks_filter=_ranks(options.get("local-ranks-filter")),
    )


def _std_streams(value: str, option: str) -> int:
    try:
        streams = int(value)
    except ValueError:
        raise DemoConfigError(
            f"torchrun: --{option} takes 0-3 (the stand-in does not take per-rank maps), "
            f"got {value!r}"
        ) from None
    if not 0 <= streams <= 3:
        raise DemoConfigError(f"torchrun: --{option} takes 0-3, got {streams}")
    return streams


def _ranks(value: str | None) -> frozenset[int] | None:
    if value is None or not value.strip():
        return None
    try:
        return frozenset(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise DemoConfigError(
            f"torchrun: --local-ranks-filter takes ranks like 0,1: {value!r}"
        ) from None


def _take(name: str, inline: str | None, argv: Sequence[str], i: int) -> tuple[str, str, int]:
    if name in FLAG_OPTIONS:
        return name, "true", i + 1
    if inline is not None:
        return name, inline, i + 1
    if i + 1 >= len(argv):
        raise DemoConfigError(f"torchrun: option --{name} needs a value")
    return name, argv[i + 1], i + 2


def _nproc(value: str, visible_gpus: int) -> int:
    if value in ("gpu", "auto"):
        return max(1, visible_gpus)
    if value == "cpu":
        return 1
    try:
        count = int(value)
    except ValueError:
        raise DemoConfigError(
            f"torchrun: --nproc-per-node must be a number, got {value!r}"
        ) from None
    if count < 1:
        raise DemoConfigError(f"torchrun: --nproc-per-node must be at least 1, got {count}")
    return count


def _visible_gpus() -> int:
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in devices.split(",") if d.strip()])


def _say(message: str) -> None:
    # torchrun's own lines go to stderr, in the elastic agent's logging format.
    sys.stderr.write(f"[torchrun-demo] {message}\n")
    sys.stderr.flush()


def main(argv: Sequence[str], version: str | None = None) -> int:
    args = parse_torchrun_argv(argv, visible_gpus=_visible_gpus())
    for option in args.ignored:
        _say(f"ignoring torchrun option {option}")
    install_termination_handlers(ignore_sigterm=False, on_ignored=lambda: None)
    try:
        store = _listen(args.master_addr, args.master_port)
    except OSError as exc:
        _say(
            f"The server socket has failed to listen on any local network address. "
            f"port: {args.master_port}, {exc.strerror}"
        )
        return 1
    workers: list[subprocess.Popen[bytes]] = []
    try:
        workers = _start_workers(args, version)
        status = _supervise(workers)
        _drain_copiers()
        return status
    except Terminated as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop is enough; SIGKILL ends a wait
        _say(f"Received {stop} death signal, shutting down workers")
        _stop_workers(workers, signal.SIGTERM)
        return SIGTERM_EXIT
    finally:
        store.close()


def _listen(host: str, port: int) -> socket.socket:
    store = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        store.bind((host, port))
        store.listen()
    except OSError:
        store.close()
        raise
    return store


def _start_workers(args: TorchrunArgs, version: str | None) -> list[subprocess.Popen[bytes]]:
    world_size = args.nproc_per_node
    _say(
        f"starting {world_size} worker(s) of {' '.join(args.worker_command)} "
        f"(rdzv_id={args.rdzv_id}, master={args.master_addr}:{args.master_port})"
    )
    workers = []
    attempt_dir = Path(args.log_dir or ".") / f"{args.rdzv_id}_{uuid.uuid4().hex[:8]}" / "attempt_0"
    for rank in range(world_size):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            GROUP_RANK="0",
            ROLE_RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_WORLD_SIZE=str(world_size),
            MASTER_ADDR=args.master_addr,
            MASTER_PORT=str(args.master_port),
            TORCHELASTIC_RUN_ID=args.rdzv_id,
        )
        command = [sys.executable, "-m", "airvisor.demo"]
        if version is not None:
            command += ["--prime-rl", version]
        command += ["trainer", *args.worker_args]
        redirected = args.redirects if args.log_dir else 0
        # Same process group as torchrun, like the real workers: a group signal reaches them all.
        worker = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if redirected & 1 else None,
            stderr=subprocess.PIPE if redirected & 2 else None,
        )
        if redirected:
            _route_output(args, rank, worker, attempt_dir)
        workers.append(worker)
    return workers


COPIERS: list[threading.Thread] = []


def _route_output(
    args: TorchrunArgs, rank: int, worker: subprocess.Popen[bytes], attempt_dir: Path
) -> None:
    """torchrun's --redirect/--tee: each rank's streams into <log_dir>/<rdzv_id>_<random>/
    attempt_0/<rank>/{stdout,stderr}.log (torch/distributed/elastic/multiprocessing/api.py), and
    tee'd to torchrun's own streams as `[<role><local_rank>]:<line>` (tail_log.py; role
    "default" unless --role) for the ranks in --local-ranks-filter."""
    rank_dir = attempt_dir / str(rank)
    rank_dir.mkdir(parents=True, exist_ok=True)
    shown = args.local_ranks_filter is None or rank in args.local_ranks_filter
    prefix = f"[{args.role}{rank}]:".encode()
    for bit, stream, name, console in (
        (1, worker.stdout, "stdout", sys.stdout.buffer),
        (2, worker.stderr, "stderr", sys.stderr.buffer),
    ):
        if stream is None:
            continue
        tee = console if shown and args.tee & bit else None
        copier = threading.Thread(
            target=_copy_lines, args=(stream, rank_dir / f"{name}.log", tee, prefix), daemon=True
        )
        copier.start()
        COPIERS.append(copier)


def _copy_lines(source: IO[bytes], target: Path, tee: IO[bytes] | None, prefix: bytes) -> None:
    with target.open("ab") as log:
        for line in iter(source.readline, b""):
            log.write(line)
            log.flush()
            if tee is not None:
                tee.write(prefix + line)
                tee.flush()


def _drain_copiers() -> None:
    for copier in COPIERS:
        copier.join(timeout=5)


def _supervise(workers: list[subprocess.Popen[bytes]]) -> int:
    """Wait for the workers; the first non-zero status ends the group (torchrun's behaviour)."""
    running = {worker.pid: rank for rank, worker in enumerate(workers)}
    while running:
        pid, status = os.wait()
        if pid not in running:
            continue  # not one of ours (cannot happen: the workers are our only children)
        rank = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        workers[rank].returncode = code
        if code != 0:
            exit_code = 128 - code if code < 0 else code
            reason = f"signal {-code}" if code < 0 else f"exitcode: {code}"
            _say(f"failed ({reason}) local_rank: {rank} (pid: {pid}); stopping the other workers")
            _stop_workers(workers, signal.SIGTERM)
            return exit_code
    return 0


def _stop_workers(workers: list[subprocess.Popen[bytes]], signum: int) -> None:
    alive = [w for w in workers if w.poll() is None]
    for worker in alive:
        worker.send_signal(signum)
    deadline = time.monotonic() + WORKER_STOP_GRACE
    for worker in alive:
        try:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
