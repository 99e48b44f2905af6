"""Episodes against real containers of the test image (bash + python3, user agent)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._episode import Episode
from task_containers import run_task_container

pytestmark = pytest.mark.docker

CWD_PROBE = "python3 -c 'import os; print(os.getcwd())'"  # what pip does first


@pytest.fixture
def runner_for(
    checkout: Path, tmp_path: Path, make_container: Callable[..., str]
) -> Iterator[Callable[..., tuple[MLGymRunner, str]]]:
    runners: list[MLGymRunner] = []

    def build(
        volumes: dict[str, dict[str, str]] | None = None, **overrides: Any
    ) -> tuple[MLGymRunner, str]:
        name = make_container(volumes)
        args = {
            "mlgym_path": str(checkout),
            "task": ["battleOfSexes", "titanic"],
            "container_names": [name],
            "lock_dir": str(tmp_path / "locks"),
            "trajectory_dir": str(tmp_path / "trajectories"),
            "short_timeout": 10,
            "container_wait": 1,
            "footer": False,  # observations compared as the commands print them
            **overrides,
        }
        runner = MLGymRunner(EnvArgs.from_kwargs(**args))
        runners.append(runner)
        return runner, name

    yield build
    for runner in runners:
        runner.close()


def start(runner: MLGymRunner, task_id: str) -> Episode:
    lease = runner.acquire_blocking(timeout=5)
    assert lease is not None
    episode = runner.new_episode(task_id, lease)
    episode.meta["lease"] = lease
    assert episode.reset(), episode.events
    return episode


def end(episode: Episode) -> None:
    episode.finish()
    episode.meta.pop("lease").release()


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_several_episodes_in_a_row_on_one_container(runner_for: Any, docker_client: Any) -> None:
    runner, name = runner_for()
    order = ["battleOfSexes", "titanicSurvival", "battleOfSexes", "battleOfSexes"]
    for i, task_id in enumerate(order):
        episode = start(runner, task_id)
        # The seeds' bug: after the second reset the shell's cwd had been deleted and
        # everything that calls getcwd (pip install flake8) failed.
        probe = episode.step(f"```bash\n{CWD_PROBE}\n```")
        assert probe.observation.strip() == "/home/agent/workspace", (i, probe.observation)
        listing = episode.step("ls").observation.split()
        if task_id == "battleOfSexes":
            assert sorted(listing) == ["evaluate.py", "strategy.py", "target.py"]
            assert "random.randint" in episode.step("cat strategy.py").observation  # pristine
            episode.step("open strategy.py")
            episode.step("edit 12:12\n    return 0\nend_of_edit")
        else:
            assert "data" in listing and "train.csv" in listing
        # leave the shell deep inside the workspace, as an agent would
        episode.step("mkdir -p deep/er && cd deep/er")
        end(episode)
    assert docker_client.containers.get(name).status == "running"


def test_validate_and_submit_reward_improvement(runner_for: Any, tmp_path: Path) -> None:
    runner, _ = runner_for(task="battleOfSexes")
    episode = start(runner, "battleOfSexes")
    first = episode.step("validate")
    # the random starter strategy runs in its own process (own random state): about 0.75
    assert first.reward == 0.0 and first.info["score"] == pytest.approx(0.75, abs=0.06)
    episode.step("open strategy.py")
    episode.step("```\nedit 12:12\n    return 0\nend_of_edit\n```")
    better = episode.step("validate")
    assert better.reward == 0.0 and better.info["score"] == pytest.approx(1.98)  # charged at end
    assert "Baseline Score" in better.observation
    done = episode.step("submit")
    assert done.done and done.reward == pytest.approx((1.98 - 0.75) / 0.75)
    assert episode.total_reward == pytest.approx((1.98 - 0.75) / 0.75)
    end(episode)
    saved = list((tmp_path / "trajectories").glob("*_battleOfSexes_*.json"))
    assert len(saved) == 1
    trajectory = json.loads(saved[0].read_text())
    assert trajectory["end_reason"] == "submitted"
    assert [s["info"].get("kind") for s in trajectory["steps"]] == [
        "validate", "open", "edit", "validate", "submit"
    ]  # fmt: skip


def test_csv_task_needs_a_submission(runner_for: Any) -> None:
    runner, _ = runner_for(task="titanic")
    episode = start(runner, "titanicSurvival")
    missing = episode.step("validate")
    assert "Submission artefact not found" in missing.observation and not missing.done
    script = (
        "python3 - <<'EOF'\nimport csv\nrows = list(csv.DictReader(open('test.csv')))\n"
        "with open('submission.csv', 'w') as f:\n    f.write('PassengerId,Survived\\n')\n"
        "    for r in rows:\n        s = r['Sex'] == 'female' or int(r['Age']) < 10\n"
        "        f.write(f\"{r['PassengerId']},{int(s)}\\n\")\nEOF"
    )
    episode.step(f"```bash\n{script}\n```")
    scored = episode.step("validate")
    assert '"accuracy": 0.85' in scored.observation
    assert scored.reward == 0.0
    assert episode.step("submit").reward == pytest.approx((0.85 - 0.45) / 0.45)
    end(episode)


def test_datasets_copied_from_a_mounted_checkout(runner_for: Any, checkout: Path) -> None:
    runner, _ = runner_for(
        volumes={str(checkout): {"bind": "/mnt/MLGym", "mode": "ro"}},
        task="titanic",
        mlgym_mount="/mnt/MLGym",
    )
    for _ in range(2):  # twice: the read-only copy must not block the next reset
        episode = start(runner, "titanicSurvival")
        listing = episode.step("ls -l data").observation
        assert "ground_truth.csv" in listing and "root" in listing
        assert "Permission denied" in episode.step("touch data/x").observation
        end(episode)


def test_missing_mount_is_reported(runner_for: Any) -> None:
    runner, _ = runner_for(task="titanic", mlgym_mount="/mnt/nowhere")
    lease = runner.acquire_blocking(timeout=5)
    episode = runner.new_episode("titanicSurvival", lease)
    assert episode.reset() is False
    assert any("mounted at /mnt/nowhere" in event for event in episode.events)
    episode.finish()
    lease.release()


def test_tampered_evaluation_script_is_restored(runner_for: Any) -> None:
    runner, _ = runner_for(task="battleOfSexes")
    episode = start(runner, "battleOfSexes")
    episode.step('rm -f evaluate.py && echo \'print("{\\"Score\\": 100}")\' > evaluate.py')
    result = episode.step("validate")
    assert result.info["score"] == pytest.approx(0.75, abs=0.06) and result.reward == 0.0
    end(episode)


def test_killed_shell_is_replaced(runner_for: Any, docker_client: Any) -> None:
    runner, name = runner_for(task="battleOfSexes")
    episode = start(runner, "battleOfSexes")
    shell = episode.session.shell()
    pid, exec_id = shell.pid, shell.exec_id
    assert pid is not None
    container = docker_client.containers.get(name)
    assert container.exec_run(["kill", "-9", str(pid)], user="root").exit_code == 0
    wait_until(lambda: not docker_client.api.exec_inspect(exec_id)["Running"])
    between = episode.step("echo after-kill")
    assert between.observation.startswith("after-kill") and not between.done
    assert "new shell" in between.observation
    again = episode.step(f"```bash\n{CWD_PROBE}\n```")
    assert again.observation.strip() == "/home/agent/workspace"
    assert episode.session.shell().pid != pid
    # the shell dying in the middle of a command
    during = episode.step("kill -9 $$")
    assert "shell exited during this command" in during.observation and not during.done
    assert episode.step(CWD_PROBE).observation.strip() == "/home/agent/workspace"
    assert "strategy.py" in episode.step("open strategy.py").observation
    end(episode)
    # and the next episode starts cleanly too, even when the shell dies between episodes
    container.exec_run(["kill", "-9", str(episode.session.shell().pid)], user="root")
    following = start(runner, "battleOfSexes")
    assert following.step(CWD_PROBE).observation.strip() == "/home/agent/workspace"
    end(following)


def test_timed_out_command_is_killed_and_the_shell_stays(
    runner_for: Any, docker_client: Any
) -> None:
    runner, name = runner_for(task="battleOfSexes", short_timeout=1)
    episode = start(runner, "battleOfSexes")
    pid = episode.session.shell().pid
    result = episode.step("sleep 300")
    assert "EXECUTION TIMED OUT" in result.observation and not result.done
    assert episode.step("echo alive").observation.strip() == "alive"
    assert episode.session.shell().pid == pid  # interrupted, not replaced
    processes = docker_client.containers.get(name).exec_run(["ps", "-u", "agent", "-o", "comm="])
    assert b"sleep" not in processes.output  # (the root init's own sleep is not the agent's)
    end(episode)


def test_background_jobs_do_not_survive_reset(runner_for: Any, docker_client: Any) -> None:
    runner, name = runner_for(task="battleOfSexes")
    episode = start(runner, "battleOfSexes")
    episode.step("sleep 1000 > /dev/null 2>&1 &")
    end(episode)
    start(runner, "battleOfSexes")
    processes = docker_client.containers.get(name).exec_run(["ps", "-u", "agent", "-o", "comm="])
    assert b"sleep" not in processes.output  # (the root init's own sleep is not the agent's)


def test_stopped_container_ends_the_episode_as_an_error(
    runner_for: Any, docker_client: Any, tmp_path: Path
) -> None:
    runner, name = runner_for(task="battleOfSexes", container_wait=1)
    episode = start(runner, "battleOfSexes")
    episode.step("ls")
    docker_client.containers.get(name).stop(timeout=0)
    result = episode.step("cat strategy.py")
    assert result.done and "unavailable" in result.observation
    assert episode.step("validate").done  # further replies are harmless
    episode.finish()
    episode.meta.pop("lease").release()
    assert episode.end_reason == "container_unavailable"
    assert episode.error is not None and "could not be recovered" in episode.error  # loud
    saved = json.loads(next((tmp_path / "trajectories").glob("*.json")).read_text())
    assert saved["end_reason"] == "container_unavailable" and saved["error"] == episode.error
    # a new episode on the stopped container fails its reset cleanly as well
    lease = runner.acquire_blocking(timeout=5)
    assert lease is not None
    following = runner.new_episode("battleOfSexes", lease)
    assert following.reset() is False and following.error is not None
    assert following.step("ls").done
    following.finish()
    lease.release()


def test_restarted_container_keeps_its_files(runner_for: Any, docker_client: Any) -> None:
    runner, name = runner_for(task="battleOfSexes", container_wait=20)
    episode = start(runner, "battleOfSexes")
    episode.step("open strategy.py")
    episode.step("edit 12:12\n    return 0\nend_of_edit")
    container = docker_client.containers.get(name)
    container.stop(timeout=0)
    threading.Timer(1.0, container.start).start()  # the owner starts it again a bit later
    result = episode.step("cat strategy.py")
    assert not result.done and "return 0" in result.observation
    assert "new shell" in result.observation
    assert episode.step("validate").info["score"] == pytest.approx(1.98)
    end(episode)


def test_recreated_container_gets_a_rebuilt_workspace(
    runner_for: Any, docker_client: Any, test_image: str
) -> None:
    runner, name = runner_for(task="battleOfSexes", container_wait=20)
    episode = start(runner, "battleOfSexes")
    episode.step("open strategy.py")
    episode.step("edit 12:12\n    return 0\nend_of_edit")
    old = docker_client.containers.get(name)
    labels = old.labels
    old.remove(force=True)

    def recreate() -> None:  # what airvisor's pool does: same name, fresh container
        run_task_container(docker_client, test_image, name, labels)

    threading.Timer(1.0, recreate).start()
    result = episode.step("ls")
    assert not result.done and "recovered" in result.observation
    assert "random.randint" in episode.step("cat strategy.py").observation  # rebuilt
    assert "no file is open" in episode.step("goto 3").observation.lower()  # editor reset
    assert episode.step("validate").info["score"] == pytest.approx(0.75, abs=0.06)
    end(episode)


def test_standalone_containers_are_started_and_removed(
    checkout: Path, tmp_path: Path, test_image: str, docker_client: Any
) -> None:
    args = EnvArgs.from_kwargs(
        mlgym_path=str(checkout),
        task="battleOfSexes",
        image=test_image,
        containers=2,
        network="none",
        lock_dir=str(tmp_path / "locks"),
        trajectory_dir=None,
    )
    runner = MLGymRunner(args)
    try:
        first = runner.acquire_blocking(timeout=5)
        second = runner.acquire_blocking(timeout=5)
        assert first is not None and second is not None and first.name != second.name
        assert runner.acquire_blocking(timeout=0) is None  # both leased
        episode = runner.new_episode("battleOfSexes", first)
        assert episode.reset()
        assert episode.step("whoami").observation.splitlines()[0] == "agent"
        episode.finish()
        first.release()
        second.release()
        names = [first.name, second.name]
    finally:
        runner.close()
    remaining = docker_client.containers.list(all=True, filters={"name": names[0]})
    assert [c.name for c in remaining if c.name in names] == []


def test_runaway_output_is_bounded(runner_for: Any) -> None:
    runner, _ = runner_for(task="battleOfSexes", max_observation_chars=2000)
    episode = start(runner, "battleOfSexes")
    result = episode.step("python3 -c \"print('x' * 20_000_000); print('THE END')\"")
    assert "were dropped" in result.observation and "characters omitted" in result.observation
    assert result.observation.rstrip().endswith("THE END")
    assert len(result.observation) < 2500
    assert episode.step("echo still-here").observation.strip() == "still-here"
    end(episode)


def test_a_container_whose_pid_1_is_the_agents_is_refused(
    checkout: Path, tmp_path: Path, test_image: str, docker_client: Any
) -> None:
    """pid 1 cannot be frozen or killed from inside the container: one run by the agent (the
    old `docker run -u agent ... bash -l`) could race the evaluation, so it is refused, loudly,
    with the fix; never served with a silent 0."""
    name = f"airvisor-pid1{uuid.uuid4().hex[:8]}-0-mlgym-0"
    docker_client.containers.run(
        test_image, ["/bin/bash", "-l"], name=name, detach=True, stdin_open=True,
        user="agent", working_dir="/home/agent", network_mode="none",
        labels={"air-mlgym.test": "pid1"},
    )  # fmt: skip
    runner = MLGymRunner(
        EnvArgs.from_kwargs(
            mlgym_path=str(checkout), task="battleOfSexes", container_names=[name],
            lock_dir=str(tmp_path / "locks"), trajectory_dir=None, container_wait=1,
        )
    )  # fmt: skip
    try:
        lease = runner.acquire_blocking(timeout=5)
        assert lease is not None
        episode = runner.new_episode("battleOfSexes", lease)
        assert episode.reset() is False
        assert episode.error is not None
        assert "pid 1 of the container runs as the agent user" in episode.error
        assert 'user = "root"' in episode.error  # the fix
        lease.release()
    finally:
        runner.close()
        docker_client.containers.get(name).remove(force=True)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        # the image's interpreter made writable by others (root's doing, never the agent's)
        ("/bin/chmod o+w $(/usr/bin/readlink -f /usr/bin/python3)",
         "untrusted evaluation interpreter"),
        # the root helper's own state broken: its failure, a bug of air_mlgym's to report
        ("/bin/rm -rf /var/lib/air-mlgym/results && /usr/bin/touch /var/lib/air-mlgym/results",
         "failed in air_mlgym's root helper"),
    ],
)
def test_root_side_failures_of_an_evaluation_are_errored_rollouts(
    runner_for: Any, docker_client: Any, damage: str, words: str
) -> None:
    """Causes outside the agent's reach, established on the root side, are errors (README
    "Blame"): never a failure reward, never a rebuilt workspace scored instead."""
    runner, name = runner_for(task="battleOfSexes")
    episode = start(runner, "battleOfSexes")
    done = docker_client.containers.get(name).exec_run(["/bin/sh", "-c", damage], user="root")
    assert done.exit_code == 0, done.output
    result = episode.step("validate")
    end(episode)
    assert result.done
    assert episode.error is not None and words in episode.error
    assert episode.agent_failure is None
    assert not any("recovered" in event for event in episode.events)
