"""Scenario (first process of its own PID and mount namespace): a real vLLM (CPU build) API
server, SIGKILLed; `reap` must remove the orphaned EngineCore / Worker / resource tracker and
their /dev/shm leftovers. /dev/shm and /tmp are private tmpfs mounts here, so removing
leftovers cannot touch anyone else's.
No airvisor run started this vLLM, so it is stopped as `airvisor reap --all` does
(reap_unowned).

    vllm_server.py VENV GRACE
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)


import psutil  # noqa: E402
from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.reaper import default_context, discover, reap  # noqa: E402

SHM_PATTERNS = ("psm_", "sem.mp-", "vllm-")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# What the CPU build needs to start small and offline.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def vllm_argv(venv: Path, port: int) -> list[str]:
    """The venv's vLLM API server on the tiny model, on loopback `port`."""
    return [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(venv / "tiny-model"), "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "512", "--enforce-eager", "--dtype", "float32"]


def wait_healthy(port: int, popen: subprocess.Popen[bytes], timeout: float = 400) -> bool:
    """Whether the server on `port` answered /health with 200 before `timeout` seconds (the
    bound only turns a hang into a failure) while `popen` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and popen.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


def shm_leftovers() -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(SHM_PATTERNS))


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    venv = Path(sys.argv[1])
    private_tmp(size="2g")
    work = Path(tempfile.mkdtemp(prefix="airvisor-vllm-"))
    log = open(work / "server.log", "wb")  # noqa: SIM115
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRVISOR_")}
    env.update(VLLM_ENV)
    server = subprocess.Popen(
        vllm_argv(venv, port), env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True, cwd=work,
    )
    result: dict[str, object] = {"server": server.pid}
    started = time.monotonic()
    healthy = wait_healthy(port, server)
    result["startup_seconds"] = time.monotonic() - started
    if not healthy:
        server.kill()
        tail = (work / "server.log").read_text(errors="replace")[-3000:]
        print(json.dumps({"error": f"vLLM did not become healthy: {tail}"}))
        return
    tree = psutil.Process(server.pid).children(recursive=True)
    result["tree"] = {p.pid: " ".join(p.cmdline())[:200] for p in tree}
    result["shm_before_kill"] = shm_leftovers()

    server.send_signal(signal.SIGKILL)
    server.wait()
    time.sleep(2)
    result["orphans"] = {p.pid: " ".join(p.cmdline())[:200] for p in tree if p.is_running()
                         and p.status() != psutil.STATUS_ZOMBIE}
    candidates = discover(default_context(reap_unowned=True))
    result["found"] = {c.pid: [c.kind, c.reason] for c in candidates}
    started = time.monotonic()
    # A short grace: the SIGKILL lands before the resource tracker can unlink the segments
    # itself (as after a SIGKILL of the whole tree), so the leftover removal has work to do.
    report = reap(candidates, grace=float(sys.argv[2]), leftover_min_age=0.0, full_view=True)
    result["reap_seconds"] = time.monotonic() - started
    result["summary"] = report.summary
    result["removed"] = [os.path.basename(p) for p in report.leftovers.removed]
    result["alive_after"] = [p.pid for p in tree if p.is_running()
                             and p.status() != psutil.STATUS_ZOMBIE]
    result["shm_after"] = shm_leftovers()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
