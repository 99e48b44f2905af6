"""Blame by cause, the parts that need no container: what counts as a frozen process (a real
vfork() parent, on this kernel), the solution digest of names that are not UTF-8, the limits'
arguments, and a submit that is always evaluated again. The paths through a real container are
in test_hacks.py (both image layouts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from air_mlgym import container_admin as admin
from air_mlgym._core import EnvArgs, EnvArgsError
from air_mlgym._session import Evaluation, memory_bytes

VFORK = textwrap.dedent(
    """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.vfork() == 0:  # the child never execs: the parent waits in the kernel (state D)
        while True:
            libc.pause()
    os._exit(0)
    """
)


@pytest.mark.parametrize(
    ("state", "pending", "frozen"),
    [
        ("T", 0, True),  # stopped
        ("t", 0, True),  # stopped by a tracer
        ("Z", 0, True),  # dead
        ("", 0, True),  # gone
        ("D", admin.SIGSTOP_MASK, True),  # in the kernel, will stop before user space
        ("D", admin.SIGSTOP_MASK | 1, True),
        ("D", 0, False),  # in the kernel, nothing stops it on the way out
        ("R", admin.SIGSTOP_MASK, False),  # running, not stopped yet
        ("S", admin.SIGSTOP_MASK, False),
        ("S", 0, False),
    ],
)
def test_what_counts_as_held(state: str, pending: int, frozen: bool) -> None:
    assert admin.held(state, pending) is frozen


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


@pytest.fixture
def vfork_parent() -> Iterator[tuple[int, int]]:
    """A real vfork() parent (state D) and its child that never execs; killed afterwards."""
    process = subprocess.Popen([sys.executable, "-c", VFORK], start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a wait for the kernel, not a timing assertion
        while admin._state(process.pid) != "D" or not children_of(process.pid):
            assert time.monotonic() < deadline, "the vfork parent never reached state D"
            time.sleep(0.05)
        yield process.pid, children_of(process.pid)[0]
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_vfork_parent_cannot_be_stopped_but_is_held_once_sigstop_is_pending(
    vfork_parent: tuple[int, int],
) -> None:
    parent, child = vfork_parent
    assert not admin.held(admin._state(parent), admin._pending(parent))
    for pid in (child, parent):
        os.kill(pid, signal.SIGSTOP)
    while admin._state(child) != "T":  # the child stops (delivery is asynchronous)
        time.sleep(0.01)
    # the parent stays in D (SIGSTOP cannot wake it), with the stop pending: held
    assert admin._state(parent) == "D"
    assert admin._pending(parent) & admin.SIGSTOP_MASK
    assert admin.held(admin._state(parent), admin._pending(parent))
    # a SIGCONT discards the pending stop: not held any more (why nothing of the agent's may
    # be able to send one during an evaluation)
    os.kill(parent, signal.SIGCONT)
    assert not admin.held(admin._state(parent), admin._pending(parent))
    assert admin.describe_processes([parent]).startswith(f"{parent} (D, ")


def test_workspace_hash_takes_names_of_any_bytes(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path)
    (tmp_path / "strategy.py").write_text("x = 1\n")
    first = admin.workspace_hash(str(tmp_path))
    with open(os.path.join(root, b"\xff\xfe.py"), "wb") as handle:
        handle.write(b"y = 2\n")
    os.symlink(b"/nowhere/\xc3\x28", os.path.join(root, b"link\x80"))
    os.mkdir(os.path.join(root, b"dir\xed\xa0\x80"))
    second = admin.workspace_hash(str(tmp_path))
    assert second is not None and second != first
    assert admin.workspace_hash(str(tmp_path)) == second  # stable
    os.rename(os.path.join(root, b"\xff\xfe.py"), os.path.join(root, b"\xff\xfd.py"))
    assert admin.workspace_hash(str(tmp_path)) not in {first, second}  # the name's bytes count


def test_the_limits_are_checked_arguments() -> None:
    base: dict[str, Any] = {"mlgym_path": "/m", "task": "t", "container_names": ["c"]}
    args = EnvArgs.from_kwargs(**base)
    config = args.session_config()
    limits = (config.pids_limit, config.memory_limit, config.cpus, config.disk_limit)
    assert limits == (1024, 4 << 30, 1.0, 8 << 30)
    off = EnvArgs.from_kwargs(
        **base, pids_limit=None, memory=None, cpus=None, disk=None
    ).session_config()
    assert (off.pids_limit, off.memory_limit, off.cpus, off.disk_limit) == (None,) * 4
    assert EnvArgs.from_kwargs(**base, memory="512m").session_config().memory_limit == 512 << 20
    assert EnvArgs.from_kwargs(**base, disk="64m").session_config().disk_limit == 64 << 20
    assert config.freeze == "auto"
    assert EnvArgs.from_kwargs(**base, freeze="kernel").session_config().freeze == "kernel"
    assert memory_bytes(1 << 30) == 1 << 30
    for name, value, words in [
        ("pids_limit", 8, "integer >= 32"),
        ("pids_limit", True, "integer >= 32"),
        ("cpus", 0, "positive number"),
        ("memory", "lots", "Docker memory size"),
        ("memory", "1m", "at least 64m"),
        ("disk", "lots", "size such as"),
        ("disk", "1m", "at least 16m"),
        ("disk", True, "at least 16m"),
        ("freeze", "cgroup", "one of 'auto', 'kernel', 'signals'"),
    ]:
        with pytest.raises(EnvArgsError, match=f"'{name}'.*{words}"):
            EnvArgs.from_kwargs(**base, **{name: value})


class Session:
    """The session's side of an episode's evaluations, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.stops: list[bool] = []
        self.draw = 0

    def evaluate(self, known: Any = None, *, stop: bool = False) -> Evaluation:
        self.asked.append(known is not None)
        self.stops.append(stop)
        if known:
            return Evaluation(**{**vars(next(iter(known.values()))), "cached": True})
        self.draw += 1
        return Evaluation({"Score": float(self.draw)}, "", "", solution_hash="same")


def test_a_submit_is_evaluated_again_and_an_agent_failure_is_logged() -> None:
    from air_mlgym._episode import Episode

    episode = Episode.__new__(Episode)  # only the evaluation bookkeeping is exercised
    episode._evaluations = {}
    episode.events = []
    episode.agent_failure = None
    episode.session = Session()  # type: ignore[assignment]
    assert episode._run_evaluation().metrics == {"Score": 1.0}  # validate
    assert episode._run_evaluation().cached  # validate, unchanged: the earlier draw
    assert episode._run_evaluation(fresh=True).metrics == {"Score": 2.0}  # submit: a new draw
    assert episode.session.asked == [True, True, False]  # type: ignore[attr-defined]
    # the agent's processes are ended before the submit's evaluation, held for a validate's
    assert episode.session.stops == [False, False, True]  # type: ignore[attr-defined]

    class Failing(Session):
        def evaluate(self, known: Any = None, *, stop: bool = False) -> Evaluation:
            return Evaluation(None, "why", "msg", "h", agent_failure="pids used up")

    episode.session = Failing()  # type: ignore[assignment]
    assert episode._run_evaluation(fresh=True).agent_failure == "pids used up"
    assert episode.agent_failure == "pids used up"
    assert "evaluation failed because of the agent: pids used up" in episode.events
    assert "h" not in episode._evaluations  # a failure of the agent's is never replayed



def allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


def test_disk_usage_counts_what_is_allocated_each_inode_once_never_through_a_link(
    tmp_path: Path,
) -> None:
    """The disk limit's measure (README "Limits"): a hard link counts once, a sparse file by
    what it holds, a name of any bytes and a path beyond PATH_MAX count, a symlink is not
    followed, and the template's own inodes (hard-linked into the workspace) are skipped."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(16 << 20))  # counted if a link were followed

    def measured(skip: frozenset[tuple[int, int]] = frozenset()) -> int:
        usage = admin.DiskUsage(skip)
        usage.add_tree(str(workspace))
        return usage.bytes

    def files_only() -> int:  # the measure without the directories' own blocks
        return measured() - allocated(workspace)

    assert measured() == allocated(workspace)
    (workspace / "a").write_bytes(os.urandom(3 << 20))
    assert files_only() == allocated(workspace / "a") >= 3 << 20
    for i in range(50):  # hard links of it: the same blocks, once
        os.link(workspace / "a", workspace / f"link{i}")
    assert files_only() == allocated(workspace / "a")
    with open(workspace / "sparse", "wb") as handle:  # 64 GiB apparent, nothing allocated
        handle.truncate(64 << 30)
    assert files_only() == allocated(workspace / "a") + allocated(workspace / "sparse")
    assert measured() < 8 << 20
    os.symlink(outside, workspace / "there")  # links are never followed
    os.symlink(outside / "big", workspace / "big")
    assert measured() < 8 << 20
    with open(os.path.join(os.fsencode(workspace), b"\xff\xfe-name"), "wb") as handle:
        handle.write(os.urandom(2 << 20))
    named = measured()
    assert named >= (5 << 20)
    fd = os.open(workspace, os.O_RDONLY)
    try:  # a path far beyond PATH_MAX (30 x 200 bytes), made through descriptors
        for _ in range(30):
            os.mkdir("d" * 200, dir_fd=fd)
            child = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("deep", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as handle:
            handle.write(os.urandom(2 << 20))
    finally:
        os.close(fd)
    assert measured() - named >= (2 << 20) + 30 * 4096
    # the template's own inodes (the task's data and evaluation files) are not the episode's
    template = admin.DiskUsage()
    template.add_tree(str(workspace / "a"))
    assert measured(frozenset(template.seen)) == measured() - allocated(workspace / "a")
