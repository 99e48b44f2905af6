"""Real stand-in processes on free loopback ports in a temporary output_dir, always cleaned up.

Loaded by conftest.py as the module `airvisor_test_standins` (pytest's importlib mode makes
test-directory modules unimportable by plain name).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP_TIME = 0.05
WAIT = 30.0  # generous bound for any condition on a loaded 2-core box


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Standin:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def plain_log(self) -> str:
        return strip_ansi(self.log())

    def wait(self, timeout: float = WAIT) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout}s; log:\n{self.plain_log()[-3000:]}"
            ) from None

    def steps(self) -> list[int]:
        return [int(m) for m in re.findall(r"SUCCESS Step (\d+) \|", self.plain_log())]


@dataclass
class Standins:
    """Starts `python -m airvisor.demo ...` in its own session; the fixture kills every group."""

    root: Path
    output_dir: Path
    started: list[Standin] = field(default_factory=list)

    def write_config(self, name: str, config: dict[str, Any]) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(tomli_w.dumps(config))
        return path

    def start(
        self,
        component: str,
        argv: list[str],
        *,
        label: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Standin:
        label = label or component
        log_path = self.root / f"{label}-{len(self.started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "airvisor.demo", component, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                cwd=self.root,
            )
        standin = Standin(label, process, log_path)
        self.started.append(standin)
        return standin

    def start_rl(
        self, version: str, argv: list[str], *, demo: dict[str, Any] | None = None,
        env: dict[str, str] | None = None, label: str = "rl",
    ) -> Standin:
        """`python -m airvisor.demo --prime-rl V rl ...` in `root` (its cwd), AIRVISOR_DEMO set.

        prime-rl resolves the config only where a test passes AIRVISOR_DEMO_PRIMERL_PYTHON.
        """
        extra = {"AIRVISOR_DEMO": json.dumps(demo or {}), "AIRVISOR_DEMO_PRIMERL_PYTHON": "",
                 **(env or {})}
        return self.start("--prime-rl", [version, "rl", *argv], label=label, env=extra)

    # The module's helpers, also reachable through the fixture.
    @staticmethod
    def free_port() -> int:
        return free_port()

    @staticmethod
    def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
        return wait_until(predicate, what, timeout)

    @staticmethod
    def strip_ansi(text: str) -> str:
        return strip_ansi(text)

    def inference_config(self, port: int, **demo: Any) -> dict[str, Any]:
        return inference_config(self.output_dir, port, **demo)

    def step_config(self, *, max_steps: int, **options: Any) -> dict[str, Any]:
        return step_config(self.output_dir, max_steps=max_steps, **options)

    # The trio, started the way the adapters start prime-rl (see airvisor/primerl).

    def start_inference(self, **demo: Any) -> int:
        """An inference stand-in; returns its port once /health answers 200."""
        port = self.free_port()
        config = self.write_config("inference", self.inference_config(port, **demo))
        server = self.start("inference", ["@", str(config)])
        self.wait_until(
            lambda: (
                "Application startup complete." in server.plain_log()
                or server.process.poll() is not None
            ),
            "the inference stand-in to start",
        )
        assert server.process.poll() is None, server.plain_log()
        return port

    def start_trainer(
        self, config: dict[str, Any], *flags: str, nproc: int = 2, label: str = "trainer"
    ) -> Standin:
        path = self.write_config(label, config)
        argv = [
            f"--nproc-per-node={nproc}",
            f"--rdzv-endpoint=localhost:{self.free_port()}",
            "--rdzv-id=test",
            "--local-ranks-filter=0",
            "-m",
            "prime_rl.trainer.rl.train",
            "@",
            str(path),
            *flags,
        ]
        return self.start("torchrun", argv, label=label)

    def start_orchestrator(
        self, config: dict[str, Any], *flags: str, label: str = "orchestrator"
    ) -> Standin:
        path = self.write_config(label, config)
        return self.start("orchestrator", ["@", str(path), *flags], label=label)

    def cleanup(self) -> None:
        for standin in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(standin.pid, signal.SIGKILL)  # the group: workers, EngineCore too
            with contextlib.suppress(subprocess.TimeoutExpired):
                standin.process.wait(timeout=10)


def inference_config(output_dir: Path, port: int, **demo: Any) -> dict[str, Any]:
    return {
        "output_dir": str(output_dir),
        "server": {"host": "127.0.0.1", "port": port},
        "model": {"name": "demo/tiny-model"},
        "demo": demo,
    }


def step_config(
    output_dir: Path,
    *,
    max_steps: int,
    interval: int | None = 2,
    keep: int | None = 2,
    port: int | None = None,
    **demo: Any,
) -> dict[str, Any]:
    """A trainer/orchestrator config; `port` makes it an orchestrator config for that server."""
    config: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": max_steps,
        "model": {"name": "demo/tiny-model"},
        "demo": {"step_time": STEP_TIME, **demo},
    }
    ckpt: dict[str, Any] = {}
    if interval is not None:
        ckpt["interval"] = interval
    if keep is not None:
        ckpt["keep"] = keep
    if ckpt:
        config["ckpt"] = ckpt
    if port is not None:
        config["client"] = {"base_url": f"http://127.0.0.1:{port}/v1"}
        config["demo"]["connect_timeout"] = 10.0
    return config
