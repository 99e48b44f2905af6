"""The verdict: one line a person can read saying where a process's main thread is.

Pure: frames in, text out (table-tested on recorded py-spy output). The line names the frame
that explains the wait, what kind of wait it is, and the user's own frame it was called from:

    trainer rank 1: blocked in all_reduce (torch/distributed/distributed_c10d.py:2501) under
    train.py:312

Kinds of wait, recognised from the frames (innermost first): a collective (torch.distributed,
NCCL/gloo native frames), a socket or queue (selectors, socket, ssl, queue, multiprocessing,
zmq, asyncio's loop; epoll/poll/recv natively), a lock or event (threading; futex natively),
a child process, sleeping (time.sleep: native frames or the source line), the GPU (a device,
stream or event synchronize, a blocking read of a GPU tensor: `.item()`, `.cpu()`, `.tolist()`,
a kernel launch that cannot be queued; torch.cuda's Python frames, the CUDA calls natively, or
the source line). Otherwise "at" the innermost Python frame.

A wait on the GPU after a collective is how a training loop meets a dead peer: NCCL only
queues the all_reduce and returns, and the thread waits in the next synchronize. py-spy shows
the stack as it is now, not the call that returned before it, so the collective issued last is
read from the source of the user's frame (the lines above the waiting one, up to the start of
its function) when the file is readable; py-spy does not see the NCCL watchdog thread (a C++
thread with no Python state), so there is no state of it to say.

    trainer rank 0: waiting on the GPU in synchronize (torch/cuda/__init__.py:1162;
    cudaDeviceSynchronize) after all_reduce (nccl_train.py:32) under nccl_train.py:33
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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
GPU = "waiting on the GPU in"
# Said before the rest: a stopped process's frames are where it stopped.
STOPPED = "stopped (SIGSTOP or a tracer)"
RUNNING = "at"
NATIVE = "in native code"
NO_FRAMES = "no frames"

# (filename, line) -> that line of the source, or None where it cannot be read.
SourceReader = Callable[[str, int], str | None]

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

# -- the GPU ---------------------------------------------------------------------------------
# torch's Python frames that block the thread until the GPU has caught up.
_GPU_PY_RULES = (
    _Rule(GPU, ("torch/cuda/__init__.py", "torch/accelerator/__init__.py",
                "torch/cuda/streams.py", "torch/xpu/__init__.py"),
          ("synchronize", "Stream.synchronize", "Event.synchronize")),
)
# CUDA's blocking calls, natively: (pattern, what the verdict calls it).
_GPU_NATIVE = (
    (re.compile(r"^(cudaDeviceSynchronize|cuCtxSynchronize\w*)$"), "cudaDeviceSynchronize"),
    (re.compile(r"^(cudaStreamSynchronize|cuStreamSynchronize\w*)$"), "cudaStreamSynchronize"),
    (re.compile(r"^(cudaEventSynchronize|cuEventSynchronize\w*)$"), "cudaEventSynchronize"),
    (re.compile(r"^cuMemcpy\w*DtoH\w*$"), "a copy from the GPU"),
    (re.compile(r"^(cudaMemcpy\w*|cuMemcpy\w*)$"), "a copy to or from the GPU"),
    (re.compile(r"^(cudaLaunchKernel\w*|cuLaunchKernel\w*)$"), "a kernel launch"),
)
# torch's bindings of the tensor methods that read a GPU tensor back (native frame names).
_GPU_BINDINGS = (
    (re.compile(r"THPVariable_item$"), ".item()"),
    (re.compile(r"THPVariable_cpu$"), ".cpu()"),
    (re.compile(r"THPVariable_tolist$"), ".tolist()"),
    (re.compile(r"THPVariable_numpy$"), ".numpy()"),
    (re.compile(r"THPVariable_to$"), ".to()"),
    (re.compile(r"THCPModule_cudaSynchronize$"), "torch.cuda.synchronize()"),
    (re.compile(r"THCPStream_synchronize$"), "Stream.synchronize()"),
    (re.compile(r"THCPEvent_synchronize$"), "Event.synchronize()"),
)
_ANY_BINDING = re.compile(r"THPVariable_(\w+)$")
# The same read in a source line (no native frames): `loss.item()`, `torch.cuda.synchronize()`.
_GPU_CODE = re.compile(r"\.(item|cpu|tolist|numpy)\(\s*\)|\bsynchronize\(")
# A collective in a source line. The names that mean other things elsewhere (reduce, gather,
# send, wait...) count only as `dist.<name>(`.
_COLLECTIVE_CODE = re.compile(
    r"(?<![\w.])(?:\w+\.)*(?P<name>all_reduce|all_gather\w*|all_to_all\w*|reduce_scatter\w*|"
    r"broadcast(?:_object_list)?|barrier|monitored_barrier)\s*\("
    r"|\b(?:dist|distributed)\.(?P<plain>reduce|gather|scatter|send|recv|isend|irecv|"
    r"batch_isend_irecv)\s*\(")
_DEF = re.compile(r"^\s*(async\s+)?def\s")
_BRANCH = re.compile(r"^(elif|else|except|finally|case)\b")
LOOKBACK_LINES = 40  # how far above the waiting line the collective is looked for


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


@dataclass(frozen=True)
class Where:
    """Where a thread is: the kind of wait, what it waits in (a function, `.item()`), the
    collective issued before a GPU wait, and the whole phrase."""

    kind: str
    what: str
    text: str
    after: str | None = None


def _phrase(kind: str, frames: Sequence[Frame], index: int) -> Where:
    text = f"{kind} {_where(frames[index])}"
    under = _under(frames, index)
    if under is not None:
        text += f" under {under.short}:{under.line}"
    return Where(kind, frames[index].name.rsplit(".", 1)[-1], text)


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def collective_before(frame: Frame, source: SourceReader | None) -> str | None:
    """`all_reduce (train.py:34)`: the last collective called above the frame's line in the
    same function (its source read through `source`), or None. The branches beside the
    frame's own (the `if` body above its `elif`) did not run: they are passed over."""
    if source is None or frame.native or frame.line <= 1:
        return None
    own = source(frame.filename, frame.line)
    indent = _indent(own) if own is not None else None
    line = frame.line - 1
    lowest = max(1, frame.line - LOOKBACK_LINES)
    while line >= lowest:
        text = source(frame.filename, line)
        stripped = (text or "").strip()
        if text is None or not stripped or stripped.startswith("#"):
            line -= 1
            continue
        here = _indent(text)
        if indent is not None and here < indent:
            if _DEF.match(text):
                return None  # the function's start: what ran before it is another story
            indent = here
            if _BRANCH.match(stripped):
                # Our branch's header: skip the sibling branches above, up to their opener.
                line -= 1
                while line >= lowest:
                    above = source(frame.filename, line)
                    if above is not None and above.strip() and \
                            not above.strip().startswith("#") and _indent(above) <= here \
                            and not _BRANCH.match(above.strip()):
                        break
                    line -= 1
                continue
        found = list(_COLLECTIVE_CODE.finditer(text.split("#", 1)[0]))
        if found:
            name = found[-1].group("name") or found[-1].group("plain")
            return f"{name} ({frame.short}:{line})"
        line -= 1
    return None


def _gpu_wait(frames: Sequence[Frame], python: Sequence[int],
              source: SourceReader | None) -> Where | None:
    """The GPU wait the frames show, phrased, or None. Looked for between the innermost frame
    and the program's own innermost frame (a synchronize deep inside a library counts too)."""
    first_own = next((i for i in python if not is_library(frames[i])), len(frames))
    cuda: str | None = None
    op: str | None = None
    called: str | None = None  # the torch function whose kernel is being launched, say
    py_index: int | None = None
    for i, frame in enumerate(frames[:first_own + 1]):
        if frame.native:
            if cuda is None:
                cuda = next((n for rx, n in _GPU_NATIVE if rx.search(frame.name)), None)
            if cuda is not None:  # the outermost binding: the call the program made
                op = next((n for rx, n in _GPU_BINDINGS if rx.search(frame.name)), op)
                other = _ANY_BINDING.search(frame.name)
                if other is not None and op is None:
                    called = other.group(1)
            continue
        if any(_matches(rule, frame) for rule in _GPU_PY_RULES):
            py_index = i
            break
        if cuda is not None or i == first_own:
            break
    own = frames[first_own] if first_own < len(frames) else None
    if py_index is None and cuda is None:
        # No native frames: the program's own line may say it (`loss.item()`).
        code = own.code if own is not None and own is frames[python[0]] else None
        match = _GPU_CODE.search(code) if code else None
        if match is None:
            return None
        op = f".{match.group(1)}()" if match.group(1) else "synchronize()"
    if py_index is not None:
        what = frames[py_index].name
        text = f"{GPU} {frames[py_index].name} ({frames[py_index].short}:" \
               f"{frames[py_index].line}" + (f"; {cuda})" if cuda else ")")
    else:
        what = op or str(cuda)
        text = f"{GPU} {op} ({cuda})" if op and cuda else f"{GPU} {op or cuda}"
        if op is None and called is not None:
            text += f" ({called})"
    after = collective_before(own, source) if own is not None else None
    if after is not None:
        text += f" after {after}"
    if own is not None:
        text += f" under {own.short}:{own.line}"
    return Where(GPU, what, text, after.split(" ", 1)[0] if after else None)


def describe_frames(frames: Sequence[Frame], source: SourceReader | None = None) -> str:
    """Where a thread is, from its frames (innermost first); `source` reads the program's
    source lines (the collective before a GPU wait), where it can."""
    return where_of(frames, source).text


def where_of(frames: Sequence[Frame], source: SourceReader | None = None) -> Where:
    """`describe_frames`, with the parts the summary across ranks compares."""
    python = [i for i, f in enumerate(frames) if not f.native]
    if not python:
        if frames:
            return Where(NATIVE, frames[0].name,
                         f"in native code {frames[0].name} (no Python frame)")
        return Where(NO_FRAMES, "", "no frames (the thread is starting or ending)")
    # A collective anywhere in the stack explains everything below it (a futex, a poll).
    dist = [i for i in python if _is_torch_distributed(frames[i])]
    if dist:
        named = [i for i in dist if frames[i].name.rsplit(".", 1)[-1] in COLLECTIVES]
        # The outermost collective call (all_reduce rather than the Work.wait inside it).
        return _phrase(COLLECTIVE, frames, named[-1] if named else dist[-1])
    gpu = _gpu_wait(frames, python, source)
    if gpu is not None:
        return gpu
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


def verdict(stacks: ProcessStacks, source: SourceReader | None = None) -> str:
    """`<label>: <where its main thread is>`, or `<label>: no stacks (<why>)`."""
    label = stacks.target.label
    thread = main_thread(stacks)
    if thread is None:
        stopped = f"{STOPPED}; " if stacks.stopped else ""
        return f"{label}: {stopped}no stacks ({stacks.note or 'py-spy found no Python thread'})"
    stopped = f"{STOPPED}, while " if stacks.stopped else ""
    text = f"{label}: {stopped}{describe_frames(thread.frames, source)}"
    if stacks.note:
        text += f" ({stacks.note})"
    return text


# -- across ranks ------------------------------------------------------------------------------
_WAITING = (COLLECTIVE, GPU)  # waiting on the other ranks, directly or through the GPU


def _ranks_text(ranks: Sequence[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"ranks {ordered[0]}-{ordered[-1]}"
    return "ranks " + ", ".join(map(str, ordered))


def summary(processes: Sequence[ProcessStacks], source: SourceReader | None = None,
            component: str = "trainer") -> str | None:
    """One line across the ranks of `component` (None for fewer than two): which ranks wait in
    which collective or GPU sync, and which are elsewhere; where some wait on their peers, the
    ranks elsewhere (a stopped one, one with no stacks, one in its own code) are the usual
    culprit, and a lone one is called the odd one out.

        trainer rank 0 waiting on the GPU in synchronize after all_reduce; rank 1 is
        elsewhere (the odd one out): sleeping in stop_calling_all_reduce (train.py:22)
    """
    ranked = sorted((p for p in processes
                     if p.target.component == component and p.target.rank is not None),
                    key=lambda p: p.target.rank or 0)
    if len(ranked) < 2:
        return None
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    texts: dict[int, str] = {}
    for stacks in ranked:
        rank = stacks.target.rank or 0
        thread = main_thread(stacks)
        where = where_of(thread.frames, source) if thread is not None else None
        if stacks.stopped:
            key: tuple[str, str, str | None] = (STOPPED, "", None)
            texts[rank] = STOPPED + (f", while {where.text}" if where is not None else "")
        elif where is None:
            key, texts[rank] = ("no stacks", "", None), f"no stacks ({stacks.note or '?'})"
        else:
            key, texts[rank] = (where.kind, where.what, where.after), where.text
        groups.setdefault(key, []).append(rank)

    def short(key: tuple[str, str, str | None]) -> str:
        kind, what, after = key
        return f"{kind} {what}".rstrip() + (f" after {after}" if after else "")

    waiting = {k: v for k, v in groups.items() if k[0] in _WAITING}
    elsewhere = sorted(r for k, v in groups.items() if k[0] not in _WAITING for r in v)
    if len(groups) == 1:
        ((key, ranks),) = groups.items()
        return f"{component} all {len(ranks)} ranks {short(key)}"
    if not waiting:
        # Nobody waits on a peer: a lone rank apart from all the others is still the odd one.
        parts = [f"{_ranks_text(v)} {short(k)}" for k, v in groups.items()]
        lone = [v[0] for v in groups.values() if len(v) == 1]
        text = f"{component} " + "; ".join(parts)
        if len(groups) == 2 and len(lone) == 1 and len(ranked) > 2:
            text += f"; rank {lone[0]} is the odd one out: {texts[lone[0]]}"
        return text
    parts = [f"{_ranks_text(v)} {short(k)}" for k, v in waiting.items()]
    text = f"{component} " + "; ".join(parts)
    collectives = {k[1] if k[0] == COLLECTIVE else k[2] for k in waiting} - {None}
    if len(collectives) > 1:
        text += " (not the same collective: a mismatch)"
    if len(elsewhere) == 1:
        text += f"; rank {elsewhere[0]} is elsewhere (the odd one out): {texts[elsewhere[0]]}"
    elif elsewhere:
        text += f"; {_ranks_text(elsewhere)} are elsewhere: " + "; ".join(
            f"rank {r} {texts[r]}" for r in elsewhere)
    return text
