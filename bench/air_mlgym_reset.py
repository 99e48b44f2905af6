"""air_mlgym reset benchmark (issue 12): three ways to give an episode the pristine container.

    .venv/bin/python bench/air_mlgym_reset.py [--episodes 30] [--home-files 0] [--recreates 5]

- snapshot diff (what air_mlgym does): kill the agent's processes, compare the home with the
  manifest of the last restore (inode + ctime, which the agent cannot forge), put back only what
  changed, rebuild the workspace from the task template, start a fresh shell;
- full copy: kill the agent's processes, delete the home and copy the snapshot back (`cp -a`);
- recreate: remove the container and start a new one from the image, then the first reset
  (helper upload, home snapshot, template upload).
Each episode damages the home (files added, a dotfile changed, `chmod 000 ~`). `--home-files N`
first puts N small files in the home (a conda installation in the home, as in MLGym's own
image, is ~40,000). Needs Docker and the task image (tests/images/build_mlgym_task_image.sh);
the real MLGym checkout is read from $AIR_MLGYM_CHECKOUT or ../shared/third_party/MLGym.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "envs" / "air_mlgym"))

from air_mlgym._containers import INIT_COMMAND  # noqa: E402
from air_mlgym._core import EnvArgs, MLGymRunner  # noqa: E402

IMAGE = os.environ.get("AIR_MLGYM_TASK_IMAGE", "airvisor-test/mlgym-task:latest")
CHECKOUT = Path(
    os.environ.get("AIR_MLGYM_CHECKOUT") or REPO.parent / "shared" / "third_party" / "MLGym"
)
DAMAGE = (
    "```bash\nmkdir -p ~/.cache/x && seq 100 | xargs -I{} touch ~/.cache/x/{}\n"
    "echo 'alias ls=false' >> ~/.bashrc; chmod 000 ~\n```"
)


def checkout_copy() -> Path:
    """battleOfSexes from the real checkout (no dataset needed)."""
    root = Path(tempfile.mkdtemp(prefix="air-mlgym-bench-"))
    (root / "configs" / "tasks").mkdir(parents=True)
    shutil.copyfile(
        CHECKOUT / "configs/tasks/battleOfSexes.yaml", root / "configs/tasks/battleOfSexes.yaml"
    )
    shutil.copytree(CHECKOUT / "data/battleOfSexes", root / "data/battleOfSexes")
    return root


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.0f} ms, "
        f"p90 {sorted(values)[int(len(values) * 0.9) - 1] * 1000:.0f} ms, "
        f"max {max(values) * 1000:.0f} ms (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--home-files", type=int, default=0)
    parser.add_argument("--recreates", type=int, default=5)
    opts = parser.parse_args()
    client = docker.from_env()
    checkout = checkout_copy()
    name = f"air-mlgym-bench-{uuid.uuid4().hex[:6]}"
    locks = Path(tempfile.mkdtemp(prefix="air-mlgym-bench-locks-"))

    def start() -> None:
        # As the environment starts its own (OwnedContainers): root's init as pid 1, the
        # agent's shells through exec (a container whose pid 1 is the agent's is refused).
        container = client.containers.run(
            IMAGE, list(INIT_COMMAND), name=name, detach=True, stdin_open=True, user="root",
            working_dir="/home/agent", network_mode="none",
        )  # fmt: skip
        if opts.home_files:
            script = (
                f"mkdir -p ~/bulk && cd ~/bulk && for d in $(seq {opts.home_files // 100 + 1});"
                " do mkdir $d; (cd $d && seq 100 | xargs touch); done"
            )
            container.exec_run(["bash", "-c", script], user="agent")

    def runner() -> MLGymRunner:
        return MLGymRunner(
            EnvArgs.from_kwargs(
                mlgym_path=str(checkout), task="battleOfSexes", container_names=[name],
                lock_dir=str(locks), trajectory_dir=None, evaluate_on_exit=False,
            )
        )  # fmt: skip

    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()}, "
        f"python {platform.python_version()}, image {IMAGE}, home files {opts.home_files}"
    )
    start()
    try:
        env = runner()
        lease = env.acquire_blocking(timeout=10)
        assert lease is not None
        resets: list[float] = []
        restores: list[float] = []
        for number in range(opts.episodes + 1):
            episode = env.new_episode("battleOfSexes", lease)
            assert episode.reset(), episode.events
            if number:  # the first reset takes the snapshot
                resets.append(episode.session.last_reset_seconds)
                restores.append(float(episode.session.last_restore.get("seconds", 0.0)))
            episode.step(DAMAGE)
            episode.finish()
        lease.release()
        env.close()
        print(f"snapshot diff: reset (restore + workspace + new shell) {summary(resets)}")
        print(f"snapshot diff: the root helper's restore alone {summary(restores)}")

        container = client.containers.get(name)
        copies: list[float] = []
        full_copy = (
            "pkill -KILL -u agent; rm -rf /home/agent && cp -a /var/lib/air-mlgym/home "
            "/home/agent && chmod 000 /home/agent/.bashrc"
        )
        for _ in range(opts.episodes):
            began = time.monotonic()
            result = container.exec_run(["bash", "-c", full_copy], user="root")
            copies.append(time.monotonic() - began)
            assert result.exit_code in (0, 1), result.output
        print(f"full copy: kill + rm -rf + cp -a of the home alone {summary(copies)}")

        recreates: list[float] = []
        for _ in range(opts.recreates):
            began = time.monotonic()
            client.containers.get(name).remove(force=True)
            start()
            env = runner()
            lease = env.acquire_blocking(timeout=10)
            assert lease is not None
            episode = env.new_episode("battleOfSexes", lease)
            assert episode.reset(), episode.events
            recreates.append(time.monotonic() - began)
            episode.finish()
            lease.release()
            env.close()
        print(f"recreate: rm -f + run + first reset {summary(recreates)}")
    finally:
        client.containers.get(name).remove(force=True)
        shutil.rmtree(checkout, ignore_errors=True)
        shutil.rmtree(locks, ignore_errors=True)


if __name__ == "__main__":
    main()
