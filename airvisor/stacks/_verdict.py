"""The verdict: one line a person can read saying where a process's main thread is.

Pure: frames in, text out (table-tested on recorded py-spy output). The line names the frame
that explains the wait, what kind of wait it is, and the user's own frame it was called from:

    trainer rank 1: blocked in all_reduce (torch/distributed/distributed_c10d.py:2501) under
    train.py:312

Kinds of wait, recognised from the frames (innermost first): a collective (torch.distributed,
NCCL/gloo native frames), a socket or queue (selectors, socket, ssl, queue, multiprocessing,
zmq, asyncio's loop; epoll/poll/recv natively), a lock or event (threading; futex natively),
a child process, sleeping (time.sleep: native frames or the source line). Otherwise "at" the
innermost Python frame.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from airvisor.stacks._model import Frame, ProcessStacks, ThreadStack

# Each kind of wait, as the verdict says it before the frame it names.
COLLECTIVE = "blocked in"  # a collective: "blocked in all_reduce (torch/distributed/...)"
SOCKET = "waiting on a socket in"
QUEUE = "waiting on a queue in"
LOCK = "waiting on a lock in"
EVENT_LOOP = "idle in the asyncio event loop at"
CHILD = "waiting for a child process in"
SLEEPING = "sleeping in"
RUNNING = "at"

COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "wait", "init_process_group", "new_group",
})

# Top-level packages (py-spy's short file name begins with them) that are plumbing, not the
# code a person wants named as "under": the frame above them is.
PLUMBING = frozenset({
    "torch", "anyio", "uvloop", "uvicorn", "starlette", "fastapi", "httpx", "httpcore", "h11",
    "urllib3", "requests", "aiohttp", "zmq", "tqdm", "numpy", "safetensors", "triton",
    "multiprocess", "concurrent", "asyncio", "threading.py", "queue.py", "selectors.py",
    "socket.py", "ssl.py", "subprocess.py", "runpy.py", "multiprocessing", "importlib",
    "click", "typer", "typing_extensions",
})


@dataclass(frozen=True)
class _Rule:
    kind: str
    files: tuple[str, ...] = ()  # py-spy short file names (suffix match)
    names: tuple[str, ...] = ()  # function names ("" = any function of those files)


# Python frames: the first (innermost) one matching a rule explains the wait.
_PY_RULES = (
    _Rule(SOCKET, ("selectors.py",), ("select", "EpollSelector.select", "PollSelector.select",
                                      "SelectSelector.select", "KqueueSelector.select")),
    _Rule(SOCKET, ("socket.py", "ssl.py"), ("",)),
    _Rule(SOCKET, ("zmq/sugar/socket.py", "zmq/sugar/poll.py", "zmq/green/core.py"), ("",)),
    _Rule(QUEUE, ("queue.py", "multiprocessing/queues.py"), ("get", "Queue.get", "put",
                                                             "Queue.put", "_get", "join")),
    _Rule(QUEUE, ("multiprocessing/connection.py",), ("",)),
    _Rule(EVENT_LOOP, ("asyncio/base_events.py",), ("_run_once", "run_forever",
                                                    "BaseEventLoop._run_once",
                                                    "BaseEventLoop.run_forever")),
    # uvloop's loop (vLLM's, uvicorn's) runs in C: the innermost Python frame is asyncio.run's.
    _Rule(EVENT_LOOP, ("asyncio/runners.py",), ("",)),
    _Rule(LOCK, ("threading.py",), ("wait", "Condition.wait", "Event.wait", "Thread.join",
                                    "join", "_wait_for_tstate_lock",
                                    "Thread._wait_for_tstate_lock", "Semaphore.acquire",
                                    "Barrier.wait")),
    _Rule(LOCK, ("concurrent/futures/_base.py",), ("",)),
    _Rule(CHILD, ("subprocess.py",), ("wait", "Popen.wait", "_wait", "Popen._wait",
                                      "_try_wait", "Popen._try_wait", "communicate",
                                      "Popen.communicate")),
)

# Native frames (py-spy --native): a match says what the innermost Python frame waits on.
_NATIVE = (
    (re.compile(r"nccl|gloo|c10d|ProcessGroup", re.I), COLLECTIVE),
    (re.compile(r"^(__)?(epoll_wait|epoll_pwait|poll|ppoll|select|pselect\d*|recv\w*|accept4?|"
                r"connect|zmq_\w+)$"), SOCKET),
    (re.compile(r"^(clock_nanosleep|__clock_nanosleep\w*|nanosleep|__nanosleep|time_sleep|"
                r"pysleep)$"), SLEEPING),
    (re.compile(r"^(waitpid|__waitpid|wait4|__wait4|waitid)$"), CHILD),
    (re.compile(r"^(pthread_cond_\w*wait\w*|__pthread_cond_\w*|sem_\w*wait|futex\w*|"
                r"__futex\w*|PyThread_acquire_lock\w*|acquire_timed|lock_PyThread_acquire_lock)$"),
     LOCK),
)

_SLEEP_CODE = re.compile(r"\b(time\.)?sleep\(|asyncio\.sleep\(")


def main_thread(stacks: ProcessStacks) -> ThreadStack | None:
    """The process's main thread: the one whose OS thread id is the pid, else "MainThread",
    else the first one py-spy lists."""
    threads = stacks.threads
    for thread in threads:
        if thread.os_thread_id == stacks.target.pid:
            return thread
    for thread in threads:
        if thread.name == "MainThread":
            return thread
    return threads[0] if threads else None


def _top_package(frame: Frame) -> str:
    return frame.short.replace("\\", "/").split("/", 1)[0]


def is_library(frame: Frame) -> bool:
    """Plumbing (the standard library, torch, asyncio, ...) rather than the program's own code;
    a native frame is always plumbing."""
    if frame.native:
        return True
    path = frame.filename.replace("\\", "/")
    if path.startswith("<frozen") or path.startswith("<"):
        return True
    in_packages = "/site-packages/" in path or "/dist-packages/" in path
    if re.search(r"/lib/python3[.\d]*/", path) and not in_packages:
        return True  # the standard library
    return _top_package(frame) in PLUMBING


def _matches(rule: _Rule, frame: Frame) -> bool:
    short = frame.short.replace("\\", "/")
    if not any(short == f or short.endswith("/" + f) for f in rule.files):
        return False
    return "" in rule.names or frame.name in rule.names or \
        frame.name.rsplit(".", 1)[-1] in rule.names


def _rule_for(frame: Frame) -> _Rule | None:
    return next((r for r in _PY_RULES if _matches(r, frame)), None)


# torch.distributed's launcher (torchrun's elastic agent) is not a collective: it watches the
# ranks, mostly sleeping between looks.
_NOT_COLLECTIVE = ("torch/distributed/elastic/", "torch/distributed/launcher/",
                   "torch/distributed/run.py")


def _is_torch_distributed(frame: Frame) -> bool:
    short = frame.short.replace("\\", "/")
    return not frame.native and short.startswith("torch/distributed/") \
        and not short.startswith(_NOT_COLLECTIVE)


def _where(frame: Frame) -> str:
    return f"{frame.name} ({frame.short}:{frame.line})"


def _under(frames: Sequence[Frame], index: int) -> Frame | None:
    """The program's own frame that the frame at `index` was called from (outward)."""
    if not is_library(frames[index]):
        return None
    for frame in frames[index + 1:]:
        if not is_library(frame):
            return frame
    return None


def _phrase(kind: str, frames: Sequence[Frame], index: int) -> str:
    text = f"{kind} {_where(frames[index])}"
    under = _under(frames, index)
    if under is not None:
        text += f" under {under.short}:{under.line}"
    return text


def describe_frames(frames: Sequence[Frame]) -> str:
    """Where a thread is, from its frames (innermost first)."""
    python = [i for i, f in enumerate(frames) if not f.native]
    if not python:
        if frames:
            return f"in native code {frames[0].name} (no Python frame)"
        return "no frames (the thread is starting or ending)"
    # A collective anywhere in the stack explains everything below it (a futex, a poll).
    dist = [i for i in python if _is_torch_distributed(frames[i])]
    if dist:
        named = [i for i in dist if frames[i].name.rsplit(".", 1)[-1] in COLLECTIVES]
        # The outermost collective call (all_reduce rather than the Work.wait inside it).
        return _phrase(COLLECTIVE, frames, named[-1] if named else dist[-1])
    native_kind: str | None = None
    for i, frame in enumerate(frames):
        if frame.native:
            if native_kind is None:
                native_kind = next((k for rx, k in _NATIVE if rx.search(frame.name)), None)
            continue
        rule = _rule_for(frame)
        if rule is not None:
            # The outermost match among the plumbing frames above it says more: queue.get
            # rather than the Condition.wait inside it, the event loop rather than its select.
            for j in range(i + 1, len(frames)):
                if not is_library(frames[j]):
                    break
                outer = None if frames[j].native else _rule_for(frames[j])
                if outer is not None and rule.kind != EVENT_LOOP:  # _run_once says it all
                    i, rule = j, outer
            return _phrase(rule.kind, frames, i)
        if native_kind is not None:
            return _phrase(native_kind, frames, i)
        if frame.code is not None and _SLEEP_CODE.search(frame.code):
            return _phrase(SLEEPING, frames, i)
        if not is_library(frame):
            break  # the program's own code: what it does here is the answer
    first = python[0]
    return _phrase(native_kind or RUNNING, frames, first)


def verdict(stacks: ProcessStacks) -> str:
    """`<label>: <where its main thread is>`, or `<label>: no stacks (<why>)`."""
    label = stacks.target.label
    thread = main_thread(stacks)
    if thread is None:
        return f"{label}: no stacks ({stacks.note or 'py-spy found no Python thread'})"
    text = f"{label}: {describe_frames(thread.frames)}"
    if stacks.note:
        text += f" ({stacks.note})"
    return text
