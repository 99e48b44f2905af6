"""Which processes are stale training processes: pure verdicts over `ProcessFacts`.

A process is judged by what it *is* (its executable, its argv[0..n] with the Python interpreter
and its options peeled off, its process title, its run marker, its environment's torchrun
variables), never by a substring of its whole command line: `vim orchestrator.py`,
`tail -f outputs/logs/orchestrator.stdout` or a shell whose cwd is a directory named vllm are
not training processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from airvisor.proc._facts import ProcessFacts

# The kinds the reaper knows, with the words a reason uses for them.
KIND_LABELS: dict[str, str] = {
    "airvisor-run": "a process of an airvisor run",
    "vllm-api-server": "vLLM API server",
    "vllm-engine": "vLLM engine core",
    "vllm-worker": "vLLM worker",
    "vllm-process": "vLLM process",
    "vllm-router": "vLLM router",
    "torchrun": "torchrun",
    "torchrun-worker": "torchrun elastic worker",
    "prime-rl": "prime-rl entry point",
    "airvisor-demo": "airvisor demo stand-in",
    "mp-helper": "multiprocessing helper",
}

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?[a-z]?$")
# Interpreter options that take a separate argument.
_PYTHON_OPTS_WITH_ARG = {"-W", "-X", "--check-hash-based-pycs"}
PRIME_RL_SCRIPTS = frozenset({"inference", "orchestrator", "trainer", "rl", "env-server",
                              "env_server"})
VLLM_SERVER_MODULES = frozenset({"vllm.entrypoints.openai.api_server",
                                 "vllm.entrypoints.api_server"})
TORCHRUN_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
MP_HELPER_CODE = ("from multiprocessing.resource_tracker import",
                  "from multiprocessing.forkserver import")


@dataclass(frozen=True)
class Program:
    """What an argv runs once a Python interpreter (and its options) is peeled off."""

    interpreter: bool  # argv[0] was a Python interpreter
    name: str  # basename of the program or script ("" for -c and bare interpreters)
    module: str | None  # for `python -m MODULE`
    code: str | None  # for `python -c CODE`
    args: tuple[str, ...]  # the arguments after the program


def parse_program(argv: tuple[str, ...]) -> Program:
    if not argv:
        return Program(False, "", None, None, ())
    first = os.path.basename(argv[0])
    if not _PYTHON.match(first):
        return Program(False, first, None, None, tuple(argv[1:]))
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return Program(True, "", argv[i + 1], None, tuple(argv[i + 2:]))
        if arg.startswith("-m") and len(arg) > 2:
            return Program(True, "", arg[2:], None, tuple(argv[i + 1:]))
        if arg == "-c" and i + 1 < len(argv):
            return Program(True, "", None, argv[i + 1], tuple(argv[i + 2:]))
        if arg in _PYTHON_OPTS_WITH_ARG:
            i += 2
            continue
        if arg == "--" or not arg.startswith("-") or arg == "-":
            if arg == "--":
                i += 1
            break
        i += 1
    if i >= len(argv):
        return Program(True, "", None, None, ())
    return Program(True, os.path.basename(argv[i]), None, None, tuple(argv[i + 1:]))


def known_kind(facts: ProcessFacts) -> tuple[str, str] | None:
    """(kind, what matched) when the process is a known training process, else None."""
    title = facts.argv[0] if facts.argv else ""
    # vLLM titles its processes "VLLM::EngineCore", "VLLM::Worker", ... (setproctitle rewrites
    # the cmdline, and the kernel's comm keeps the first 15 characters).
    for name in (title, facts.comm):
        if name.startswith("VLLM::"):
            role = name[len("VLLM::"):]
            if role.startswith("EngineCor"):
                return "vllm-engine", f"process title {name!r}"
            if role.startswith("Worker"):
                return "vllm-worker", f"process title {name!r}"
            return "vllm-process", f"process title {name!r}"
    program = parse_program(facts.argv)
    exe_name = os.path.basename(facts.exe)
    if program.module is not None:
        module = program.module
        if module in VLLM_SERVER_MODULES:
            return "vllm-api-server", f"python -m {module}"
        if module == "vllm.entrypoints.cli.main" and program.args[:1] == ("serve",):
            return "vllm-api-server", f"python -m {module} serve"
        if module == "vllm_router" or module.startswith("vllm_router."):
            return "vllm-router", f"python -m {module}"
        if module in TORCHRUN_MODULES:
            return "torchrun", f"python -m {module}"
        if module == "prime_rl" or module.startswith("prime_rl."):
            return "prime-rl", f"python -m {module}"
        if module == "airvisor.demo" or module.startswith("airvisor.demo."):
            return "airvisor-demo", f"python -m {module} {' '.join(program.args[:1])}".rstrip()
    if program.code is not None and program.code.startswith(MP_HELPER_CODE):
        return None  # judged by its relatives (see `classify`), never on its own
    name = program.name
    if name == "vllm" and program.args[:1] == ("serve",):
        return "vllm-api-server", "vllm serve"
    if name == "vllm-router" or exe_name == "vllm-router":
        return "vllm-router", "vllm-router"
    if name == "torchrun":
        return "torchrun", "torchrun"
    if name in PRIME_RL_SCRIPTS:
        return "prime-rl", f"prime-rl's {name!r} entry point"
    if facts.torchelastic_worker:
        return "torchrun-worker", "torchrun's TORCHELASTIC_RUN_ID in its environment"
    return None


def is_mp_helper(facts: ProcessFacts) -> bool:
    """multiprocessing's resource tracker / fork server (vLLM's API server starts one)."""
    program = parse_program(facts.argv)
    return program.code is not None and program.code.startswith(MP_HELPER_CODE)


@dataclass(frozen=True)
class ReapContext:
    """What the verdicts need to know beyond the process itself."""

    live_run_ids: frozenset[str] = frozenset()
    # The daemon / CLI itself and its ancestors: never candidates.
    protected_pids: frozenset[int] = frozenset()
    # Processes the caller keeps, with all their descendants (e.g. components still running).
    kept_pids: frozenset[int] = frozenset()
    own_uid: int = 0
    allow_other_users: bool = False
    profile_gpus: frozenset[int] = frozenset()
    now: float = 0.0


@dataclass(frozen=True)
class Verdict:
    kind: str
    reason: str
    # Set when the process would be a candidate but a safety rule keeps it off the list.
    blocked_by: str | None = None

    @property
    def stale(self) -> bool:
        return self.blocked_by is None


def _gpu_note(facts: ProcessFacts, context: ReapContext) -> str:
    held = {gpu: used for gpu, used in facts.gpu_memory.items() if used > 0}
    if not held:
        return ""
    on_profile = sorted(g for g in held if g in context.profile_gpus)
    parts = ", ".join(f"{held[g] / 2**30:.1f} GiB on GPU {g}" for g in sorted(held))
    if on_profile:
        return f"; holds {parts} (the profile uses GPU {', '.join(map(str, on_profile))})"
    return f"; holds {parts}"


def classify(facts: ProcessFacts, context: ReapContext) -> Verdict | None:
    """The verdict on one process, or None when it is not a stale training process.

    Candidates: a process carrying the marker of a run that is not live; a known training kind
    (vLLM, torchrun and its workers, prime-rl entry points, airvisor's demo stand-ins) that no
    live run owns. Never: the caller and its ancestors, processes of live runs (by their own
    marker or an ancestor's), zombies, and (unless allowed) other users' processes.
    """
    if facts.pid in context.protected_pids or facts.pid in (0, 1):
        return None
    if facts.status == "zombie":
        return None
    if context.kept_pids and (facts.pid in context.kept_pids
                              or any(pid in context.kept_pids for pid in facts.ancestors)):
        return None
    live = context.live_run_ids
    marker = facts.marker or facts.session_marker
    if marker is not None and marker.run_id in live:
        return None
    if any(m.run_id in live for m in facts.ancestor_markers):
        return None

    verdict: Verdict | None = None
    kind_match = known_kind(facts)
    if marker is not None:
        component = f" ({marker.component})" if marker.component else ""
        how = "marker" if facts.marker is not None else "marker of its session"
        kind = kind_match[0] if kind_match else "airvisor-run"
        verdict = Verdict(kind, f"{how}: run {marker.run_id}{component}, which is not live")
    elif kind_match is not None:
        kind, matched = kind_match
        verdict = Verdict(kind, f"{KIND_LABELS[kind]} ({matched}) that no live airvisor run "
                                f"owns")
    if verdict is None:
        return None
    reason = verdict.reason + _gpu_note(facts, context)
    if facts.ppid == 1:
        reason += "; orphaned (parent is init)"
    blocked = None
    if facts.uid is not None and facts.uid != context.own_uid and not context.allow_other_users:
        blocked = (f"belongs to user {facts.username or facts.uid} "
                   f"(set reaper.allow_other_users to include it)")
    return Verdict(verdict.kind, reason, blocked)


@dataclass(frozen=True)
class Judged:
    facts: ProcessFacts
    verdict: Verdict


@dataclass(frozen=True)
class Judgement:
    stale: list[Judged] = field(default_factory=list)
    blocked: list[Judged] = field(default_factory=list)


def judge_all(facts_by_pid: Mapping[int, ProcessFacts], context: ReapContext) -> Judgement:
    """Verdicts over every process, plus multiprocessing helpers of stale processes.

    A resource tracker (`python -c 'from multiprocessing.resource_tracker import main...'`) is
    generic; it is stale when its parent is stale, or when it is an orphan in the process group
    of a stale process (vLLM's tracker outlives a SIGKILLed API server that way).
    """
    stale: dict[int, Judged] = {}
    blocked: list[Judged] = []
    for facts in facts_by_pid.values():
        verdict = classify(facts, context)
        if verdict is None:
            continue
        judged = Judged(facts, verdict)
        if verdict.stale:
            stale[facts.pid] = judged
        else:
            blocked.append(judged)
    # The first (lowest pid) stale process of each group: usually the group's oldest member.
    stale_groups: dict[int, Judged] = {}
    for j in sorted(stale.values(), key=lambda j: j.facts.pid):
        if j.facts.pgid is not None:
            stale_groups.setdefault(j.facts.pgid, j)
    for facts in facts_by_pid.values():
        if facts.pid in stale or not is_mp_helper(facts):
            continue
        if facts.pid in context.protected_pids or facts.status == "zombie":
            continue
        if facts.uid != context.own_uid and not context.allow_other_users:
            continue
        owner = stale.get(facts.ppid)
        if owner is None and facts.ppid == 1 and facts.pgid in stale_groups:
            owner = stale_groups[facts.pgid]
        if owner is not None:
            reason = (f"{KIND_LABELS['mp-helper']} of stale pid {owner.facts.pid} "
                      f"({KIND_LABELS[owner.verdict.kind]})")
            if facts.ppid == 1:
                reason += "; orphaned (parent is init)"
            stale[facts.pid] = Judged(facts, Verdict("mp-helper", reason))
    return Judgement(stale=sorted(stale.values(), key=lambda j: j.facts.pid), blocked=blocked)
