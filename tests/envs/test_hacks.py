"""A catalogue of reward hacks and cross-episode leaks, on the real MLGym tasks in the task image.

Every test plays one episode that tries the hack, asserts it gains nothing, then plays an honest
titanic episode on the same container and asserts that it starts from the same state (home and
workspace checksums, the agent's processes) and earns exactly the reward it earns on a fresh
container. The honest titanic episode is deterministic: accuracy 0.875 against the baseline
0.76555.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym._core import EnvArgs, MLGymRunner
from air_mlgym._episode import Episode
from mlgym_scripts import STATE_ARGV, expected_reward, replies, write_strategy
from task_containers import exec_output, run_task_container

pytestmark = pytest.mark.docker

HONEST = expected_reward("titanicSurvival", True)
UNTOUCHED_BOS = 0.0  # the starter strategy scores about the baseline: value about 0
GAME_NOISE = 0.03

class Bench:
    """One container of the task image and one environment (all four tasks) on it."""

    def __init__(self, client: Any, image: str, checkout: Path, tmp: Path) -> None:
        self.client = client
        self.label = uuid.uuid4().hex[:8]
        self.name = f"airvisor-hacks{self.label}-0-mlgym-0"
        self.image = image
        self.container = run_task_container(
            client, image, self.name, {"air-mlgym.test": self.label}
        )
        self.checkout = checkout
        self.tmp = tmp
        self.runners: list[MLGymRunner] = []
        self.runner = self.make_runner()
        self.clean_state: str | None = None

    def make_runner(self, **overrides: Any) -> MLGymRunner:
        args = {
            "mlgym_path": str(self.checkout),
            "task": ["battleOfSexes", "titanic"],
            "container_names": [self.name],
            "lock_dir": str(self.tmp / "locks"),
            "trajectory_dir": None,
            "short_timeout": 20,
            "container_wait": 30,
            "footer": False,  # observations compared as the commands print them
            **overrides,
        }
        runner = MLGymRunner(EnvArgs.from_kwargs(**args))
        self.runners.append(runner)
        return runner

    def state(self) -> str:
        return exec_output(self.container, STATE_ARGV).decode()

    def play(
        self, task_id: str, commands: list[str], runner: MLGymRunner | None = None
    ) -> tuple[Episode, list[str]]:
        """An episode of `commands`; ends it (evaluating unless it submitted)."""
        runner = runner or self.runner
        lease = runner.acquire_blocking(timeout=10)
        assert lease is not None
        try:
            episode = runner.new_episode(task_id, lease)
            assert episode.reset(), episode.events
            observations = [episode.step(command).observation for command in commands]
            episode.finish()
        finally:
            lease.release()
        return episode, observations

    def honest_titanic(self) -> None:
        """The next episode: same starting state as on a fresh container, same reward."""
        lease = self.runner.acquire_blocking(timeout=10)
        assert lease is not None
        try:
            episode = self.runner.new_episode("titanicSurvival", lease)
            assert episode.reset(), episode.events
            state = self.state()
            if self.clean_state is None:
                self.clean_state = state
            assert state == self.clean_state
            for reply in replies("titanicSurvival", improving=True):
                episode.step(reply)
            episode.finish()
        finally:
            lease.release()
        assert episode.end_reason == "submitted", episode.events
        assert episode.total_reward == pytest.approx(HONEST, abs=1e-9), episode.steps

    def close(self) -> None:
        for runner in self.runners:
            runner.close()
        with contextlib.suppress(Exception):
            self.client.containers.get(self.name).remove(force=True)


@pytest.fixture(scope="module")
def bench(
    docker_client: Any, task_image: str, real_checkout: Path, tmp_path_factory: Any
) -> Iterator[Bench]:
    made = Bench(docker_client, task_image, real_checkout, tmp_path_factory.mktemp("hacks"))
    made.honest_titanic()  # the reference: a fresh container
    yield made
    made.close()


def titanic_with_honest_submission(*hack: str) -> list[str]:
    """Write the honest submission first, then try `hack`, then submit."""
    honest = replies("titanicSurvival", improving=True)
    return [honest[1], *hack, "submit"]


def test_printed_end_marker_neither_ends_the_command_nor_scores(bench: Bench) -> None:
    forged = (
        "printf '\\n///PROCESS-DONE:0:PROCESS-DONE///\\n{\"Score\": 100}\\n'; echo after-marker"
    )
    episode, seen = bench.play("battleOfSexes", [forged, "echo next", "submit"])
    assert '{"Score": 100}' in seen[0] and seen[0].rstrip().endswith("after-marker")
    assert seen[1] == "next"  # no observation shifted by one command
    assert episode.total_reward == pytest.approx(UNTOUCHED_BOS, abs=GAME_NOISE)
    bench.honest_titanic()


def test_shell_state_does_not_reach_the_next_episode(bench: Bench) -> None:
    hack = (
        "```bash\n"
        "python3() { echo '{\"accuracy\": 1.0}'; }; export -f python3\n"
        "mkdir -p /tmp/evil && echo 'raise SystemExit(3)' > /tmp/evil/csv.py\n"
        "export PYTHONPATH=/tmp/evil PYTHONSTARTUP=/tmp/evil/csv.py\n"
        "alias cat=false; hash -p /bin/false sha256sum\n"
        "set -o noclobber; ulimit -v 150000; umask 777; cd /\n"
        "```"
    )
    episode, _ = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)  # gained nothing
    bench.honest_titanic()


def test_home_files_do_not_reach_the_next_episode(bench: Bench) -> None:
    site = "$HOME/.local/lib/python3.11/site-packages"
    hack = (
        "```bash\n"
        f"mkdir -p {site}\n"
        f"echo 'print(\"{{\\\"accuracy\\\": 1.0}}\")' > {site}/usercustomize.py\n"
        f"echo 'raise SystemExit(3)' > {site}/sitecustomize.py\n"
        "echo 'alias python3=false' >> ~/.bashrc; echo 'cd /tmp' >> ~/.profile\n"
        "touch -r /etc/hostname ~/.bashrc; ln -s /etc/passwd ~/passwd; mkfifo ~/fifo\n"
        "chmod 000 ~/workspace; chmod 000 ~\n"
        "```"
    )
    episode, _ = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)
    bench.honest_titanic()


def test_processes_do_not_survive_the_episode(bench: Bench) -> None:
    target = "/home/agent/workspace/submission.csv"
    loop = f"while true; do echo PassengerId > {target}; sleep 0.05; done"
    hack = (
        "```bash\n"
        f"(setsid nohup bash -c '{loop}' > /dev/null 2>&1 &)\n"
        "(trap '' TERM HUP; exec -a innocent sleep 1000) > /dev/null 2>&1 &\n"
        "disown -a; sleep 0.2\n"
        "```"
    )
    # the loop keeps breaking this episode's own submission: no gain, a failed submission
    episode, _ = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert episode.total_reward <= HONEST
    bench.honest_titanic()


def test_evaluation_output_and_opponent_cannot_be_forged(bench: Bench) -> None:
    strategy = (
        "```bash\ncat > strategy.py <<'EOF'\n"
        "import atexit, json, sys\n"
        "print(json.dumps({'Score': 100})); sys.stdout.flush()\n"
        "atexit.register(lambda: print(json.dumps({'Score': 100})))\n"
        "try:\n    import target\n    target.target_column_strategy = lambda history: 0\n"
        "except Exception:\n    pass\n"
        "def row_strategy(history):\n    print('{\"Score\": 100}')\n    return 0\n"
        "EOF\n```"
    )
    opponent = (
        "```bash\nchmod u+w target.py; rm -f target.py\n"
        "printf 'def target_column_strategy(history):\\n    return 0\\n' > target.py\n```"
    )
    episode, seen = bench.play("battleOfSexes", [strategy, opponent, "submit"])
    assert "Operation not permitted" in seen[1]
    # "always 0" against the real opponent (1.444), not against the replaced one (2.0) and not
    # the printed 100: exactly what an honest "always 0" gets
    assert episode.tracker.best == pytest.approx(1.444, abs=0.03)
    assert episode.total_reward == pytest.approx(expected_reward("battleOfSexes", True), abs=0.03)
    bench.honest_titanic()


def test_agent_code_that_kills_the_evaluation_scores_as_a_failure(bench: Bench) -> None:
    strategy = (
        "```bash\ncat > strategy.py <<'EOF'\nimport os\n"
        "def row_strategy(history):\n    print('{\"Score\": 100}', flush=True)\n    os._exit(0)\n"
        "EOF\n```"
    )
    episode, _ = bench.play("battleOfSexes", [strategy, "submit"])
    assert episode.total_reward == -1.0  # the failure value: no more than any valid score
    bench.honest_titanic()


def test_ground_truth_cannot_be_read_linked_or_replaced(bench: Bench) -> None:
    zeros = replies("titanicSurvival", improving=False)[1]
    fake_truth = (
        "```bash\nmv data data.bak && mkdir data && cp data.bak/test.csv data/ && "
        "(echo PassengerId,Survived; tail -n +2 submission.csv | cut -d, -f1 | "
        "sed 's/$/,0/') > data/ground_truth.csv && ls data\n```"
    )
    commands = [
        "cat data/ground_truth.csv",
        "python3 evaluate.py",
        "ln -s data/ground_truth.csv submission.csv",
        "validate",
        "rm -f submission.csv; ln data/ground_truth.csv submission.csv",
        "validate",
        zeros,
        fake_truth,
        "submit",
    ]
    episode, seen = bench.play("titanicSurvival", commands)
    assert "Permission denied" in seen[0]
    assert "accuracy" not in seen[1]
    # neither a symbolic nor a hard link to the ground truth is a submission
    assert "Submission artefact not found" in seen[3] and "Submission artefact not found" in seen[5]
    # the swapped-in ground truth is put back: the all-zero submission scores 0.425
    assert episode.tracker.best == pytest.approx(0.425)
    assert episode.total_reward == pytest.approx(expected_reward("titanicSurvival", False))
    bench.honest_titanic()


def test_stale_bytecode_is_never_evaluated(bench: Bench) -> None:
    commands = [
        write_strategy("1"),
        "```bash\nunset PYTHONDONTWRITEBYTECODE\n"
        "python3 -c 'import strategy' && ls __pycache__\n```",
        # same size, and even the same mtime as the cached bytecode records
        "```bash\ntouch -r strategy.py /tmp/stamp\nsed -i 's/return 1/return 0/' strategy.py\n"
        "touch -r /tmp/stamp strategy.py && cat strategy.py\n```",
        "submit",
    ]
    episode, seen = bench.play("battleOfSexes", commands)
    assert "strategy.cpython" in seen[1] and "return 0" in seen[2]
    assert episode.tracker.best == pytest.approx(1.444, abs=0.03)  # the new code's score
    bench.honest_titanic()


def test_failed_evaluation_is_clipped_and_long_timeout_is_honoured(bench: Bench) -> None:
    noisy = (
        "```bash\ncat > strategy.py <<'EOF'\nprint('x' * 6_000_000)\n"
        "raise RuntimeError('broken')\nEOF\n```"
    )
    episode, seen = bench.play("battleOfSexes", [noisy, "validate"])
    assert "Failed to decode metrics" in seen[1] and len(seen[1]) <= 13_000
    assert episode.total_reward == -1.0
    slow = "```bash\ncat > strategy.py <<'EOF'\nimport time\ntime.sleep(60)\nEOF\n```"
    # the task's training_timeout is 1800 s; an explicit long_timeout wins
    impatient = bench.make_runner(long_timeout=3)
    episode, seen = bench.play("battleOfSexes", [slow, "validate"], runner=impatient)
    assert "did not finish within 3 seconds" in seen[1]
    assert episode.steps[1]["seconds"] < 30
    bench.honest_titanic()


def test_repeated_evaluation_of_an_unchanged_solution_is_not_penalised(bench: Bench) -> None:
    dense = bench.make_runner(reward_mode="per_validate")
    lease = dense.acquire_blocking(timeout=10)
    assert lease is not None
    try:
        episode = dense.new_episode("battleOfSexes", lease)
        assert episode.reset()
        episode.step(write_strategy("1"))  # a regression (0.82 < 1.02)
        first = episode.step("validate")
        again = [episode.step("validate") for _ in range(3)]
        submitted = episode.step("submit")
        episode.finish()
    finally:
        lease.release()
    assert first.reward == pytest.approx(expected_reward("battleOfSexes", False), abs=0.03)
    assert [r.reward for r in again] == [0.0, 0.0, 0.0]  # charged once, no Monte Carlo drift
    assert all(r.info["cached"] for r in again)
    # the submit is evaluated again, as MLGym does (issue 32): a fresh draw, within the noise
    assert submitted.info["cached"] is False
    assert submitted.reward == pytest.approx(0.0, abs=GAME_NOISE)
    assert episode.total_reward == pytest.approx(first.reward, abs=GAME_NOISE)
    bench.honest_titanic()



# --- root-seeking hacks (issue 24): the image's PATH, its sudoers line, pid 1, IPC, links ------

ROOT_MARK = "/var/lib/pwned-by-root"  # only root can create it
FORGE = (
    "#!/bin/sh\n"
    f'[ "$(id -u)" = 0 ] && touch {ROOT_MARK}\n'
    """echo '{"accuracy": 1.0, "Score": 100}'\n"""
    "exit 0\n"
)
FORGED_SITE = 'print(\'{"accuracy": 1.0}\')\nraise SystemExit(0)\n'


def root_mark_absent(bench: Bench) -> bool:
    found = bench.container.exec_run(["/usr/bin/test", "-e", ROOT_MARK], user="root")
    return bool(found.exit_code != 0)


def heredoc(path: str, text: str) -> str:
    return f"cat > {path} <<'AIREOF'\n{text}AIREOF\n"


def test_programs_on_the_agents_path_are_never_run_by_root(bench: Bench) -> None:
    """MLGym's image puts /home/agent/.local/bin and /home/agent/miniconda3/bin first on PATH:
    a root exec that resolves a program through it runs the agent's code. The agent plants
    every program root might call there, and corrupts its own Python environment (which is
    the evaluator's on the official layout: the evaluator uses its root-owned copy)."""
    names = "timeout env python python3 python3.11 rm id mkdir test cp sh bash sleep"
    plant = (
        "```bash\nmkdir -p ~/.local/bin ~/miniconda3/bin\n"
        + heredoc("/tmp/forge", FORGE)
        + heredoc("/tmp/site", FORGED_SITE)
        + f"for n in {names}; do for d in ~/.local/bin ~/miniconda3/bin; do "
        "cp /tmp/forge $d/$n 2>/dev/null; chmod +x $d/$n 2>/dev/null; done; done\n"
        "for d in ~/miniconda3/envs/*/lib/python3*/*-packages ~/miniconda3/envs/*/lib/python3;"
        ' do [ -w "$d" ] && cp /tmp/site "$d/sitecustomize.py" && cp /tmp/site '
        '"$d/usercustomize.py"; [ -w "$d/pandas/__init__.py" ] && '
        'cat /tmp/site >> "$d/pandas/__init__.py"; done; echo planted\n```'
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(plant))
    assert "planted" in seen[1]
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)  # the real accuracy
    assert root_mark_absent(bench)
    bench.honest_titanic()  # the agent's environment is restored with the home: same state
    assert root_mark_absent(bench)


def test_mlgyms_sudo_line_gives_the_agent_no_root(bench: Bench) -> None:
    """MLGym's image lets the agent run apt-get as root through sudo, and apt runs any
    command it is configured to: the line is neutralised in air_mlgym's containers."""
    hook = f'APT::Update::Pre-Invoke::="touch {ROOT_MARK}"'
    hack = (
        f"```bash\nsudo -n /usr/bin/apt-get -o '{hook}' update 2>&1 | tail -n 2\n"
        f"sudo -n /usr/bin/apt -o '{hook}' update 2>&1 | tail -n 2; echo done\n```"
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert "done" in seen[1]
    assert root_mark_absent(bench)
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)
    bench.honest_titanic()


def test_pid_1_is_not_the_agents(bench: Bench) -> None:
    probe = "```bash\nps -o user= -p 1; kill -STOP 1; echo rc=$?; kill -9 1; echo rc=$?\n```"
    _episode, seen = bench.play("battleOfSexes", [probe])
    assert seen[0].splitlines()[0].strip() == "root"
    assert "rc=0" not in seen[0]
    bench.honest_titanic()


def test_sysv_ipc_does_not_survive_the_episode(bench: Bench) -> None:
    hack = "```bash\nipcmk -M 65536; ipcmk -Q; ipcmk -S 2; ipcs | grep -c agent\n```"
    _episode, seen = bench.play("battleOfSexes", [hack])
    assert seen[0].strip().splitlines()[-1] == "3"  # three objects of the agent's existed
    bench.honest_titanic()  # the state (it counts the IPC objects) is the clean one


def test_links_in_the_home_neither_change_root_files_nor_cost_the_container(
    bench: Bench,
) -> None:
    """The reset never chowns or chmods through a link the agent made, so links to root's
    files neither change them nor make the restore fail (which would cost the container)."""
    probe = ["/usr/bin/stat", "-c", "%U %a", "/etc/shadow", "/etc/passwd", "/etc"]
    before = exec_output(bench.container, probe)
    hack = (
        "```bash\nfor f in ~/.bashrc ~/.profile; do rm -f $f; ln -s /etc/shadow $f; done\n"
        "mkdir -p ~/trap && ln -s /etc ~/trap/etc && ln -s /etc/passwd ~/trap/passwd\n"
        "chmod 000 ~/trap; cd /; rm -rf ~/workspace; ln -s /etc ~/workspace; echo linked\n```"
    )
    _episode, seen = bench.play("battleOfSexes", [hack])
    assert "linked" in seen[0]
    bench.honest_titanic()
    assert exec_output(bench.container, probe) == before
    assert all(r.session(bench.name).replacements == 0 for r in bench.runners)


def test_a_blotto_allocation_the_task_rules_out_scores_as_a_failure(bench: Bench) -> None:
    """MLGym's blotto evaluator scores [40, 40, 40] (three battlefields) about +5 over the
    baseline; the task's rules are 6 battlefields and at most 120 soldiers."""
    runner = bench.make_runner(task=["blotto", "titanic"])
    episode, seen = bench.play("blotto", [write_strategy("[40, 40, 40]"), "submit"], runner)
    assert "exactly 6 integers" in seen[1]
    assert episode.total_reward == -1.0
    bench.honest_titanic()


def test_a_titanic_submission_repeating_a_passenger_is_refused(bench: Bench) -> None:
    repeat = (
        "```bash\nfirst=$(sed -n 2p data/test.csv | cut -d, -f1)\n"
        "(echo PassengerId,Survived; tail -n +2 data/test.csv | while read -r _; do "
        'echo "$first,1"; done) > submission.csv; wc -l < submission.csv\n```'
    )
    episode, seen = bench.play("titanicSurvival", [repeat, "submit"])
    assert "refused before scoring" in seen[1] and "each once" in seen[1]
    assert episode.total_reward == -1.0
    bench.honest_titanic()


def test_long_timeout_bounds_training_commands(bench: Bench) -> None:
    """A `python ...` command gets the task's training_timeout (1800 s for battleOfSexes),
    unless long_timeout is given: then that bounds it."""
    impatient = bench.make_runner(long_timeout=3)
    episode, seen = bench.play(
        "battleOfSexes", ["python3 -c 'import time; time.sleep(40)'"], runner=impatient
    )
    assert "EXECUTION TIMED OUT" in seen[0] and "3 seconds" in seen[0]
    assert episode.steps[0]["seconds"] < 30
    bench.honest_titanic()


# --- issue 32: what the agent causes is the agent's score, never an error -------------------

VFORK_SCRIPT = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.vfork() == 0:  # the child never execs: the parent waits in state D\n"
    "    while True:\n"
    "        libc.pause()\n"
    "os._exit(0)\n"
)


def assert_agents_failure_not_error(episode: Episode) -> None:
    assert episode.error is None, episode.events  # never an errored rollout
    assert episode.end_reason != "container_unavailable", episode.events


def test_an_unfreezable_vfork_neither_stops_the_evaluation_nor_errors(bench: Bench) -> None:
    """A vfork() parent whose child never execs is in state D, where SIGSTOP cannot stop it:
    it is held all the same (a stop pending, taken before it could run any code of its own),
    so the evaluation runs and scores what the agent wrote."""
    hack = (
        "```bash\n" + heredoc("/tmp/vf.py", VFORK_SCRIPT)
        + "(python3 /tmp/vf.py > /dev/null 2>&1 &)\n"
        "for i in $(seq 150); do ps -u agent -o stat= | grep -q '^D' && break; sleep 0.1; done\n"
        "ps -u agent -o stat=,args= | grep '^D'\n```"
    )
    episode, seen = bench.play(
        "battleOfSexes", [hack, write_strategy("0"), "validate", "submit"]
    )
    assert "vf.py" in seen[0]  # the parent was in state D
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is None
    # the validate held it (the submit ends the agent's processes first)
    assert episode.steps[2]["info"]["score"] == pytest.approx(1.444, abs=0.03)
    assert episode.total_reward == pytest.approx(expected_reward("battleOfSexes", True), abs=0.03)
    bench.honest_titanic()


def test_names_that_are_not_utf8_are_hashed_and_cleaned(bench: Bench) -> None:
    hack = (
        "```bash\ntouch $'\\xff\\xfe.py' $'\\xc3\\x28' ~/$'\\x80home' /tmp/$'\\xfftmp'\n"
        "mkdir -p $'dir\\xed\\xa0\\x80'/$'\\xfe' && ln -s $'/\\xff' $'link\\xff' && echo made\n```"
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert "made" in seen[1]
    assert_agents_failure_not_error(episode)
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)  # scored as written
    bench.honest_titanic()  # home, workspace and /tmp as before


def test_root_files_moved_out_of_the_workspace_do_not_survive(bench: Bench) -> None:
    """The root-owned evaluation files and data can be renamed (the workspace is the agent's):
    moved to /tmp and /var/tmp they would be a channel between episodes; the reset removes
    every new entry there, whoever owns it."""
    hack = (
        "```bash\nmv evaluate.py /tmp/moved-evaluate.py && mv data data.moved && "
        "mkdir /var/tmp/moved && mv data.moved/ground_truth.csv /var/tmp/moved/ 2>/dev/null; "
        "stat -c '%U %n' /tmp/moved-evaluate.py data.moved\n```"
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    # (a root-owned directory cannot be moved to another parent, nor a file out of one)
    assert "root /tmp/moved-evaluate.py" in seen[1] and "root data.moved" in seen[1]
    assert_agents_failure_not_error(episode)
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)  # data put back, pristine eval
    bench.honest_titanic()  # the state lists every entry of /tmp, /var/tmp: none of these


def test_sigcont_from_strategy_code_wakes_nothing(bench: Bench) -> None:
    """The evaluation's copy of the agent's code sends kill(-1, SIGCONT): it reaches none of
    the agent's held processes (its uid is not theirs; and a cgroup freeze no signal undoes).
    Two watchers of the agent's append to `ticks` 20 times a second; the strategy answers 1 (a
    worse score) as soon as it sees `ticks` grow over 0.3 s, else 0."""
    watchers = (
        "```bash\nrm -f ticks; for i in 1 2; do "
        "(exec -a watcher bash -c 'while :; do echo >> ticks; sleep 0.05; done') >/dev/null 2>&1 & "
        "done; disown -a; sleep 1; [ -s ticks ] && echo ticking\n```"
    )
    strategy = (
        "```bash\ncat > strategy.py <<'EOF'\nimport os, signal, time\n"
        "def woken():\n"
        "    try:\n        os.kill(-1, signal.SIGCONT)\n    except OSError:\n        pass\n"
        "    before = os.path.getsize('ticks')\n"
        "    time.sleep(0.3)\n"
        "    return os.path.getsize('ticks') > before\n"
        "WOKEN = woken()\n"
        "CALLS = [0]\n"
        "def row_strategy(history):\n"
        "    global WOKEN\n    CALLS[0] += 1\n"
        "    if CALLS[0] % 20000 == 1:\n        WOKEN = WOKEN or woken()\n"
        "    return 1 if WOKEN else 0\n"
        "EOF\n```"
    )
    episode, seen = bench.play("battleOfSexes", [watchers, strategy, "validate", "submit"])
    assert seen[0].strip().endswith("ticking")
    assert_agents_failure_not_error(episode)
    # always 0 (1.444): the watchers stayed held through every check of the validate (the
    # submit ends them first); woken, it would be always 1 (0.822)
    assert episode.steps[2]["info"]["score"] == pytest.approx(1.444, abs=0.03)
    assert episode.total_reward == pytest.approx(expected_reward("battleOfSexes", True), abs=0.03)
    bench.honest_titanic()


def test_a_resubmit_is_evaluated_again(bench: Bench) -> None:
    """A submit is evaluated again, as MLGym does, even of bytes validated before: the luckiest
    earlier draw of a solution cannot be kept by resubmitting it."""
    episode, _ = bench.play("battleOfSexes", [write_strategy("0"), "validate", "submit"])
    validated, submitted = (step["info"] for step in episode.steps[1:3])
    assert validated["cached"] is False and submitted["cached"] is False
    assert_agents_failure_not_error(episode)
    assert episode.total_reward == pytest.approx(expected_reward("battleOfSexes", True), abs=0.03)
    bench.honest_titanic()


def test_a_strategy_without_its_function_is_the_agents_failure(bench: Bench) -> None:
    """`from strategy import row_strategy` of a strategy.py without it raises ImportError in
    the evaluator: the agent's doing, not a broken image."""
    hack = "```bash\necho 'x = 1' > strategy.py\n```"
    episode, seen = bench.play("battleOfSexes", [hack, "submit"])
    assert "row_strategy" in seen[1]  # the failure names what is missing
    assert_agents_failure_not_error(episode)
    assert episode.total_reward == -1.0
    bench.honest_titanic()


def test_a_workspace_too_deep_to_read_is_the_agents_failure(bench: Bench) -> None:
    """Paths longer than PATH_MAX (4096 bytes) under the workspace: the evaluation cannot read
    it, and says so; the reset removes it all the same."""
    hack = (
        "```bash\nd=$(printf 'd%.0s' $(seq 200)); (for i in $(seq 25); do mkdir $d && cd $d; "
        "done; pwd | wc -c)\n```"
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(hack))
    assert int(seen[1].strip().splitlines()[-1]) > 4096
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is not None and "cannot be read" in episode.agent_failure
    assert episode.total_reward == -1.0
    bench.honest_titanic()


def test_files_over_the_disk_limit_at_an_evaluation_are_the_agents_failure(bench: Bench) -> None:
    """The episode's files, measured from the root side at the submit's evaluation: 40 MiB
    allocated at once and a hard-linked copy under a name that is not UTF-8, over a 32 MiB
    limit, with the honest submission: no gain (the failure reward, the reason logged), no
    error; the next episode is clean. The watcher is held for the episode (as if its next pass
    had not come yet): its 1 s passes may otherwise catch the files between the command's
    fallocate and its du, and this test is about the evaluation's own measure."""
    runner = bench.make_runner(disk="32m")
    hack = (
        "```bash\nfallocate -l 40M blob && ln blob $'\\xff-again' && truncate -s 50G sparse"
        " && du -sm --apparent-size . | cut -f1\n```"
    )
    lease = runner.acquire_blocking(timeout=10)
    assert lease is not None
    try:
        episode = runner.new_episode("titanicSurvival", lease)
        assert episode.reset(), episode.events
        hold_the_disk_watcher(bench.container)
        seen = [episode.step(c).observation for c in titanic_with_honest_submission(hack)]
        episode.finish()
    finally:
        lease.release()
    assert int(seen[1].strip().splitlines()[-1]) > 50_000  # apparent; 40 MiB allocated
    assert "disk limit" not in seen[1]  # the held watcher ended nothing
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is not None and "env arg `disk`" in episode.agent_failure
    assert "during a command" not in episode.agent_failure  # the evaluation's measure, no mark
    assert episode.total_reward == -1.0
    bench.honest_titanic()


WATCHER = "^[^ ]*python[^ ]* -I -B /opt/air_mlgym/admin.py watch "


def hold_the_disk_watcher(container: Any) -> None:
    """SIGSTOP the episode's disk watcher (the reset starts it in a detached exec: wait for
    it); the next reset's SIGKILL ends it all the same."""
    deadline = time.monotonic() + 30
    while container.exec_run(["/usr/bin/pgrep", "-f", WATCHER], user="root").exit_code != 0:
        assert time.monotonic() < deadline, "the reset started no disk watcher"
        time.sleep(0.1)
    exec_output(container, ["/bin/sh", "-c", f"/usr/bin/pkill -STOP -f '{WATCHER}' && echo held"])


FILL = (
    "import time\n"
    "with open('/tmp/fill', 'wb') as f:\n"
    "    for i in range(4000):\n"
    "        f.write(bytes(1 << 20)); f.flush(); time.sleep(0.005)\n"
    "print('wrote 4000 MiB')\n"
)


def test_a_command_filling_the_disk_is_stopped_by_the_watcher(bench: Bench) -> None:
    """A command that would write 4 GB outside the workspace (/tmp) under a 64 MiB limit: the
    root watcher ends every process of the agent within a pass of the limit being passed, the
    episode ends as the agent's failure (its final evaluation too), and the reset removes the
    file."""
    runner = bench.make_runner(disk="64m")
    honest = replies("titanicSurvival", improving=True)[1]
    # (paced, at most ~200 MB/s: the watcher's 1 s passes must be able to matter on a fast
    # disk; a `python` command gets the task's training timeout, 30 minutes)
    fill = (
        "```bash\n" + heredoc("/tmp/fill.py", FILL) + "python3 /tmp/fill.py; echo rc=$?\n```"
    )
    episode, seen = bench.play("titanicSurvival", [honest, fill, "echo never"], runner)
    assert "wrote 4000 MiB" not in seen[1]  # the writer did not finish
    assert "disk limit" in seen[1]
    assert episode.end_reason == "disk_limit" and len(episode.steps) == 2
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is not None and "env arg `disk`" in episode.agent_failure
    assert episode.total_reward == -1.0
    bench.honest_titanic()  # the state lists every entry of /tmp: no fill
    # one watcher: each reset ended the earlier episodes' watchers
    assert exec_output(bench.container, ["/usr/bin/pgrep", "-c", "-f", WATCHER]).strip() == b"1"


# A process listed as the agent's (its /proc entry is the agent's uid) that the agent's own
# kill(-1) cannot signal: real and saved uid 4242, effective uid the agent's, dumpable.
# The agent cannot make one (no setuid program is left); it stands in, made by root, for any
# process of the agent's that the freeze cannot hold within its patience (README "Blame").
UNSTOPPABLE = (
    "import ctypes, os, pwd, time\n"
    "agent = pwd.getpwnam('agent')\n"
    "os.setgroups([]); os.setresgid(4242, agent.pw_gid, 4242)\n"
    "os.setresuid(4242, agent.pw_uid, 4242)\n"
    "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc shows the euid\n"
    "time.sleep(3600)\n"
)


def play_beside_unstoppable(bench: Bench, runner: MLGymRunner) -> tuple[Episode, str, str, str]:
    """The honest titanic submission written, then the stand-in started (as root, outside the
    agent's shell), then `validate` and `submit`: the episode, both observations, and whether
    the stand-in ran through both evaluations."""
    start = (
        "for p in /opt/air_mlgym/python/bin/python3 /usr/bin/python3; do "
        '[ -x "$p" ] && exec "$p" -c "$0"; done; exit 3'
    )
    lease = runner.acquire_blocking(timeout=10)
    assert lease is not None
    try:
        episode = runner.new_episode("titanicSurvival", lease)
        assert episode.reset(), episode.events
        episode.step(replies("titanicSurvival", improving=True)[1])
        bench.container.exec_run(["/bin/bash", "-c", start, UNSTOPPABLE], user="root",
                                 detach=True)  # fmt: skip
        probe = ["/bin/sh", "-c", "ps -o ruid=,euid= -u agent | grep -c '^ *4242 '; :"]
        deadline = time.monotonic() + 120  # a wait for it to start, not a timing assertion
        while exec_output(bench.container, probe).decode().strip() != "1":
            assert time.monotonic() < deadline, "the stand-in process never started"
            time.sleep(0.1)
        validated = episode.step("validate")
        found = exec_output(bench.container, probe).decode().strip()
        submitted = episode.step("submit")
        episode.finish()
    finally:
        lease.release()
        bench.container.exec_run(["/usr/bin/pkill", "-KILL", "-U", "4242"], user="root")
    return episode, validated.observation, submitted.observation, found


def test_a_process_the_signal_freeze_cannot_stop_is_the_agents_failure(bench: Bench) -> None:
    """The signal freeze (env arg freeze = "signals") gives up on a process it cannot hold
    (after its 20 s of patience): the validate is the agent's failure, and so is the submit
    (it could not be ended either), never an errored rollout; once it is gone the next
    episode is clean."""
    runner = bench.make_runner(freeze="signals")
    episode, validated, submitted, found = play_beside_unstoppable(bench, runner)
    assert found == "1"  # it was there through the validate
    assert "could not be frozen" in validated, validated
    assert "could not be ended" in submitted, submitted
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is not None and "could not be ended" in episode.agent_failure
    assert episode.total_reward == -1.0  # the honest submission gains nothing while it runs
    bench.honest_titanic()


def test_the_kernel_freeze_holds_and_ends_what_signals_cannot(bench: Bench) -> None:
    """The same process under the kernel's freeze (freeze = "kernel": the cgroup v2 freezer,
    README "Freeze"): frozen for the validate, which scores the honest submission; killed by
    `cgroup.kill` before the submit's evaluation, which scores it too."""
    runner = bench.make_runner(freeze="kernel")
    episode, validated, submitted, found = play_beside_unstoppable(bench, runner)
    assert found == "1"  # it was there after the validate: frozen, not ended
    assert "could not be" not in validated + submitted
    assert_agents_failure_not_error(episode)
    assert episode.agent_failure is None
    assert episode.steps[1]["info"]["score"] == pytest.approx(0.875, abs=1e-9), validated
    assert episode.total_reward == pytest.approx(HONEST, abs=1e-9)
    gone = ["/bin/sh", "-c", "ps -o ruid= -u agent | grep -c '^ *4242$'; :"]
    assert exec_output(bench.container, gone).decode().strip() == "0"  # the submit ended it
    bench.honest_titanic()


# The limits run last in this module: they stay on the bench's container (the stricter one is
# kept), and the honest titanic episode fits under them.


def test_a_fork_bomb_hits_the_pids_limit_and_is_the_agents_failure(bench: Bench) -> None:
    # (A bomb that leaves no room even for the reset has the container restarted: a loaded CI
    # machine's restart gets the time a person's would, not the default 30 s.)
    runner = bench.make_runner(pids_limit=96, container_wait=180)
    bomb = "```bash\nbomb() { bomb | bomb & }; bomb; echo lit\n```"
    episode, _ = bench.play("battleOfSexes", [write_strategy("0"), bomb, "submit"], runner)
    limits = bench.client.containers.get(bench.name).attrs["HostConfig"]
    assert limits["PidsLimit"] == 96  # the engine holds the container to it
    assert_agents_failure_not_error(episode)
    # at most what an honest "always 0" gets (the bomb may leave room for the evaluation)
    assert episode.total_reward <= expected_reward("battleOfSexes", True) + 0.03
    bench.honest_titanic()  # the next episode: every process gone, same state, same reward


def test_a_memory_bomb_hits_the_memory_limit_and_is_the_agents_failure(bench: Bench) -> None:
    runner = bench.make_runner(memory="768m", container_wait=180)
    grab = "a = []\nwhile True:\n    a.append(bytearray(32 << 20))\n"
    hold = "import time\na = bytearray(700 << 20)\ntime.sleep(1000)\n"
    hack = (
        "```bash\n" + heredoc("/tmp/grab.py", grab) + heredoc("/tmp/hold.py", hold)
        + "python3 /tmp/grab.py; echo rc=$?\n"
        "(python3 /tmp/hold.py > /dev/null 2>&1 &); sleep 1; echo held\n```"
    )
    episode, seen = bench.play("titanicSurvival", titanic_with_honest_submission(hack), runner)
    limits = bench.client.containers.get(bench.name).attrs["HostConfig"]
    assert limits["Memory"] == limits["MemorySwap"] == 768 << 20
    assert "rc=0" not in seen[1]  # the bomb was stopped (killed, or refused memory)
    assert_agents_failure_not_error(episode)
    assert episode.total_reward <= HONEST  # the hog may cost the evaluation; it gains nothing
    bench.honest_titanic()
