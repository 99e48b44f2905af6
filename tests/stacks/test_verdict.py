"""The verdict, table-tested on py-spy dumps recorded from real blocked programs
(tests/stacks/recorded/record.py; the torch one written by hand in py-spy's format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.stacks import (
    Frame,
    ProcessStacks,
    Seen,
    Target,
    ThreadStack,
    assign,
    describe_frames,
    main_thread,
    parse_dump,
    render_text,
    verdict,
)
from airvisor.stacks._targets import rank_from_environ

RECORDED = Path(__file__).resolve().parent / "recorded"


def frames_of(name: str) -> list[Frame]:
    threads = parse_dump((RECORDED / f"{name}.json").read_text(), with_code=False)
    assert len(threads) == 1
    return threads[0].frames


TORCH = ("blocked in all_reduce (torch/distributed/distributed_c10d.py:2501) under "
         "prime_rl/trainer/rl/train.py:312")


@pytest.mark.parametrize(("recorded", "expected"), [
    ("torch_all_reduce", TORCH),
    ("torch_all_reduce_native", TORCH),  # the futex and NCCL frames below it say no more
    ("socket_accept", "waiting on a socket in socket.accept (socket.py:294) under "
                      "_socket_accept.py:6"),
    ("socket_accept_native", "waiting on a socket in socket.accept (socket.py:294) under "
                             "_socket_accept.py:6"),
    ("queue_get", "waiting on a queue in Queue.get (queue.py:171) under _queue_get.py:3"),
    ("queue_get_native", "waiting on a queue in Queue.get (queue.py:171) under _queue_get.py:3"),
    ("event_wait", "waiting on a lock in Event.wait (threading.py:629) under _event_wait.py:3"),
    ("asyncio_idle", "idle in the asyncio event loop at BaseEventLoop._run_once "
                     "(asyncio/base_events.py:1884) under _asyncio_idle.py:4"),
    ("child_wait", "waiting for a child process in Popen.communicate (subprocess.py:1201) "
                   "under _child_wait.py:3"),
    ("sleep_native", "sleeping in hang_here (_sleep.py:4)"),  # time.sleep seen natively
    ("sleep", "at hang_here (_sleep.py:4)"),  # no native frame, no source line: just where
    ("busy", "at spin (_busy.py:3)"),
    ("busy_native", "at spin (_busy.py:3)"),
])
def test_recorded_dumps(recorded: str, expected: str) -> None:
    assert describe_frames(frames_of(recorded)) == expected


def test_the_source_line_tells_a_sleep_without_native_frames() -> None:
    frames = [f.model_copy(update={"code": "time.sleep(3600)"}) if f.name == "hang_here" else f
              for f in frames_of("sleep")]
    assert describe_frames(frames) == "sleeping in hang_here (_sleep.py:4)"


def test_torchrun_agent_is_not_a_collective() -> None:
    """torchrun's elastic agent (hand-written in py-spy's format, torch 2.x's frames) sleeps
    between looks at its ranks: not "blocked in" anything."""
    frames = frames_of("torchrun_agent")
    assert describe_frames(frames) == (
        "at SimpleElasticAgent._invoke_run (torch/distributed/elastic/agent/server/api.py:864) "
        "under torchrun:8")
    slept = [f.model_copy(update={"code": "time.sleep(monitor_interval)"}) if i == 0 else f
             for i, f in enumerate(frames)]
    assert describe_frames(slept).startswith("sleeping in SimpleElasticAgent._invoke_run (")


def _py(name: str, short: str, line: int, root: str = "/venv/lib/python3.12/site-packages/"
        ) -> Frame:
    return Frame(name=name, filename=root + short, short=short, line=line)


def test_uvloop_server_idles_in_the_event_loop() -> None:
    """vLLM's API server on uvloop: the loop runs in C, asyncio.run's frame is the innermost
    Python one (frames as py-spy --native shows them, written by hand)."""
    frames = [
        Frame(name="epoll_wait", filename="/lib/libc.so.6", short="libc.so.6", line=0,
              native=True),
        Frame(name="uv__io_poll", filename="/venv/uvloop/loop.so", short="loop.so", line=0,
              native=True),
        _py("Runner.run", "asyncio/runners.py", 118, "/usr/lib/python3.12/"),
        _py("run", "asyncio/runners.py", 194, "/usr/lib/python3.12/"),
        _py("run", "uvloop/__init__.py", 109),
        _py("run_server", "vllm/entrypoints/openai/api_server.py", 1920),
        _py("<module>", "vllm/entrypoints/openai/api_server.py", 1960),
    ]
    assert describe_frames(frames) == (
        "idle in the asyncio event loop at Runner.run (asyncio/runners.py:118) under "
        "vllm/entrypoints/openai/api_server.py:1920")


def test_no_frames_and_native_only() -> None:
    assert describe_frames([]) == "no frames (the thread is starting or ending)"
    native = Frame(name="epoll_wait", filename="/lib/libc.so.6", short="libc.so.6", line=0,
                   native=True)
    assert describe_frames([native]) == "in native code epoll_wait (no Python frame)"


def _thread(os_id: int, name: str, recorded: str) -> ThreadStack:
    return ThreadStack(thread_id=os_id, os_thread_id=os_id, name=name, frames=frames_of(recorded))


@pytest.mark.parametrize(("target", "threads", "note", "expected"), [
    # The main thread is the one whose OS thread id is the pid, whatever its name or order.
    (Target(pid=7, component="trainer", rank=1),
     [_thread(8, "Thread-1", "busy"), _thread(7, "MainThread", "torch_all_reduce")], None,
     f"trainer rank 1: {TORCH}"),
    (Target(pid=7, component="orchestrator"),
     [_thread(9, "worker", "busy"), _thread(10, "MainThread", "queue_get")], None,
     "orchestrator (pid 7): waiting on a queue in Queue.get (queue.py:171) under "
     "_queue_get.py:3"),
    (Target(pid=7, component="inference"), [], "pid 7 is gone (it exited before its stack "
     "was read)", "inference (pid 7): no stacks (pid 7 is gone (it exited before its stack "
     "was read))"),
    (Target(pid=7, component="trainer", rank=0), [_thread(7, "MainThread", "busy")],
     "read without pausing it", "trainer rank 0: at spin (_busy.py:3) (read without pausing "
     "it)"),
])
def test_verdict_lines(target: Target, threads: list[ThreadStack], note: str | None,
                       expected: str) -> None:
    stacks = ProcessStacks(target=target, threads=threads, note=note)
    assert verdict(stacks) == expected


def test_main_thread_falls_back_to_the_name_then_the_first() -> None:
    named = ProcessStacks(target=Target(pid=1, component="x"), threads=[
        _thread(5, "worker", "busy"), _thread(6, "MainThread", "sleep")])
    assert main_thread(named) is named.threads[1]
    unnamed = ProcessStacks(target=Target(pid=1, component="x"), threads=[
        _thread(5, "a", "busy"), _thread(6, "b", "sleep")])
    assert main_thread(unnamed) is unnamed.threads[0]


def test_processes_belong_to_the_nearest_recorded_component() -> None:
    # launcher 10 -> uv 11 (not Python) -> torchrun 12 -> ranks 13, 14; launcher -> inference 15
    # -> engine core 16; 99: someone else's process.
    table = [
        Seen(10, 1, True), Seen(11, 10, False), Seen(12, 11, True), Seen(13, 12, True, rank=0),
        Seen(14, 12, True, rank=1), Seen(15, 10, True), Seen(16, 15, True, rank=5),
        Seen(99, 1, True),
    ]
    roots = {10: "launcher", 11: "trainer", 15: "inference"}
    got = [(t.pid, t.component, t.rank, t.label) for t in assign(roots, table)]
    assert got == [
        (15, "inference", None, "inference (pid 15)"),
        (16, "inference", None, "inference (pid 16)"),  # a rank counts for the trainer only
        (12, "trainer", None, "trainer (pid 12)"),
        (13, "trainer", 0, "trainer rank 0"),
        (14, "trainer", 1, "trainer rank 1"),
        (10, "launcher", None, "launcher (pid 10)"),  # the launcher's own process, last
    ]


@pytest.mark.parametrize(("environ", "rank"), [
    ({"RANK": "1", "TORCHELASTIC_RUN_ID": "r"}, 1),  # a worker torchrun started
    ({"RANK": "0"}, None),  # torchrun's agent under prime-rl v0.4's launcher (its RANK=0 default)
    ({"TORCHELASTIC_RUN_ID": "r"}, None),
    ({"RANK": "x", "TORCHELASTIC_RUN_ID": "r"}, None),
])
def test_only_torchruns_workers_have_a_rank(environ: dict[str, str], rank: int | None) -> None:
    assert rank_from_environ(environ) == rank


def test_text_form_lists_every_thread() -> None:
    stacks = ProcessStacks(target=Target(pid=7, component="trainer", rank=0, argv=["python"]),
                           threads=[_thread(7, "MainThread", "sleep_native"),
                                    _thread(8, "Thread-1", "busy")], native=True)
    stacks = stacks.model_copy(update={"verdict": verdict(stacks)})
    text = render_text(stacks)
    assert text.splitlines()[0] == "trainer rank 0: sleeping in hang_here (_sleep.py:4)"
    assert 'Thread 7 (idle): "MainThread"' in text and 'Thread 8 (idle): "Thread-1"' in text
    assert "    clock_nanosleep (libc.so.6)" in text and "    spin (_busy.py:3)" in text
