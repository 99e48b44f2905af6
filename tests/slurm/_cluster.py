"""A real Slurm cluster for the tests: Debian bookworm's Slurm 22.05 and munge.

What runs (all as root, all state under ``STATE_DIR``, default ``/opt/airvisor-test/slurm``,
``$AIRVISOR_SLURM_DIR`` to move it; the system's ``/etc/slurm`` and ``/etc/munge`` are never read):

- on this machine: ``munged`` (own key and socket), ``slurmctld`` and one ``slurmd``, the node
  named after this machine's short hostname, alone in partition ``local``;
- when Docker and the node image (tests/images/build_slurm_node_image.sh) are there: two
  container nodes ``node1`` and ``node2`` (partition ``multi``) on the Docker network
  ``airvisor-slurm`` (fixed addresses), each running its own munged with the same key and
  slurmd (scripts/slurm/node-entrypoint.sh), under Docker's --init.

Every node declares 8 CPUs and 8 GPUs (``--gres=gpu:8 --exclusive``, as prime-rl's sbatch
templates ask, is granted; steps get CUDA_VISIBLE_DEVICES; no GPU is touched). Every node sees,
at the same path: the shared directory (``STATE_DIR/shared``, read-write), the
checkout under test and its venv, and the venv's base interpreter (read-only), so a job on any
node runs ``<cluster.python> -m airvisor.demo ...``. Jobs run as root. The daemons stay up after
the tests (the next session finds them and starts in a second); ``python tests/slurm/_cluster.py
down`` stops everything this module started (processes found by our pid files and our paths,
containers by our label), ``up`` starts it, ``status`` prints sinfo.

Fixture contract (tests/slurm/conftest.py: ``slurm_cluster`` session-scoped, ``slurm_multi``
per test, which also puts every container node back in service before and after the test):

``SlurmCluster``
    ``env``: add to ``os.environ`` for sbatch/squeue/scancel/scontrol/sinfo/srun (SLURM_CONF);
    ``conf_path``; ``partitions`` (name -> node names; ``local`` always, ``multi`` with Docker);
    ``shared_dir`` and ``tmp_shared(name)`` (a fresh directory under it per call); ``python``
    (the venv's interpreter, airvisor importable on every node); ``repo`` (the checkout);
    ``run(*argv)`` (a Slurm command with ``env``); ``sbatch(*argv) -> job id`` (--parsable);
    ``job_state(job_id)``, ``job_info(job_id)`` (scontrol's fields) and ``wait_job(job_id,
    timeout)`` (final state, see below); ``node_states()``; ``node_processes(node)`` (command
    lines of every process on a node);
    ``kill_node(name)`` (``docker kill``: the node dies abruptly; Slurm marks it DOWN some
    seconds later; its jobs end NODE_FAIL, or FAILED when srun notices first: timing decides);
    ``restore_node(name)`` (starts the container again, resumes the node, waits until idle);
    ``ensure_nodes_up()``; ``wait_idle(nodes)``.

Finished jobs: there is no slurmdbd (it needs MariaDB), so ``sacct`` has no accounting store.
slurmctld keeps a finished job's record for ``MinJobAge`` (3600 s here): ``scontrol show job
-o ID`` gives ``JobState=`` COMPLETED / FAILED / TIMEOUT / NODE_FAIL / CANCELLED / OUT_OF_MEMORY
with ``ExitCode=``. ``squeue --json`` works (openapi v0.0.38) and lists finished jobs too, but
in 22.05 ignores ``-j``/``-t`` (filter by ``job_id`` yourself); ``scontrol --json`` does not exist
before 23.02. ``jobcomp/filetxt`` appends one line per finished job to ``STATE_DIR/log/
jobcomp.txt``, kept across restarts, which ``sacct -c -j ID`` reads (its state is right, its
ExitCode column is always 0:0).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import ipaddress
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("AIRVISOR_SLURM_DIR", "/opt/airvisor-test/slurm"))
# Not Slurm's default ports: a machine with a Slurm of its own keeps it.
SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
NETWORK = "airvisor-slurm"
# Outside Docker's default address pools, so no network Docker allocates by itself collides.
SUBNET = ipaddress.ip_network(os.environ.get("AIRVISOR_SLURM_SUBNET", "10.213.77.0/24"))
LABEL = "airvisor.test-slurm"
CONTAINER_NODES = ("node1", "node2")
# A dead node is noticed within about this many seconds (slurmctld pings every third of it).
SLURMD_TIMEOUT = 6
GPUS_PER_NODE = 8
SHARED_KEEP_S = 24 * 3600
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE",
})


class ClusterError(RuntimeError):
    """The cluster cannot be set up or does not answer; the message says what and where."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where this cluster keeps its files (all under one state directory)."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket.2"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def gpu_dir(self) -> Path:
        return self.root / "dev"

    @property
    def jobcomp(self) -> Path:
        return self.log / "jobcomp.txt"


def _venv_python() -> Path:
    """The checkout's venv interpreter (not resolved: the venv's own path, as on the nodes)."""
    candidate = REPO / ".venv" / "bin" / "python"
    return candidate if candidate.exists() else Path(sys.executable)


def _base_prefix(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix)"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _bind_mounts(layout: Layout, python: Path) -> dict[str, bool]:
    """Host paths every container node sees at the same path -> read-only."""
    mounts = {
        str(layout.etc): True,
        str(layout.gpu_dir): True,
        str(layout.munge_key): True,
        str(layout.log): False,
        str(layout.shared): False,
        str(REPO): True,
    }
    venv = python.parent.parent
    if not venv.resolve().is_relative_to(REPO.resolve()):
        mounts[str(venv)] = True
    base = _base_prefix(python)
    # A venv made from Debian's own python3 (/usr) runs on the image's python3; a pyenv or other
    # build is mounted as it is.
    if not str(base).startswith("/usr"):
        mounts[str(base)] = True
    return mounts


def render_slurm_conf(*, layout: Layout, host_node: str, controller_addr: str,
                      container_nodes: Mapping[str, str]) -> str:
    """slurm.conf for this cluster (pure); each departure from Slurm's defaults says why."""
    lines = [
        "# Generated by tests/slurm/_cluster.py: the airvisor test cluster. Do not edit.",
        "ClusterName=airvisor-test",
        f"SlurmctldHost={host_node}({controller_addr})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Our own munged: the system's munge (and its key) stay untouched.
        f"AuthInfo=socket={layout.munge_socket}",
        f"StateSaveLocation={layout.root / 'ctld'}",
        f"SlurmdSpoolDir={layout.root / 'spool'}/%n",
        f"SlurmctldPidFile={layout.run / 'slurmctld.pid'}",
        f"SlurmdPidFile={layout.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.log}/slurmd-%n.log",
        f"PlugStackConfig={layout.etc / 'plugstack.conf'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # Containers have no cgroup delegation: track a job's processes by their parent chain
        # (linuxproc, which also follows children that start their own session, unlike pgid),
        # and bind nothing to CPUs.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        # No slurmdbd (MariaDB would be a second service to set up): finished jobs are read from
        # slurmctld (kept MinJobAge seconds) and from the job completion file.
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={layout.jobcomp}",
        "MinJobAge=3600",
        "SchedulerType=sched/backfill",
        # Batch jobs start at once (Slurm waits up to 3 s by default, to batch submissions), and
        # a short job with --time backfills past a pending --exclusive one within a second.
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        # The nodes declare more CPUs than the machine has, so tests' jobs run side by side;
        # slurm.conf wins over what slurmd detects.
        "SlurmdParameters=config_overrides",
        # A node that died and registers again returns to service by itself.
        "ReturnToService=2",
        # A dead node is noticed in seconds, and its job ends NODE_FAIL instead of requeued.
        f"SlurmdTimeout={SLURMD_TIMEOUT}",
        "SlurmctldTimeout=10",
        "MessageTimeout=5",
        "TCPTimeout=2",
        "JobRequeue=0",
        "InactiveLimit=0",
        "KillWait=5",
        "UnkillableStepTimeout=30",
        # prime-rl's sbatch templates ask for `--gres=gpu:N --exclusive`: every node declares
        # GPUS_PER_NODE GPUs (gres.conf: stand-in device files; no GPU is touched).
        "GresTypes=gpu",
        f"NodeName={host_node} NodeAddr={controller_addr} CPUs=8 RealMemory=8000"
        f" Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN",
    ]
    for name, addr in container_nodes.items():
        lines.append(f"NodeName={name} NodeAddr={addr} CPUs=8 RealMemory=8000"
                     f" Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN")
    lines.append(f"PartitionName=local Nodes={host_node} Default=YES MaxTime=INFINITE State=UP")
    if container_nodes:
        lines.append(f"PartitionName=multi Nodes={','.join(container_nodes)} MaxTime=INFINITE"
                     " State=UP")
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: Layout) -> str:
    """gres.conf (read from slurm.conf's directory). Slurm's gres/gpu discards a GPU without a
    File that is a character device, so each GPU is one of our own device nodes with
    /dev/null's numbers (``Layout.gpu_dir``): slurmd only stat()s them, and a job gets
    CUDA_VISIBLE_DEVICES=0,...,N-1 as on a GPU node."""
    return ("# Generated by tests/slurm/_cluster.py: no GPU here; the files are like /dev/null.\n"
            f"Name=gpu File={layout.gpu_dir}/gpu[0-{GPUS_PER_NODE - 1}]\n")


def _host_node() -> str:
    return socket.gethostname().split(".")[0]


def _node_addresses() -> tuple[str, dict[str, str]]:
    """The controller's address on our Docker network (its gateway) and each container node's."""
    hosts = list(SUBNET.hosts())
    return str(hosts[0]), {name: str(hosts[10 + i]) for i, name in enumerate(CONTAINER_NODES)}


def node_image_tag() -> str:
    out = subprocess.run([str(REPO / "tests/images/build_slurm_node_image.sh"), "--print-tag"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _ours(pid_file: Path, name: str, marker: str) -> psutil.Process | None:
    """The live process a pid file of ours names, if it is the daemon we started (its name and a
    path of ours on its command line); a reused pid is not ours."""
    try:
        pid = int(pid_file.read_text().strip())
        proc = psutil.Process(pid)
        if proc.name() == name and marker in " ".join(proc.cmdline()):
            return proc
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def _strays(name: str, marker: str) -> list[psutil.Process]:
    """Daemons of ours on this machine that no pid file names (a pid file lost to a removed
    state directory): the daemon's name and a path of ours on the command line, in this
    machine's PID namespace (the container nodes' slurmd and munged have the same command
    lines, and are left to their containers)."""
    own_ns = os.readlink("/proc/self/ns/pid")
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if (proc.info["name"] == name and marker in " ".join(proc.info["cmdline"] or [])
                    and os.readlink(f"/proc/{proc.pid}/ns/pid") == own_ns):
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _stop(proc: psutil.Process | None, timeout: float = 10) -> None:
    if proc is None:
        return
    with contextlib.suppress(psutil.Error):
        proc.terminate()
        proc.wait(timeout)
    with contextlib.suppress(psutil.Error):
        proc.kill()


def _docker():  # type: ignore[no-untyped-def]
    import docker

    return docker.from_env()


def _docker_usable() -> bool:
    try:
        _docker().ping()
    except Exception:
        return False
    return True


def _node_image(wait: float) -> str:
    """The container nodes' image tag when Docker answers and has it, else "" (asking again
    for up to `wait` seconds: a busy Docker engine can miss one call)."""
    deadline = time.monotonic() + wait
    while True:
        if _docker_usable():
            tag = node_image_tag()
            try:
                _docker().images.get(tag)
                return tag
            except Exception:
                pass
        if time.monotonic() >= deadline:
            return ""
        time.sleep(1)


def _has_container_nodes(layout: Layout) -> bool:
    """Whether the cluster's current slurm.conf declares the container nodes."""
    try:
        text = layout.conf.read_text()
    except FileNotFoundError:
        return False
    return any(line.startswith(f"NodeName={name} ") for line in text.splitlines()
               for name in CONTAINER_NODES)


class SlurmCluster:
    """The running test cluster (see the module docstring for the contract)."""

    def __init__(self, layout: Layout, *, host_node: str, container_nodes: Iterable[str],
                 python: Path) -> None:
        self.layout = layout
        self.conf_path = layout.conf
        self.shared_dir = layout.shared
        self.repo = REPO
        self.python = python
        self.host_node = host_node
        self.container_nodes = list(container_nodes)
        self.partitions: dict[str, list[str]] = {"local": [host_node]}
        if self.container_nodes:
            self.partitions["multi"] = list(self.container_nodes)
        self.env: dict[str, str] = {"SLURM_CONF": str(layout.conf)}

    # -- Slurm commands -------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (argv, never a shell)."""
        result = subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} exited {result.returncode}: "
                               f"{result.stderr.strip() or result.stdout.strip()}")
        return result

    def sbatch(self, *argv: str) -> str:
        """Submits a job (``sbatch --parsable ARGV``) and returns its id."""
        return self.run("sbatch", "--parsable", *argv).stdout.strip().split(";")[0]

    def job_info(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o``'s fields of one job (finished ones too, for MinJobAge)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        fields: dict[str, str] = {}
        for token in out.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def job_state(self, job_id: str) -> str:
        return self.job_info(job_id)["JobState"]

    def wait_job(self, job_id: str, timeout: float = 60,
                 states: Iterable[str] = FINAL_STATES) -> str:
        """Waits until the job's state is one of ``states`` (default: any final one)."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in wanted:
                return state
            time.sleep(0.5)
        raise ClusterError(f"job {job_id} still {state} after {timeout} s "
                           f"(wanted {sorted(wanted)}); see {self.layout.log}")

    def node_states(self) -> dict[str, str]:
        """Node name -> Slurm state (``sinfo``'s long form, e.g. idle, mixed, down*, drained)."""
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N %T").stdout
        states: dict[str, str] = {}
        for line in out.splitlines():
            name, state = line.split()
            states[name] = state
        return states

    def wait_idle(self, nodes: Iterable[str] | None = None, timeout: float = 60) -> None:
        """Waits until the nodes (default: all) are in service: idle, or running jobs."""
        names = set(nodes) if nodes is not None else {self.host_node, *self.container_nodes}
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n, "").rstrip("~#$@") in ("idle", "mixed", "allocated")
                   for n in names):
                return
            time.sleep(0.5)
        raise ClusterError(f"nodes not in service after {timeout} s: {states}; see "
                           f"{self.layout.log}")

    def tmp_shared(self, name: str) -> Path:
        """A fresh directory on the shared filesystem (same path on every node)."""
        path = self.shared_dir / f"{name}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def node_processes(self, node: str) -> list[str]:
        """The command lines of every process on a node (to show nothing of a job is left):
        ``ps`` in a container node, psutil on this machine's node."""
        if node == self.host_node:
            lines = []
            for proc in psutil.process_iter(["cmdline"]):
                cmdline = proc.info["cmdline"]
                if cmdline:
                    lines.append(" ".join(cmdline))
            return lines
        result = self._container(node).exec_run(["ps", "-eo", "args", "--no-headers"])
        if result.exit_code != 0:
            raise ClusterError(f"ps on {node} exited {result.exit_code}")
        return [line for line in result.output.decode().splitlines() if line]

    # -- container nodes ------------------------------------------------------------------
    def _container(self, name: str):  # type: ignore[no-untyped-def]
        if name not in self.container_nodes:
            raise ClusterError(f"{name} is not a container node ({self.container_nodes})")
        return _docker().containers.get(_container_name(name))

    def _kill_mark(self, name: str) -> Path:
        return _kill_mark(self.layout, name)

    def kill_node(self, name: str) -> None:
        """Kills a container node abruptly (SIGKILL to everything in it, as a power loss).
        A mark names this process as the killer: a concurrent session's ``ensure_nodes_up``
        waits for the node instead of starting it again under this test's feet."""
        container = self._container(name)
        self._kill_mark(name).write_text(str(os.getpid()))
        container.kill()

    def restore_node(self, name: str, timeout: float = 60) -> None:
        """Starts a killed container node again and puts it back in service."""
        container = self._container(name)
        container.reload()
        if container.status != "running":
            container.start()
        self._resume([name])
        self.wait_idle([name], timeout)
        self._kill_mark(name).unlink(missing_ok=True)

    def _killed_by_other(self, name: str) -> bool:
        return _killed_by_other(self.layout, name)

    def ensure_nodes_up(self, timeout: float = 60) -> None:
        """Every node running and in service (robust against an earlier test's kill). A node
        that another live session killed is its to restore: wait for it (bounded)."""
        deadline = time.monotonic() + timeout
        while any(self._killed_by_other(n) for n in self.container_nodes):
            if time.monotonic() > deadline:
                break  # the other session is stuck: take the node back
            time.sleep(0.5)
        for name in self.container_nodes:
            container = self._container(name)
            container.reload()
            if container.status != "running":
                container.start()
        self._resume([self.host_node, *self.container_nodes])
        self.wait_idle(timeout=max(10.0, deadline - time.monotonic()))
        for name in self.container_nodes:
            self._kill_mark(name).unlink(missing_ok=True)

    def _resume(self, names: list[str]) -> None:
        """Resumes the nodes Slurm holds out of service (DOWN, DRAIN, FAIL); a node that is
        registered again after a kill returns by itself (ReturnToService=2), but one that is
        still marked DOWN by a ping in flight needs this."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = self.node_states()
            held = [n for n in names if states.get(n, "").rstrip("*~#$@")
                    in ("down", "drained", "draining", "fail", "failing")]
            if not held:
                return
            result = self.run("scontrol", "update", f"nodename={','.join(held)}",
                              "state=resume", check=False)
            if result.returncode == 0:
                return
            time.sleep(1)  # the node has not registered yet: resuming it then is refused


def _kill_mark(layout: Layout, node: str) -> Path:
    return layout.run / f"killed-{node}"


def _killed_by_other(layout: Layout, node: str) -> bool:
    """Whether another live process killed the node (kill_node's mark) and will restore it."""
    try:
        pid = int(_kill_mark(layout, node).read_text())
    except (OSError, ValueError):
        return False
    return pid != os.getpid() and psutil.pid_exists(pid)


def _container_name(node: str) -> str:
    return f"airvisor-slurm-{node}"


# -- bringing the cluster up ------------------------------------------------------------------

def _ensure_dirs(layout: Layout) -> None:
    for path in (layout.etc, layout.log, layout.run, layout.shared, layout.root / "ctld",
                 layout.root / "spool"):
        path.mkdir(parents=True, exist_ok=True)
    layout.munge_dir.mkdir(parents=True, exist_ok=True)
    layout.munge_dir.chmod(0o755)  # munged refuses a socket others cannot reach
    layout.shared.chmod(0o1777)
    # tmp_shared directories of earlier days: kept a day for a look after a failed test.
    for entry in layout.shared.iterdir():
        with contextlib.suppress(OSError):
            if time.time() - entry.stat().st_mtime <= SHARED_KEEP_S:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    if layout.munge_key.is_dir():
        # What `docker run -v` leaves when the key was missing at a container's start.
        shutil.rmtree(layout.munge_key)
    if not layout.munge_key.exists():
        tmp = layout.munge_key.with_suffix(".tmp")
        tmp.write_bytes(os.urandom(1024))
        tmp.chmod(0o400)
        tmp.replace(layout.munge_key)
    layout.gpu_dir.mkdir(exist_ok=True)
    for index in range(GPUS_PER_NODE):
        device = layout.gpu_dir / f"gpu{index}"
        if not device.is_char_device():
            device.unlink(missing_ok=True)
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    plugstack = layout.etc / "plugstack.conf"
    if not plugstack.exists():
        plugstack.write_text("# no SPANK plugins in the airvisor test cluster\n")


def _start_munged(layout: Layout) -> None:
    pid_file = layout.run / "munged.pid"
    if _ours(pid_file, "munged", str(layout.munge_socket)) is not None:
        return
    for stray in _strays("munged", str(layout.munge_socket)):
        _stop(stray)
    with contextlib.suppress(FileNotFoundError):
        layout.munge_socket.unlink()
    subprocess.run(["munged", f"--key-file={layout.munge_key}", f"--socket={layout.munge_socket}",
                    f"--pid-file={pid_file}", f"--seed-file={layout.munge_dir / 'munged.seed'}",
                    f"--log-file={layout.log / 'munged.log'}"], check=True)


def _start_daemon(layout: Layout, name: str, pid_file: Path) -> bool:
    """Starts slurmctld or slurmd (they daemonize, writing their pid file); False if ours runs."""
    if _ours(pid_file, name, str(layout.conf)) is not None:
        return False
    for stray in _strays(name, str(layout.conf)):
        _stop(stray)  # it holds our port: a second one would not start
    result = subprocess.run([name, "-f", str(layout.conf)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError(f"{name} did not start ({result.returncode}): {result.stderr.strip()}; "
                           f"see {layout.log}")
    return True


def _stop_host_daemons(layout: Layout, host_node: str) -> None:
    for name, pid_file in (("slurmd", layout.run / f"slurmd-{host_node}.pid"),
                           ("slurmctld", layout.run / "slurmctld.pid")):
        _stop(_ours(pid_file, name, str(layout.conf)))
        for stray in _strays(name, str(layout.conf)):
            _stop(stray)


def _ensure_network(gateway: str):  # type: ignore[no-untyped-def]
    import docker.errors
    import docker.types

    client = _docker()
    try:
        return client.networks.get(NETWORK)
    except docker.errors.NotFound:
        pool = docker.types.IPAMPool(subnet=str(SUBNET), gateway=gateway)
        return client.networks.create(NETWORK, driver="bridge", labels={LABEL: "1"},
                                      ipam=docker.types.IPAMConfig(pool_configs=[pool]))


def _ensure_container_node(layout: Layout, name: str, addr: str, image: str,
                           python: Path) -> None:
    import docker.errors
    import docker.types

    client = _docker()
    cname = _container_name(name)
    mounts = _bind_mounts(layout, python)
    try:
        container = client.containers.get(cname)
        mounted = {m["Source"]: not m["RW"] for m in container.attrs.get("Mounts", [])}
        # Another checkout or venv (a CI clone on a developer's machine) needs its own mounts.
        if container.image.tags != [image] or mounted != mounts:
            container.remove(force=True)
        else:
            container.reload()
            # A node another live session killed is its to restore (its test is watching the
            # node fail); ensure_nodes_up waits for that.
            if container.status != "running" and not _killed_by_other(layout, name):
                container.start()
            return
    except docker.errors.NotFound:
        pass
    entrypoint = REPO / "scripts/slurm/node-entrypoint.sh"
    container = client.containers.create(
        image, [str(entrypoint)], name=cname, hostname=name, init=True, detach=True,
        labels={LABEL: "1"},
        environment={"SLURM_CONF": str(layout.conf), "AIRVISOR_SLURM_DIR": str(layout.root),
                     "AIRVISOR_MUNGE_KEY": str(layout.munge_key),
                     "AIRVISOR_MUNGE_SOCKET": str(layout.munge_socket),
                     "AIRVISOR_SLURM_LOG_DIR": str(layout.log)},
        # Mounts, not volumes: a missing source is an error here, where `-v` would create a
        # directory in its place (a munge key that is a directory breaks every later start).
        mounts=[docker.types.Mount(path, path, type="bind", read_only=ro)
                for path, ro in mounts.items()],
        network=None,
    )
    network = client.networks.get(NETWORK)
    with contextlib.suppress(docker.errors.APIError):
        client.networks.get("bridge").disconnect(container)
    network.connect(container, ipv4_address=addr)
    container.start()


def up(*, want_multi: bool = True, quiet: bool = False) -> SlurmCluster:
    """Brings the cluster up (idempotent: what runs is kept) and waits until every node is in
    service. Container nodes only when Docker answers and the node image is built; once the
    cluster has them it keeps them (`want_multi=False` means "not needed", never "remove").
    Sessions that call it at once (several pytest runs) take turns on a lock file."""
    if os.geteuid() != 0:
        raise ClusterError("the test cluster runs its daemons and jobs as root: run as root")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _up(want_multi=want_multi, quiet=quiet)


def _up(*, want_multi: bool, quiet: bool) -> SlurmCluster:
    if os.geteuid() != 0:
        raise ClusterError("the test cluster runs its daemons and jobs as root: run as root")
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        if shutil.which(tool) is None:
            raise ClusterError(f"{tool} is missing: run scripts/setup.d/70-slurm.sh (apt-get "
                               "install slurmctld slurmd slurm-client munge)")
    layout = Layout(STATE_DIR)
    python = _venv_python()
    host = _host_node()
    gateway, addresses = _node_addresses()
    # A cluster that has its container nodes keeps them: rewriting slurm.conf without them
    # restarts slurmctld and ends every job on them, e.g. the multi-node tests of a pytest run
    # side by side with one that needs only the local node (want_multi=False) or whose Docker
    # call failed once under load.
    had_multi = _has_container_nodes(layout)
    image = _node_image(wait=30 if had_multi else 0) if want_multi or had_multi else ""
    if had_multi and not image:
        raise ClusterError(
            "the cluster has container nodes (partition multi) but Docker does not answer or "
            "their image is gone: not removing them under other sessions' jobs; "
            "`python tests/slurm/_cluster.py down` resets the cluster")
    multi = bool(image)
    controller_addr = gateway if multi else "127.0.0.1"
    _ensure_dirs(layout)
    if multi:
        _ensure_network(gateway)  # the controller's address must exist before it starts
    conf = render_slurm_conf(layout=layout, host_node=host, controller_addr=controller_addr,
                             container_nodes=addresses if multi else {})
    gres = render_gres_conf(layout)
    gres_path = layout.etc / "gres.conf"
    changed = (not layout.conf.exists() or layout.conf.read_text() != conf
               or not gres_path.exists() or gres_path.read_text() != gres)
    if changed:
        _stop_host_daemons(layout, host)
        gres_path.write_text(gres)
        layout.conf.write_text(conf)
    _start_munged(layout)
    _start_daemon(layout, "slurmctld", layout.run / "slurmctld.pid")
    _wait_controller(layout)
    _start_daemon(layout, "slurmd", layout.run / f"slurmd-{host}.pid")
    cluster = SlurmCluster(layout, host_node=host,
                           container_nodes=addresses if multi else {}, python=python)
    if multi:
        for name, addr in addresses.items():
            _ensure_container_node(layout, name, addr, image, python)
        if changed:
            # The container nodes see the new slurm.conf through their mount; rereading it
            # keeps their running jobs (recreating the containers would kill them).
            cluster.run("scontrol", "reconfigure")
    cluster.ensure_nodes_up(timeout=60)
    if not quiet:
        print(cluster.run("sinfo").stdout, end="")
    return cluster


def _wait_controller(layout: Layout, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        result = subprocess.run(["scontrol", "ping"], env={**os.environ,
                                "SLURM_CONF": str(layout.conf)}, capture_output=True, text=True)
        last = result.stdout.strip() + result.stderr.strip()
        if result.returncode == 0 and "UP" in last:
            return
        time.sleep(0.5)
    raise ClusterError(f"slurmctld does not answer after {timeout} s ({last}); see "
                       f"{layout.log / 'slurmctld.log'}")


def down() -> None:
    """Stops what ``up`` started: our containers and network (by label), our daemons (by pid
    file, checked against their command line)."""
    layout = Layout(STATE_DIR)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # not while a session's `up` is half-way
        _down(layout)


def _down(layout: Layout) -> None:
    if _docker_usable():
        client = _docker()
        for container in client.containers.list(all=True, filters={"label": LABEL}):
            container.remove(force=True)
        for network in client.networks.list(filters={"label": LABEL}):
            network.remove()
    _stop_host_daemons(layout, _host_node())
    _stop(_ours(layout.run / "munged.pid", "munged", str(layout.munge_socket)))
    for stray in _strays("munged", str(layout.munge_socket)):
        _stop(stray)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--local-only", action="store_true",
                        help="no container nodes (no Docker needed)")
    parser.add_argument("--require-multi", action="store_true",
                        help="fail unless the container nodes (partition multi) are up")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = up(want_multi=not args.local_only)
            if args.require_multi and "multi" not in cluster.partitions:
                raise ClusterError("no container nodes: Docker does not answer or the node "
                                   "image is missing (tests/images/build_slurm_node_image.sh)")
        elif args.action == "down":
            down()
        else:
            result = subprocess.run(["sinfo"], env={**os.environ,
                                    "SLURM_CONF": str(Layout(STATE_DIR).conf)})
            return result.returncode
    except (ClusterError, subprocess.CalledProcessError) as exc:
        print(f"slurm test cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
