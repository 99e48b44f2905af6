"""Which processes are stale training processes: pure verdicts over `ProcessFacts`.

Ownership, not resemblance, decides. A process is stale when it belongs to an airvisor run that
is not live (by the run's cgroup, or its run marker, its session's or an ancestor's), or when it
is a known training kind that holds memory on a GPU the profile needs or listens on a port the
profile needs. Everything else that looks like training is listed as "not ours, left alone" and
is stopped only with an explicit `--all`. A run of another airvisor (another state dir) is
judged by that airvisor's store; processes inside another PID namespace (a container's) are
Docker's business. Other owners' live work is never stale: a process in a Slurm job that Slurm
does not say has ended (`slurm_job_claims`), or in a container runtime's or Kubernetes' cgroup,
is that owner's, listed as such and stopped only with `--all`. In the subreaper fallback the
run's recorded process tree (`tree_ownership`) names what a marker no longer does.

A kind is recognised by what a process *is* (its executable, its argv[0..n] with the Python
interpreter and its options peeled off, its process title, the console script it runs, its
environment's torchrun variables), never by a substring of its whole command line: `vim
orchestrator.py`, `tail -f outputs/logs/orchestrator.stdout`, a program named `orchestrator`
that is no Python, or another package's `inference` script are not training processes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from airvisor.proc._argv import PRIME_RL_SCRIPTS, parse_program
from airvisor.proc._facts import ProcessFacts
from airvisor.proc._tree import RecordedTree, same_process

# The kinds the reaper knows, with the words a reason uses for them.
KIND_LABELS: dict[str, str] = {
    "airvisor-run": "a process of an airvisor run",
    "uv-launcher": "uv launcher",
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

PRIME_RL_PACKAGE = "prime_rl"
VLLM_SERVER_MODULES = frozenset({"vllm.entrypoints.openai.api_server",
                                 "vllm.entrypoints.api_server"})
TORCHRUN_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
MP_HELPER_CODE = ("from multiprocessing.resource_tracker import",
                  "from multiprocessing.forkserver import")


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
    if name in PRIME_RL_SCRIPTS and program.interpreter and is_prime_rl_module(
            facts.script_module):
        return "prime-rl", f"prime-rl's {name!r} entry point ({facts.script_module})"
    if facts.torchelastic_worker:
        return "torchrun-worker", "torchrun's TORCHELASTIC_RUN_ID in its environment"
    return None


def is_prime_rl_module(module: str | None) -> bool:
    return module is not None and (module == PRIME_RL_PACKAGE
                                   or module.startswith(PRIME_RL_PACKAGE + "."))


def is_uv_launcher(facts: ProcessFacts) -> bool:
    """`uv run ...` / `uvx ...`: uv starts the entry point as its child and waits for it."""
    program = parse_program(facts.argv)
    if program.interpreter:
        return False
    if program.name == "uvx":
        return True
    return program.name == "uv" and "run" in program.args[:4]


def is_mp_helper(facts: ProcessFacts) -> bool:
    """multiprocessing's resource tracker / fork server (vLLM's API server starts one)."""
    program = parse_program(facts.argv)
    return program.code is not None and program.code.startswith(MP_HELPER_CODE)


def owner_instance(state_dir: str) -> str:
    """The instance id of the airvisor keeping its state in `state_dir` (already resolved, as
    markers and cgroup attributes record it): the same as `airvisor.proc.instance_id`."""
    return "sv-" + hashlib.sha256(state_dir.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ReapContext:
    """What the verdicts need to know beyond the process itself."""

    live_run_ids: frozenset[str] = frozenset()  # live runs of this airvisor
    # The daemon / CLI itself and its ancestors: never candidates.
    protected_pids: frozenset[int] = frozenset()
    # Processes the caller keeps, with all their descendants (e.g. components still running).
    kept_pids: frozenset[int] = frozenset()
    own_uid: int = 0
    allow_other_users: bool = False
    profile_gpus: frozenset[int] = frozenset()
    now: float = 0.0
    profile_ports: frozenset[int] = frozenset()
    # This airvisor's instance id (None: every run is judged as this airvisor's).
    own_instance: str | None = None
    own_state_dir: str | None = None
    # Other airvisors' live runs, by instance id; None where that airvisor's store is unreadable.
    foreign_live: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    # Of the runs seen, those the owner's store records at all (None: not checked, every run
    # counts as known). A run its store does not know is not shown to be dead.
    known_run_ids: frozenset[str] | None = None
    foreign_known: Mapping[str, frozenset[str]] = field(default_factory=dict)
    reap_unowned: bool = False  # `--all`: also training processes that are not ours
    own_pid_namespace: int | None = None
    # Subreaper fallback: orphans this supervisor adopted, pid -> the run they came from.
    adopted: Mapping[int, str] = field(default_factory=dict)
    # Slurm jobs seen on processes: job id -> phase per Slurm (queued, running, ending, ended,
    # unknown: Slurm could not be asked). A job missing here counts as unknown.
    slurm_jobs: Mapping[str, str] = field(default_factory=dict)
    # The Slurm job and the other supervisor's cgroup the caller itself runs in: processes in
    # its own allocation or container are judged as if there were no job or container.
    own_slurm_job: str | None = None
    own_supervisor_cgroup: str | None = None
    # Subreaper fallback: processes a run's recorded process tree names (see `tree_ownership`).
    recorded: Mapping[int, Ownership] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    kind: str
    reason: str
    # Set when the process would be a candidate but is left alone: not ours, another user's,
    # another airvisor's whose state is unknown, inside a container.
    blocked_by: str | None = None
    # Why it is (or would be) stale: "owner" (a run that is not live), "in-the-way" (holds the
    # profile's GPUs or ports), "all" (--all), "unowned" (left alone), "relative",
    # "other-owner" (a live Slurm job's or another supervisor's).
    basis: str = ""
    # Whose process it is, in words: "airvisor run R", "Slurm job 12", "nobody (not started by
    # airvisor)", ... (recorded with every process a reap stops or leaves).
    owner: str = ""
    # The airvisor run it belongs to, and that airvisor's state dir (None: unknown, a marker
    # of an older airvisor): whose events a reap of it is recorded in.
    run_id: str | None = None
    run_state_dir: str | None = None

    @property
    def stale(self) -> bool:
        return self.blocked_by is None


NOT_OURS = "not ours, left alone (stopped only with --all)"


@dataclass(frozen=True)
class Ownership:
    """The airvisor run a process belongs to, and how that is known."""

    run_id: str
    component: str | None
    instance: str | None  # None: a marker of an older airvisor (no owner recorded)
    state_dir: str | None
    how: str


def ownership(facts: ProcessFacts, context: ReapContext | None = None) -> Ownership | None:
    """By the run's cgroup (the kernel's record), else by the marker in its environment, else
    by the marker of its session (its own wiped by setproctitle), else (subreaper fallback) by
    the run's recorded process tree, else by the marker of an ancestor (a child of a run's
    process is the run's whatever it did to its environment), else as an orphan this
    supervisor adopted from a run."""
    run = facts.cgroup_run
    if run is not None:
        return Ownership(run.run_id, run.component, run.instance, run.state_dir,
                         f"cgroup {facts.cgroup}")
    marker = facts.marker or facts.session_marker
    if marker is None:
        if context is not None and facts.pid in context.recorded:
            return context.recorded[facts.pid]
        if facts.ancestor_markers:
            nearest = facts.ancestor_markers[0]
            return Ownership(nearest.run_id, nearest.component,
                             owner_instance(nearest.owner) if nearest.owner else None,
                             nearest.owner, "marker of an ancestor")
        if context is not None and facts.pid in context.adopted:
            return Ownership(context.adopted[facts.pid], None, None, None,
                             "orphan adopted by this supervisor (subreaper)")
        return None
    how = "marker" if facts.marker is not None else "marker of its session"
    instance = owner_instance(marker.owner) if marker.owner else None
    return Ownership(marker.run_id, marker.component, instance, marker.owner, how)


def tree_ownership(facts_by_pid: Mapping[int, ProcessFacts],
                   trees: Iterable[RecordedTree]) -> dict[int, Ownership]:
    """Subreaper fallback: the processes the recorded trees of runs name, whatever they did to
    their title, environment, session or parent after they were recorded.

    A process is its run's when the tree records it (same pid and start time); when its session
    is that of a component the tree records (the session id is the component's pid, and the
    kernel does not give that pid to another process while the session lives) and another
    member of the session is the run's by identity or marker; or when an ancestor is one of
    those (a child born after the supervisor died).
    """
    owned: dict[int, Ownership] = {}
    sessions: dict[int, Ownership] = {}
    for tree in trees:
        instance = owner_instance(tree.owner)
        for entry in tree.entries:
            current = facts_by_pid.get(entry.pid)
            if entry.root and (current is None
                               or same_process(current.create_time, entry.create_time)):
                sessions[entry.pid] = Ownership(
                    tree.run_id, entry.component, instance, tree.owner,
                    f"in the session of run {tree.run_id}'s component pid {entry.pid} "
                    "(recorded process tree)")
            if current is not None and same_process(current.create_time, entry.create_time):
                owned[entry.pid] = Ownership(
                    tree.run_id, entry.component, instance, tree.owner,
                    "recorded in the run's process tree (subreaper fallback)")
    # A session counts only while one of its members is the run's by identity or marker: a
    # session whose id is a reused pid (the component long gone) has no such member.
    anchored = {sid for sid, session in sessions.items() if any(
        f.sid == sid and ((f.pid in owned and owned[f.pid].run_id == session.run_id)
                          or (f.marker is not None and f.marker.run_id == session.run_id))
        for f in facts_by_pid.values())}
    for pid, facts in facts_by_pid.items():
        if pid not in owned and facts.sid in anchored:
            owned[pid] = sessions[facts.sid]
    for pid, facts in facts_by_pid.items():
        if pid in owned:
            continue
        for ancestor in facts.ancestors:
            if ancestor in owned:
                parent = owned[ancestor]
                owned[pid] = Ownership(parent.run_id, parent.component, parent.instance,
                                       parent.state_dir, f"descendant of pid {ancestor}, "
                                       f"{parent.how}")
                break
    return owned


def run_is_live(run_id: str, instance: str | None, context: ReapContext) -> bool | None:
    """True / False, or None when the owning airvisor's state cannot be read."""
    if instance is None or context.own_instance is None or instance == context.own_instance:
        return run_id in context.live_run_ids
    live = context.foreign_live.get(instance)
    if live is None:
        return None
    return run_id in live


def run_is_known(run_id: str, instance: str | None, context: ReapContext) -> bool:
    """Does the owning airvisor's store record the run? (Markers without an owner, from older
    airvisors, are judged by this airvisor's live runs alone, as before.)"""
    if instance is None:
        return True
    if context.own_instance is None or instance == context.own_instance:
        return context.known_run_ids is None or run_id in context.known_run_ids \
            or run_id in context.live_run_ids
    return run_id in context.foreign_known.get(instance, frozenset())


NOT_KNOWN = ("its run is not recorded in the store of the airvisor it names, so nothing shows "
             "it is stale; left alone (stopped only with --all)")


def _is_foreign(own: Ownership, context: ReapContext) -> bool:
    return own.instance is not None and context.own_instance is not None \
        and own.instance != context.own_instance


def _gpu_note(facts: ProcessFacts, context: ReapContext) -> str:
    held = {gpu: used for gpu, used in facts.gpu_memory.items() if used > 0}
    if not held:
        return ""
    on_profile = sorted(g for g in held if g in context.profile_gpus)
    parts = ", ".join(f"{held[g] / 2**30:.1f} GiB on GPU {g}" for g in sorted(held))
    if on_profile:
        return f"; holds {parts} (the profile uses GPU {', '.join(map(str, on_profile))})"
    return f"; holds {parts}"


def _in_the_way(facts: ProcessFacts, context: ReapContext) -> str | None:
    """Why an unowned training process blocks the profile's run, or None."""
    gpus = sorted(g for g, used in facts.gpu_memory.items() if g in context.profile_gpus)
    ports = sorted(set(facts.listening_ports) & context.profile_ports)
    parts = []
    if gpus:
        parts.append(f"holds memory on GPU {', '.join(map(str, gpus))}, which the profile needs")
    if ports:
        parts.append(f"listens on port {', '.join(map(str, ports))}, which the profile needs")
    return " and ".join(parts) or None


def slurm_job_claims(job_id: str | None, phase: str | None, own_job: str | None) -> str | None:
    """Whether a process in Slurm job `job_id` (`phase` per Slurm: queued, running, ending,
    ended, unknown; None: not asked) is that job's live work: the words saying so, else None.

    A job that Slurm says has ended no longer owns its leftovers (they are judged like any
    process); one Slurm cannot be asked about is taken to be live (nothing shows it is over).
    The caller's own job (`airvisor` started inside an allocation) claims nothing: its
    processes are judged by their airvisor run as everywhere else.
    """
    if job_id is None or job_id == own_job:
        return None
    if phase == "ended":
        return None
    if phase in ("queued", "running", "ending"):
        return f"Slurm job {job_id} ({phase} per Slurm)"
    return f"Slurm job {job_id} (Slurm could not say whether it still runs)"


def other_owner(facts: ProcessFacts, context: ReapContext) -> str | None:
    """The live Slurm job or other supervisor (a container runtime, Kubernetes) whose work the
    process is, or None."""
    job = slurm_job_claims(facts.slurm_job, context.slurm_jobs.get(facts.slurm_job or ""),
                           context.own_slurm_job)
    if job is not None:
        return job
    if facts.supervisor_cgroup is not None \
            and facts.supervisor_cgroup != context.own_supervisor_cgroup:
        return f"{facts.supervisor_cgroup} (cgroup {facts.cgroup})"
    return None


OTHER_OWNER = "the live work of {}: not stale, left alone (stopped only with --all)"


def in_other_pid_namespace(facts: ProcessFacts, context: ReapContext) -> bool:
    return (context.own_pid_namespace is not None and facts.pid_namespace is not None
            and facts.pid_namespace != context.own_pid_namespace)


def classify(facts: ProcessFacts, context: ReapContext) -> Verdict | None:
    """The verdict on one process, or None when it is nothing the reaper lists.

    Stale: a process of an airvisor run that is not live (cgroup or marker); a known training
    kind (vLLM, torchrun and its workers, prime-rl entry points, airvisor's demo stand-ins)
    that holds memory on the profile's GPUs or listens on its ports. Listed but left alone:
    other training processes (unless `reap_unowned`), runs of an airvisor whose state cannot
    be read, processes inside another PID namespace, other users' processes (unless allowed).
    Never listed: the caller and its ancestors, processes of live runs (by their own ownership
    or an ancestor's marker), zombies, kept pids.
    """
    if facts.pid in context.protected_pids or facts.pid in (0, 1):
        return None
    if facts.status == "zombie":
        return None
    if context.kept_pids and (facts.pid in context.kept_pids
                              or any(pid in context.kept_pids for pid in facts.ancestors)):
        return None
    own = ownership(facts, context)
    live = run_is_live(own.run_id, own.instance, context) if own is not None else None
    if own is not None and live:
        return None
    for m in facts.ancestor_markers:
        if run_is_live(m.run_id, owner_instance(m.owner) if m.owner else None, context):
            return None
    kind_match = known_kind(facts)
    if own is None and kind_match is None:
        return None

    blocked: str | None = None
    basis = "owner"
    owner = "nobody (not started by airvisor)"
    if own is not None:
        component = f" ({own.component})" if own.component else ""
        kind = kind_match[0] if kind_match else "airvisor-run"
        foreign = _is_foreign(own, context)
        whose = f" of the airvisor at {own.state_dir or 'an unknown state dir'}" if foreign \
            else ""
        owner = f"airvisor run {own.run_id}{component}{whose}"
        if live is None:
            reason = f"{own.how}: run {own.run_id}{component}{whose}"
            blocked = ("belongs to another airvisor whose state cannot be read, so whether "
                       "the run is live is unknown; left alone")
        elif not run_is_known(own.run_id, own.instance, context):
            reason = f"{own.how}: run {own.run_id}{component}{whose}, unknown to its store"
            if context.reap_unowned:
                reason += " (stopped because of --all)"
                basis = "all"
            else:
                blocked = NOT_KNOWN
        else:
            reason = f"{own.how}: run {own.run_id}{component}{whose}, which is not live"
    else:
        assert kind_match is not None
        kind, matched = kind_match
        what = f"{KIND_LABELS[kind]} ({matched})"
        way = _in_the_way(facts, context)
        if way is not None:
            reason = f"{what}, not of a live airvisor run, {way}"
            basis = "in-the-way"
        elif context.reap_unowned:
            reason = f"{what}, not started by airvisor (stopped because of --all)"
            basis = "all"
        else:
            reason = f"{what}, not started by airvisor (no run cgroup or marker)"
            blocked = NOT_OURS
            basis = "unowned"
    claimed_by = other_owner(facts, context)
    if claimed_by is not None:
        # Another owner's live work is never stale: not for its GPUs or ports, not for the
        # airvisor marker it inherited, only with --all.
        owner = claimed_by
        reason += f"; runs in {claimed_by}"
        if context.reap_unowned:
            if blocked is None or blocked in (NOT_OURS, NOT_KNOWN):
                blocked = None
                if basis != "all":
                    reason += " (stopped because of --all)"
                basis = "all"
        else:
            blocked = OTHER_OWNER.format(claimed_by)
            basis = "other-owner"
    if in_other_pid_namespace(facts, context):
        blocked = ("inside another PID namespace (a container's): left to Docker, whose "
                   "containers airvisor reaps by label")
    reason += _gpu_note(facts, context)
    if facts.ppid == 1:
        reason += "; orphaned (parent is init)"
    if blocked is None and facts.uid is not None and facts.uid != context.own_uid \
            and not context.allow_other_users:
        blocked = (f"belongs to user {facts.username or facts.uid} "
                   f"(set reaper.allow_other_users to include it)")
    return Verdict(kind, reason, blocked, basis, owner,
                   run_id=own.run_id if own is not None else None,
                   run_state_dir=own.state_dir if own is not None else None)


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
            stale[facts.pid] = Judged(facts, Verdict(
                "mp-helper", reason, None, "relative", owner.verdict.owner,
                run_id=owner.verdict.run_id, run_state_dir=owner.verdict.run_state_dir))
    blocked = _add_in_the_way_groups(context, stale, blocked)
    _add_uv_launchers(facts_by_pid, context, stale, blocked)
    return Judgement(stale=sorted(stale.values(), key=lambda j: j.facts.pid), blocked=blocked)


def _add_in_the_way_groups(context: ReapContext, stale: dict[int, Judged],
                           blocked: list[Judged]) -> list[Judged]:
    """An unowned training process in the profile's way takes the unowned training processes
    of its process group along (vLLM's API server and engine core when only its worker holds
    the GPU): stopping the worker alone would leave a server without its engine."""
    in_the_way: dict[int, Judged] = {}
    for j in sorted(stale.values(), key=lambda j: j.facts.pid):
        if j.verdict.basis == "in-the-way" and j.facts.pgid is not None:
            in_the_way.setdefault(j.facts.pgid, j)
    still: list[Judged] = []
    for j in blocked:
        owner = in_the_way.get(j.facts.pgid) if j.facts.pgid is not None else None
        other_user = j.facts.uid != context.own_uid and not context.allow_other_users
        if owner is None or j.verdict.basis != "unowned" or j.verdict.blocked_by != NOT_OURS \
                or other_user:
            still.append(j)
            continue
        reason = (f"{j.verdict.reason}; in the process group of pid {owner.facts.pid}, which "
                  f"is in the profile's way")
        stale[j.facts.pid] = Judged(j.facts, replace(j.verdict, reason=reason, blocked_by=None,
                                                     basis="relative"))
    return still


def _add_uv_launchers(facts_by_pid: Mapping[int, ProcessFacts], context: ReapContext,
                      stale: dict[int, Judged], blocked: list[Judged]) -> None:
    """`uv run sft @ x.toml` is uv (no Python) waiting for prime-rl's `sft` script run by the
    project's interpreter: it shares its child's verdict."""
    listed = {j.facts.pid for j in blocked} | set(stale)
    for judged in [*stale.values(), *blocked]:
        if judged.verdict.kind != "prime-rl":
            continue
        parent = facts_by_pid.get(judged.facts.ppid)
        if parent is None or parent.pid in listed or not is_uv_launcher(parent):
            continue
        if parent.pid in context.protected_pids or parent.status == "zombie" \
                or parent.pid in (0, 1):
            continue
        reason = (f"{KIND_LABELS['uv-launcher']} of pid {judged.facts.pid} "
                  f"({KIND_LABELS['prime-rl']}): {judged.verdict.reason}")
        verdict = Verdict("uv-launcher", reason, judged.verdict.blocked_by,
                          owner=judged.verdict.owner, run_id=judged.verdict.run_id,
                          run_state_dir=judged.verdict.run_state_dir)
        if verdict.stale and parent.uid != context.own_uid and not context.allow_other_users:
            verdict = replace(verdict, blocked_by=f"belongs to user "
                              f"{parent.username or parent.uid} (set "
                              f"reaper.allow_other_users to include it)")
        listed.add(parent.pid)
        if verdict.stale:
            stale[parent.pid] = Judged(parent, verdict)
        else:
            blocked.append(Judged(parent, verdict))
