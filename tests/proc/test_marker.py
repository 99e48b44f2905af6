"""Whether a process's environment can show that it carries no marker (`environ_visible`), and
the session inference that rests on it, against real retitled processes.

A process title (setproctitle, as vLLM's EngineCore and Worker set theirs) is written over the
environment from its start; how far the overwrite reaches depends on the process: when a
variable was changed before the retitle, setproctitle stops at it and the rest of the original
environment stays readable. Such a remnant shows nothing about the marker that stood before it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from airvisor.proc._facts import collect_facts
from airvisor.proc._marker import (
    MARKER_OWNER_ENV,
    MARKER_RUN_ENV,
    Marker,
    environ_visible,
    infer_session_marker,
    read_environ_marker,
)


@pytest.mark.parametrize(("raw", "visible"), [
    (b"", False),  # unreadable, a zombie
    (b"A=1\0B=2\0", True),
    (b"A=1\0B=2", True),
    (b"PATH=/bin\0EMPTY=\0", True),  # an empty value is still NAME=
    (b"\0\0\0\0", False),  # wholly wiped
    (b"\0\0\0\0D=4\0E=5\0", False),  # wiped from its start, a remnant after the NULs
    (b"-multiprocessing-fork\0\0\0D=4\0", False),  # a long title's end, NULs, a remnant
    (b"VLLM::EngineCore\0", False),  # a title fragment, no NAME=value
])
def test_only_an_environment_as_execve_wrote_it_is_visible(raw: bytes, visible: bool) -> None:
    assert environ_visible(raw) is visible


def test_a_leaderless_session_with_a_marked_member_and_remnants_is_the_runs() -> None:
    run = Marker("r1", owner="/state")
    remnant = (None, False)  # what environ_visible says of a remnant
    assert infer_session_marker(None, [(run, True), remnant, remnant]) == Marker("r1",
                                                                                 owner="/state")
    # Still: a member that visibly shows no marker, and nothing is inferred.
    assert infer_session_marker(None, [(run, True), remnant, (None, True)]) is None


# Changes a variable that follows the marker, then retitles itself: setproctitle clears the
# environment up to that variable and leaves the rest (as a real vLLM EngineCore shows).
# Then it starts a child in a session of its own with a fresh environment (no marker, a
# visible environment): the run's only by its parent.
RETITLED = textwrap.dedent("""
    import os, subprocess, sys, time, setproctitle
    os.environ["AFTER_THE_MARKER"] = "changed"
    setproctitle.setproctitle(sys.argv[1])
    child = subprocess.Popen(["sleep", "600"], env={"PATH": os.environ["PATH"]},
                             start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
""")
LEADER = textwrap.dedent("""
    import subprocess, sys, time
    children = [subprocess.Popen(["sleep", "600"]),
                subprocess.Popen([sys.executable, "-c", sys.argv[1], "VLLM::EngineCore"],
                                 stdout=subprocess.PIPE, text=True)]
    grandchild = children[1].stdout.readline().strip()
    print(" ".join(str(c.pid) for c in children), grandchild, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def marked_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRVISOR_")}
    # The marker first, then a variable the child changes before its retitle.
    return {MARKER_RUN_ENV: "r-remnant", MARKER_OWNER_ENV: str(tmp_path), **env,
            "AFTER_THE_MARKER": "1", "TAIL": "kept"}


@pytest.fixture
def session(marked_env: dict[str, str]) -> Iterator[tuple[int, int, int]]:
    """A session whose leader (marked) started a marked `sleep` and a retitled child, then
    was SIGKILLed: (the sleep's pid, the retitled child's pid, the retitled child's child)."""
    leader = subprocess.Popen([sys.executable, "-c", LEADER, RETITLED], env=marked_env,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert leader.stdout is not None
    sleeper, retitled, grandchild = (int(pid) for pid in leader.stdout.readline().split())
    leader.kill()
    leader.wait()
    try:
        yield sleeper, retitled, grandchild
    finally:
        for pid in (grandchild, sleeper, retitled):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_a_retitled_process_shows_a_remnant_without_the_marker(
    session: tuple[int, int, int],
) -> None:
    _, retitled, _ = session
    raw = Path(f"/proc/{retitled}/environ").read_bytes()
    assert b"TAIL=kept" in raw and MARKER_RUN_ENV.encode() not in raw  # the shape
    assert read_environ_marker(retitled) == (None, False)


def test_the_retitled_member_of_the_dead_leaders_session_is_the_runs(
    session: tuple[int, int, int], tmp_path: Path,
) -> None:
    sleeper, retitled, grandchild = session
    run = Marker("r-remnant", owner=str(tmp_path))
    facts = collect_facts({})
    assert facts[retitled].sid == facts[sleeper].sid != os.getsid(0)
    assert facts[retitled].marker is None
    assert facts[retitled].session_marker == run
    assert facts[sleeper].marker == run
    # Its child left the session and the marker behind: the run's by the parent chain, as
    # the kernel shows it at discovery (the parent alive, its start before the child's).
    child = facts[grandchild]
    assert child.marker is None and child.session_marker is None
    assert child.sid == grandchild and child.ancestors[0] == retitled
    assert facts[retitled].create_time <= child.create_time
    assert child.ancestor_markers[0] == run
