"""Scenario (first process of its own PID namespace): plant stale processes and decoys, then
check discovery, `airvisor reap --dry-run` and `airvisor reap --yes`. Prints one JSON object.

    stand_ins.py OTHER_USER_UID
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)


import psutil  # noqa: E402
from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.proc._marker import MARKER_COMPONENT_ENV, MARKER_RUN_ENV  # noqa: E402
from airvisor.reaper import default_context, discover_all  # noqa: E402
from airvisor.store import Store  # noqa: E402

SLEEPER = "#!/usr/bin/env python3\nimport time\nwhile True:\n    time.sleep(3600)\n"
# A console script exactly as pip and uv write one for `[project.scripts] NAME = "MODULE:main"`.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""
SLEEPING_MAIN = "import time\n\n\ndef main():\n    time.sleep(600)\n"
# `uv run sft @ x.toml`: uv (no Python) runs the project's `sft` script and waits for it.
UV_STAND_IN = (
    "import setproctitle, subprocess, sys\n"
    "setproctitle.setproctitle('uv run sft @ x.toml')\n"
    "sys.exit(subprocess.call([sys.argv[1], '@', 'x.toml']))\n"
)


def marker(run_id: str, component: str = "trainer") -> dict[str, str]:
    return {MARKER_RUN_ENV: run_id, MARKER_COMPONENT_ENV: component}


def install_packages(site: Path) -> None:
    """Stand-ins of prime-rl's entry modules and of another package with an `inference`
    script: only what the console scripts import."""
    for module in ("prime_rl.entrypoints.sft", "prime_rl.entrypoints.orchestrator",
                   "other_pkg.cli"):
        path = site.joinpath(*module.split("."))
        for parent in [*reversed(path.parents)]:
            if site in parent.parents:
                parent.mkdir(exist_ok=True)
                (parent / "__init__.py").touch()
        path.with_suffix(".py").write_text(SLEEPING_MAIN)


def console_script(bin_dir: Path, name: str, module: str) -> Path:
    script = bin_dir / name
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable, module=module))
    script.chmod(0o755)
    return script


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    other_uid = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
    work = Path(tempfile.mkdtemp(prefix="airvisor-reaper-"))
    work.chmod(0o755)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    site = work / "site"
    site.mkdir()
    install_packages(site)
    for name in ("fake-editor",):
        script = bin_dir / name
        script.write_text(SLEEPER)
        script.chmod(0o755)
    sft = console_script(bin_dir, "sft", "prime_rl.entrypoints.sft")
    orchestrator = console_script(bin_dir, "orchestrator", "prime_rl.entrypoints.orchestrator")
    other_inference = console_script(bin_dir, "inference", "other_pkg.cli")
    native = work / "native"
    native.mkdir()
    shutil.copy("/bin/sleep", native / "orchestrator")  # no Python, named like prime-rl's
    for path in (work, bin_dir, site):
        path.chmod(0o755)
    py_env = {"PYTHONPATH": str(site)}
    p = planting.Planter(work)
    dead, live = planting.unique_run_id("dead"), planting.unique_run_id("live")
    stale: dict[str, int] = {}
    not_ours: dict[str, int] = {}
    decoys: dict[str, int] = {}

    # Stale: marked processes of a run that is not live: a tree whose grandchild called setsid,
    # a SIGTERM-ignorer, and a double-forked orphan.
    tree = p.plant("setsid-grandchild", roles=("root", "child", "grandchild"), env=marker(dead))
    stale.update({f"tree-{k}": v for k, v in tree.pids.items()})
    stale["ignorer"] = p.plant("ignore-term", env=marker(dead)).root
    orphan = p.plant("double-fork", roles=("root", "orphan"), env=marker(dead))
    orphan.popen.wait()
    stale["orphan"] = orphan.pids["orphan"]

    # Not ours, left alone (stopped only with --all): a colleague's `vllm serve` whose API
    # server died (its EngineCore and Worker, retitled with setproctitle, are orphaned), and
    # prime-rl entry points nobody's airvisor started: `uv run sft @ x.toml` and orchestrator.
    vllm = p.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"))
    os.kill(vllm.root, signal.SIGKILL)
    vllm.popen.wait()
    for role in ("engine", "worker"):
        not_ours[role] = vllm.pids[role]
    tracker = vllm.pids["tracker"]  # a multiprocessing helper: follows its engine
    uv = p.spawn([sys.executable, "-c", UV_STAND_IN, str(sft)], env=py_env)
    planting.wait_until(lambda: len(psutil.Process(uv.pid).children()) == 1, what="uv's child")
    not_ours["uv"] = uv.pid
    not_ours["sft"] = psutil.Process(uv.pid).children()[0].pid
    p._record(not_ours["sft"])
    not_ours["orchestrator"] = p.spawn([str(orchestrator), "@", "orch.toml"], env=py_env).pid

    # Decoys: never listed as stale, never stopped (not even with --all).
    decoys["editor"] = p.spawn([sys.executable, str(bin_dir / "fake-editor"),
                                "orchestrator.py"]).pid
    logs = work / "outputs" / "logs"
    logs.mkdir(parents=True)
    (logs / "orchestrator.stdout").write_text("Step 1\n")
    decoys["tail"] = p.spawn(["tail", "-f", str(logs / "orchestrator.stdout")]).pid
    vllm_dir = work / "vllm"
    vllm_dir.mkdir()
    decoys["shell-in-vllm-dir"] = p.spawn(["bash", "-c", "sleep 600; true"], cwd=vllm_dir).pid
    # A program named `orchestrator` that is no Python, and another package's `inference`.
    decoys["native-orchestrator"] = p.spawn([str(native / "orchestrator"), "600"]).pid
    decoys["other-inference"] = p.spawn([str(other_inference), "--port", "1"], env=py_env).pid
    # A vLLM server that is pid 1 of a container's PID namespace.
    ready = work / "ready-container"
    ready.mkdir()
    container = p.spawn(["unshare", "--pid", "--fork", "--kill-child", sys.executable,
                         str(planting.PLANT_SCRIPT), str(ready), "sleep",
                         "vllm serve /models/tiny --port 8000"])
    planting.wait_until(lambda: (ready / "root").exists(), what="the container's vLLM")
    children = psutil.Process(container.pid).children()
    decoys["container-vllm"] = children[0].pid
    p._record(children[0].pid)
    # A live run's vLLM whose API server died a moment ago: the engine and worker show no
    # marker (setproctitle wiped it) but their session's resource tracker does.
    live_vllm = p.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"),
                        env=marker(live, "inference"))
    os.kill(live_vllm.root, signal.SIGKILL)
    live_vllm.popen.wait()
    for role in ("tracker", "engine", "worker"):
        decoys[f"live-{role}"] = live_vllm.pids[role]
    # A live run's component, running.
    decoys["live-run"] = p.plant("setsid-grandchild", roles=("root", "child", "grandchild"),
                                 env=marker(live)).root
    decoys["unmarked"] = p.plant("sleep").root
    if other_uid is not None:
        # Another user's process of a dead run: stale, but kept unless allowed.
        decoys["other-user"] = p.spawn(
            ["setpriv", f"--reuid={other_uid}", f"--regid={other_uid}", "--clear-groups",
             "/usr/bin/python3", str(bin_dir / "fake-editor")], env=marker(dead)).pid
        # setpriv execs the interpreter after Popen returned: wait for that argv.
        other = decoys["other-user"]
        planting.wait_until(lambda: "/usr/bin/python3" in psutil.Process(other).cmdline(),
                            what="the other user's process")

    # A store in which `live` is a live run supervised by this process.
    state = work / "state"
    Store(state / "airvisor.sqlite3").create_run(
        run_id=live, name="live", profile_path=None, profile={}, run_dir=str(work),
        gpus=[], supervisor_pid=os.getpid())

    result: dict[str, object] = {"stale": stale, "not_ours": not_ours, "decoys": decoys,
                                 "tracker": tracker}
    found = discover_all(default_context({live}, state_dir=str(state)))
    result["found"] = {c.pid: c.reason for c in found.candidates}
    result["kept"] = {c.pid: [c.kind, c.blocked_by] for c in found.blocked}
    result["tree"] = {c.pid: [c.depth, c.ppid] for c in found.blocked}

    env = {**os.environ, "AIRVISOR_STATE_DIR": str(state)}
    cli = [sys.executable, "-m", "airvisor", "reap"]
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, env=env,
                         timeout=60)
    result["dry_run_rc"] = dry.returncode
    result["dry_run_out"] = dry.stdout + dry.stderr
    listed = subprocess.run([sys.executable, "-m", "airvisor", "processes", "--json"],
                            capture_output=True, text=True, env=env, timeout=60)
    result["processes_json"] = json.loads(listed.stdout) if listed.returncode == 0 else None
    no_tty = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60,
                            stdin=subprocess.DEVNULL)
    result["no_tty_rc"] = no_tty.returncode
    result["no_tty_out"] = no_tty.stdout + no_tty.stderr
    bad_grace = {}
    for value in ("-1", "nan", "inf"):
        done = subprocess.run([*cli, "--yes", "--grace", value], capture_output=True,
                              text=True, env=env, timeout=60)
        bad_grace[value] = [done.returncode, done.stderr]
    result["bad_grace"] = bad_grace
    result["alive_after_bad_grace"] = [k for k, pid in stale.items()
                                       if planting.pid_alive(pid)]
    started = time.monotonic()
    real = subprocess.run([*cli, "--yes", "--grace", "0.5"], capture_output=True, text=True,
                          env=env, timeout=60)
    result["reap_seconds"] = time.monotonic() - started
    result["reap_rc"] = real.returncode
    result["reap_out"] = real.stdout + real.stderr
    result["alive_stale"] = [k for k, pid in stale.items() if planting.pid_alive(pid)]
    result["alive_not_ours"] = [k for k, pid in not_ours.items() if planting.pid_alive(pid)]
    result["alive_decoys"] = [k for k, pid in decoys.items() if planting.pid_alive(pid)]
    forced = subprocess.run([*cli, "--yes", "--all", "--grace", "0.5"], capture_output=True,
                            text=True, env=env, timeout=60)
    result["all_rc"] = forced.returncode
    result["all_out"] = forced.stdout + forced.stderr
    result["all_alive_not_ours"] = [k for k, pid in not_ours.items() if planting.pid_alive(pid)]
    result["all_alive_decoys"] = [k for k, pid in decoys.items() if planting.pid_alive(pid)]
    result["all_tracker_alive"] = planting.pid_alive(tracker)
    p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
