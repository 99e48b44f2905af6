"""air_mlgym: 8 episodes through each verifiers API (issue 12: "the v1 path took 95 s for 8
episodes where the 0.3 path took 16 s").

    .venv/bin/python bench/air_mlgym_v1_path.py [--episodes 8]

Each episode: `ls`, `cat strategy.py`, `submit` on the fixture battleOfSexes task (a cheap
evaluation), scripted model replies from a local OpenAI-compatible stand-in, one container of
the task image. Needs Docker, the task image (tests/images/build_mlgym_task_image.sh) and the
test venvs (envs/air_mlgym/scripts/make_test_venvs.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "envs" / "drivers"))

from driving import drive  # noqa: E402

IMAGE = os.environ.get("AIR_MLGYM_TASK_IMAGE", "airvisor-test/mlgym-task:latest")
REPLIES = ["```bash\nls\n```", "```bash\ncat strategy.py\n```", "submit"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=8)
    opts = parser.parse_args()
    client = docker.from_env()
    name = f"air-mlgym-v1-bench-{uuid.uuid4().hex[:6]}"
    client.containers.run(
        IMAGE, ["/bin/bash", "-l"], name=name, detach=True, stdin_open=True, user="agent",
        working_dir="/home/agent", network_mode="none",
    )  # fmt: skip
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()}")
    try:
        for kind in ("vf03", "vf04"):
            tmp = Path(tempfile.mkdtemp(prefix=f"air-mlgym-{kind}-"))
            args = {
                "mlgym_path": str(REPO / "tests" / "fixtures" / "mlgym"),
                "container_names": [name], "lock_dir": str(tmp / "locks"),
                "trajectory_dir": str(tmp / "trajectories"), "max_turns": 5,
                "num_examples": 1, "short_timeout": 20,
                "tasks" if kind == "vf04" else "task": "battleOfSexes",
            }  # fmt: skip
            episodes = [{"task_id": "battleOfSexes", "replies": REPLIES}] * opts.episodes
            began = time.monotonic()
            drive(kind, tmp, {"env_args": args, "episodes": episodes})
            total = time.monotonic() - began
            spans = []
            for path in sorted((tmp / "trajectories").glob("*.json")):
                saved = json.loads(path.read_text())
                spans.append(saved["ended_at"] - saved["started_at"])
            print(
                f"{kind}: {opts.episodes} episodes in {total:.1f} s (driver process included); "
                f"per episode median {statistics.median(spans):.2f} s"
            )
    finally:
        client.containers.get(name).remove(force=True)


if __name__ == "__main__":
    main()
