"""Records the py-spy dumps the verdict table tests read (run as root: py-spy needs ptrace).

    .venv/bin/python tests/stacks/recorded/record.py

Each scenario is a tiny real program blocked in one way; its main thread's dump is written as
`<scenario>.json` (py-spy's own JSON, `--native` where the name says so). `torch_all_reduce*.json`
and `torchrun_agent.json` are not recorded here (no torch on the test machines): they are written
by hand in the same format, with torch 2.x's frames of a rank blocked in `dist.all_reduce` (NCCL)
and of torchrun's elastic agent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from airvisor.stacks import find_py_spy

HERE = Path(__file__).resolve().parent
SCENARIOS = {
    "sleep": ("import time\ndef hang_here():\n    while True:\n        time.sleep(3600)\n"
              "hang_here()\n"),
    "socket_accept": (
        "import socket\ndef serve():\n    s = socket.socket()\n    s.bind(('127.0.0.1', 0))\n"
        "    s.listen()\n    s.accept()\nserve()\n"),
    "queue_get": "import queue\ndef consume(q):\n    return q.get()\nconsume(queue.Queue())\n",
    "event_wait": ("import threading\ndef wait_for_go(e):\n    e.wait()\n"
                   "wait_for_go(threading.Event())\n"),
    "asyncio_idle": ("import asyncio\nasync def main():\n    await asyncio.Event().wait()\n"
                     "asyncio.run(main())\n"),
    "child_wait": ("import subprocess\ndef run_child():\n    subprocess.run(['sleep', '3600'])\n"
                   "run_child()\n"),
    "busy": "def spin():\n    n = 0\n    while True:\n        n += 1\nspin()\n",
}


def record(name: str, source: str, native: bool) -> None:
    script = HERE / f"_{name}.py"
    script.write_text(source)
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        time.sleep(1.0)
        argv = [find_py_spy() or "py-spy", "dump", "--pid", str(proc.pid), "--json"]
        out = subprocess.run(argv + (["--native"] if native else []), capture_output=True,
                             text=True, check=True).stdout
    finally:
        proc.kill()
        proc.wait()
        script.unlink()
    threads = [t for t in json.loads(out) if t["os_thread_id"] == proc.pid]
    suffix = "_native" if native else ""
    (HERE / f"{name}{suffix}.json").write_text(json.dumps(threads, indent=1) + "\n")


if __name__ == "__main__":
    for scenario, text in SCENARIOS.items():
        record(scenario, text, native=False)
        record(scenario, text, native=True)
