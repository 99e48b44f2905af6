"""The task session: one container, a fresh shell per episode, the workspace and evaluation.

No verifiers here. Every episode starts from the same state, whatever the previous one did
(README "Isolation"): `reset` runs the container's root helper (`container_admin.py`, its own
`docker exec` as root), which kills every process of the agent user, restores the home directory
from the snapshot taken before the first episode, clears the agent's files from the
world-writable directories and rebuilds the workspace from the task's template; then a new shell
is started. A container whose restore fails is replaced (ours: recreated; airvisor's: killed, so
its pool recreates it) and never reused as it is.

`evaluate` runs the task's evaluation through the same root helper; the metrics come back in a
root-only file, never from anything the agent's processes print.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import secrets
import shlex
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import docker
from docker.models.containers import Container
from docker.utils import parse_bytes

from air_mlgym._containers import INIT_COMMAND, ContainerUnavailable, find_running
from air_mlgym._freezer import FreezerUnavailable, KernelFreezer
from air_mlgym._reward import TaskProtection
from air_mlgym._shell import DOCKER_ERRORS, DockerShell, RunResult, ShellDied
from air_mlgym._tasks import TaskSpec

logger = logging.getLogger(__name__)

TOOLS_DIR = "/opt/air_mlgym"
TOOLS_PATH = f"{TOOLS_DIR}/tools.py"
ADMIN_PATH = f"{TOOLS_DIR}/admin.py"
# The root helper's state (container_admin.py keeps the same paths).
STATE_DIR = "/var/lib/air-mlgym"
STATE_DIR_TASKS = f"{STATE_DIR}/tasks"
STATE_DIR_RESULTS = f"{STATE_DIR}/results"
# Left by the root helper's disk watcher when the episode passed its disk limit.
DISK_MARK = f"{STATE_DIR_RESULTS}/disk-limit.json"
TEMPLATE_MTIME = 1_700_000_000  # fixed, so a task's template (and its key) is reproducible
HOME_MANIFEST = f"{STATE_DIR}/home.manifest.json"
# The evaluator's interpreter when the image's Python belongs to the agent (MLGym's official
# image: conda under /home/agent): a root-owned copy of the agent's environment, taken before the
# container's first episode (container_admin.PYTHON_SNAPSHOT).
PYTHON_SNAPSHOT = f"{TOOLS_DIR}/python"
SYSTEM_PYTHON = "/usr/bin/python3"
# Every program root runs in a container is named by its absolute path and started through
# `env -i` with this PATH: the image's PATH (MLGym's puts /home/agent/.local/bin and
# /home/agent/miniconda3/bin first) and environment are the agent's to write.
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
ROOT_ENV = ("/usr/bin/env", "-i", f"PATH={ROOT_PATH}", "LANG=C.UTF-8", "HOME=/root")
# Copies the agent's environment into PYTHON_SNAPSHOT: in a root-only staging directory, made
# root's and read-only there, then moved into place. Refused once the home snapshot exists (the
# container has served episodes: the agent's environment may have been changed by then).
SNAPSHOT_SCRIPT = r"""
set -eu
source=$1 target=$2 manifest=$3
[ -e "$manifest" ] && { echo "the container has already served episodes" >&2; exit 3; }
[ -d "$source" ] || { echo "no environment at $source" >&2; exit 4; }
stage="$target.stage"
/bin/rm -rf "$stage"
/bin/mkdir -m 700 "$stage"
/bin/cp -a "$source" "$stage/env"
/bin/chown -R -h 0:0 "$stage/env"
/bin/chmod -R go-w "$stage/env"
/bin/chmod 755 "$stage/env"
/bin/mv "$stage/env" "$target"
/bin/rmdir "$stage"
"""

EVALUATION_KINDS = {
    "CSVSubmissionTasks": "csv",
    "PythonSubmissionTasks": "python",
    "ModelSubmissionTasks": "model",
    "LMSubmissionTasks": "lm",
}

SHIM = """# air-mlgym: the agent's module {name!r}, proxied to a process of the agent user.
import importlib.util as _util
_spec = _util.spec_from_file_location("air_mlgym_admin", {admin!r})
_admin = _util.module_from_spec(_spec)
_spec.loader.exec_module(_admin)
_admin.proxy_module(__name__)
"""


class WorkspaceLost(ContainerUnavailable):
    """The container was recreated mid-episode: it runs, but the workspace must be rebuilt."""


class ContainerBroken(ContainerUnavailable):
    """The container runs but could not be restored to its pristine state: replace it."""


class AgentExhaustedLimit(ContainerBroken):
    """The root helper could not run because the agent's processes hold all the processes or
    memory the container's limits allow (read from the engine): the agent's failure."""


class ExecRefused(ContainerUnavailable):
    """The running container refused to start a root exec (the engine's runtime could not
    fork or allocate in it): a restart gives the reset its room back."""


class EnvironmentUnusable(ContainerUnavailable):
    """The image or the container's setup cannot serve an episode (no trustworthy evaluator,
    pid 1 run by the agent, ...): replacing the container would not help. The message names
    the problem and the fix; an episode that meets it is an errored rollout, never a 0."""


# What the container's runtime says when it cannot fork or allocate for an exec (runc's
# "OCI runtime exec failed: ... resource temporarily unavailable"), or a process in it cannot.
RESOURCE_ERRORS = re.compile(
    r"resource temporarily unavailable|cannot allocate memory|cannot fork|fork failed|EAGAIN"
    r"|ENOMEM|out of memory",
    re.IGNORECASE,
)
# Where a container's cgroup is on this host: Docker's cgroupfs and systemd drivers, v1 and v2.
CGROUP_DIRS = (
    "/sys/fs/cgroup/{controller}/docker/{id}",
    "/sys/fs/cgroup/{controller}/system.slice/docker-{id}.scope",
    "/sys/fs/cgroup/system.slice/docker-{id}.scope",
    "/sys/fs/cgroup/docker/{id}",
)
LIMIT_FILES = (("pids", "pids", "pids.events", "max"),
               ("memory", "memory", "memory.oom_control", "oom_kill"),
               ("memory", "memory", "memory.events", "oom_kill"))  # fmt: skip


def host_limit_counters(container_id: str) -> dict[str, int]:
    """How often the container's pids limit refused a fork and its memory limit had a process
    OOM-killed, read from its cgroup on this host (nothing in the container can lower them);
    empty where this host does not show them (the engine elsewhere, another layout)."""
    counts: dict[str, int] = {}
    for what, controller, name, key in LIMIT_FILES:
        for pattern in CGROUP_DIRS:
            path = Path(pattern.format(controller=controller, id=container_id)) / name
            try:
                text = path.read_text(encoding="ascii")
            except (OSError, ValueError):
                continue
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
                    counts[what] = int(parts[1])
            break
    return counts


def _text(output: Any) -> str:
    if isinstance(output, tuple):
        output = b"".join(part or b"" for part in output)
    return output.decode(errors="replace") if isinstance(output, bytes) else str(output or "")


def _docker_size(text: str | int, *, least: int, example: str, why: str) -> int:
    """Bytes of a Docker size ("4g", "512m", 1073741824: docker-py's own parser, the CLI's
    units) of at least `least` (`why` it needs that much); ValueError saying what is wrong."""
    try:
        value = int(parse_bytes(text))
    except docker.errors.DockerException as e:
        raise ValueError(f"must be {example}: {e}") from None
    if value < least:
        raise ValueError(f"must be at least {least >> 20}m ({why}): {text!r}")
    return value


def memory_bytes(text: str | int) -> int:
    """Bytes of a container's memory limit; ValueError saying what is wrong."""
    return _docker_size(text, least=64 << 20, example='a Docker memory size such as "4g" or '
                        '"512m"', why="the shell and the evaluator need it")


def disk_bytes(text: str | int) -> int:
    """Bytes of the episode's disk limit, a Docker size ("8g", "512m"); ValueError saying what
    is wrong. Below 16m not even a task's starter files and an evaluation's output fit."""
    return _docker_size(text, least=16 << 20, example='a size such as "8g" or "512m"',
                        why="the starter files and outputs need it")


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True)
class SessionConfig:
    user: str = "agent"
    home: str = "/home/agent"
    shell_command: tuple[str, ...] = ("/bin/bash", "-l")
    # MLGym's own knobs, read from the same environment variables.
    short_timeout: float = field(
        default_factory=lambda: _env_float("MLGYM_AGENT_SHORT_TIMEOUT", 25)
    )
    long_timeout: float = field(
        default_factory=lambda: _env_float("MLGYM_AGENT_LONG_TIMEOUT", 3600)
    )
    long_timeout_explicit: bool = False  # given by the user: wins over training_timeout
    no_output_timeout: float | None = None  # default: the command's own timeout
    container_wait: float = 60.0  # how long a missing container may take to come back
    setup_commands: tuple[str, ...] = ()  # run in every new shell (after conda activation)
    conda_env: str | None = "mlgym_generic"  # activated when the task uses the generic env
    # Where the MLGym checkout is mounted inside the container (read-only); datasets are then
    # copied from there inside the container instead of being uploaded every episode.
    mlgym_mount: str | None = None
    # The interpreter of the root helper and the evaluation: "auto" = a root-owned copy of the
    # agent's environment (`python_env`) when there is one, else a root-owned /usr/bin/python3;
    # or the absolute path of a root-owned interpreter in the image.
    admin_python: str = "auto"
    # The agent's environment to copy for "auto"; None: <home>/miniconda3/envs/<conda_env>,
    # else <home>/miniconda3 (MLGym's official image), when present.
    python_env: str | None = None
    # The container's limits (README "Limits"); None: left as the container has them.
    pids_limit: int | None = None
    memory_limit: int | None = None  # bytes
    cpus: float | None = None
    # What one episode may write to disk (README "Limits"), bytes; None: unchecked.
    disk_limit: int | None = None
    # How the agent's processes are held during an evaluation (README "Freeze"): "auto",
    # "kernel" or "signals".
    freeze: str = "auto"

    @property
    def workspace(self) -> str:
        return f"{self.home}/workspace"


@dataclass(frozen=True)
class Evaluation:
    metrics: dict[str, Any] | None
    output: str
    message: str  # what the agent is told
    solution_hash: str | None = None  # digest of the evaluated workspace (None: not hashed)
    cached: bool = False  # an unchanged solution's earlier evaluation, not run again
    # Why the evaluation failed because of the agent (its processes, files, resource use), as
    # established by the root helper or the engine; the episode's log carries it.
    agent_failure: str | None = None


@dataclass
class _Ids:
    uid: int = 1000
    gid: int = 1000


class TaskSession:
    """A shell in container `container_name`, set up for `task`."""

    def __init__(
        self,
        client: docker.DockerClient,
        container_name: str,
        *,
        config: SessionConfig | None = None,
        revive: Callable[[str], None] | None = None,
        recreate: Callable[[str], None] | None = None,
        protection: Mapping[str, TaskProtection] | None = None,
        freezer: KernelFreezer | None = None,
    ) -> None:
        self.client = client
        self.container_name = container_name
        self.config = config or SessionConfig()
        self._revive = revive  # set for containers we own: start them again when stopped
        self._recreate = recreate  # set for containers we own: a fresh one, same name
        self._protection = dict(protection or {})
        self._prepared: dict[str, _Ids] = {}
        self._templates: dict[tuple[str, int, int], _Template] = {}
        self.replacements = 0
        self.restarts = 0  # after the agent's processes held all the container may use
        self.last_reset_seconds = 0.0
        self.last_restore: dict[str, Any] = {}
        self._container: Container | None = None
        self._shell: DockerShell | None = None
        self._ids = _Ids()
        self.python = "python"
        self.task: TaskSpec | None = None
        self._replaced_quietly = False
        self._container_id: str | None = None
        self._resetting = False
        self._pythons: dict[str, str] = {}  # container id -> its evaluator interpreter
        self._checked_imports: set[tuple[str, str]] = set()
        # container id -> its cgroup's limit counters (host_limit_counters) at the last reset
        self._limit_baseline: dict[str, dict[str, int]] = {}
        # The runner's (shared, closed by it), or this session's own, made when needed.
        self._freezer: KernelFreezer | None = freezer
        self._own_freezer = freezer is None
        # container id -> whether the kernel freezes its agent (README "Freeze")
        self._kernel_freeze: dict[str, bool] = {}
        self.freeze_fallback: str | None = None  # why "auto" fell back to signals, if it did

    # --- container and shell -----------------------------------------------------------

    def container(self) -> Container:
        if self._container is not None:
            try:
                self._container.reload()
                if self._container.status == "running":
                    return self._container
            except DOCKER_ERRORS:
                pass
            self._drop_shell()
            if self._revive is not None:
                self._revive(self.container_name)
        try:
            self._container = find_running(
                self.client, self.container_name, wait=self.config.container_wait
            )
        except ContainerUnavailable:
            self._container = None
            raise
        replaced = self._container_id is not None and self._container.id != self._container_id
        self._container_id = self._container.id
        if replaced and self.task is not None and not self._resetting:
            # Recreated under the same name (airvisor's pool does that): the files are gone.
            self._drop_shell()
            raise WorkspaceLost(f"container {self.container_name} was recreated")
        return self._container

    def shell(self) -> DockerShell:
        """The live shell, starting a new one when there is none or it died."""
        if self._shell is not None and not self._shell.dead and self._shell.alive():
            return self._shell
        if self._shell is not None and self.task is not None:
            self._replaced_quietly = True  # it died between commands: tell the agent
        self._drop_shell()
        container = self.container()
        shell = DockerShell(
            self.client.api,
            str(container.id),
            user=self.config.user,
            workdir=self.config.home,
            command=self.config.shell_command,
            environment={"PYTHONDONTWRITEBYTECODE": "1"},
        )
        try:
            shell.start()
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot start a shell in {self.container_name}: {e}") from e
        except ShellDied as e:
            raise ContainerUnavailable(f"shell in {self.container_name} died at start: {e}") from e
        self._shell = shell
        try:
            self._after_shell_start()
        except ShellDied as e:
            self._drop_shell()
            raise ContainerUnavailable(f"shell in {self.container_name} died at setup: {e}") from e
        return shell

    def _after_shell_start(self) -> None:
        assert self._shell is not None
        if self.task is not None and self.task.use_generic_conda and self.config.conda_env:
            env = shlex.quote(self.config.conda_env)
            self._shell.run(
                f"command -v conda >/dev/null 2>&1 && conda activate {env} || true",
                timeout=60,
            )
        # MLGym's `validate` and `submit` are shell functions printing a marker the episode
        # acts on, so they work anywhere in a command (`python train.py && validate`).
        self._shell.run(
            "validate() { printf '<<VALIDATION||\\nvalidating file\\n||VALIDATION>>\\n'; }; "
            "submit() { printf '<<SUBMISSION||\\nsubmitting file\\n||SUBMISSION>>\\n'; }",
            timeout=10,
        )
        for command in self.config.setup_commands:
            self._shell.run(command, timeout=self.config.short_timeout)
        probe = self._shell.run(
            "command -v python >/dev/null 2>&1 && echo python || echo python3", timeout=10
        )
        self.python = probe.output.strip().splitlines()[-1] if probe.output.strip() else "python3"
        if self.task is not None:
            self._shell.run(
                f"cd {shlex.quote(self.config.workspace)} 2>/dev/null || true", timeout=10
            )

    def _drop_shell(self) -> None:
        if self._shell is not None:
            self._shell.close()
        self._shell = None

    def close(self) -> None:
        self._drop_shell()
        if self._freezer is not None and self._own_freezer:
            self._freezer.close()
            self._freezer = None

    # --- workspace ---------------------------------------------------------------------------

    def reset(self, task: TaskSpec) -> None:
        """Start an episode of `task` from the container's pristine state (see the module
        docstring); raises ContainerUnavailable when no restorable container can be had."""
        self.task = task
        self._resetting = True
        began = time.monotonic()
        try:
            self._drop_shell()
            try:
                self._restore(task)
            except (AgentExhaustedLimit, ExecRefused) as e:
                # Not even root's helper can start: restart the container (the kernel ends
                # every process in it); its files stay and the next restore puts them right.
                self._restart_container(str(e))
                self._restore(task)
            except ContainerBroken as e:
                self._replace_container(str(e))
                try:
                    self._restore(task)
                except ContainerBroken as again:
                    raise ContainerUnavailable(
                        f"{self.container_name} cannot be restored even after replacement: {again}"
                    ) from again
            self._replaced_quietly = False
            try:
                self.shell()
            except ContainerUnavailable:
                raise
        finally:
            self._resetting = False
        self.last_reset_seconds = time.monotonic() - began

    def _restore(self, task: TaskSpec) -> None:
        container = self.container()
        ids = self._prepare(container)
        template = self._template(task, ids)
        args = {
            "uid": ids.uid,
            "gid": ids.gid,
            "home": self.config.home,
            "workspace": self.config.workspace,
            "workspace_name": posixpath.basename(self.config.workspace),
            "task_key": template.key,
        }
        self._kernel_kill(container)
        result = self._admin(container, "reset", args)
        if result.get("need_template"):
            try:
                container.put_archive(STATE_DIR_TASKS, template.archive)
            except DOCKER_ERRORS as e:
                raise ContainerBroken(f"cannot upload the task template: {e}") from e
            installed = self._admin(
                container,
                "install-template",
                {**template.install_args, "workspace": self.config.workspace},
            )
            if not installed.get("ok"):
                message = str(installed.get("message"))
                if "not a directory" in message:  # a configuration problem, not the container
                    raise EnvironmentUnusable(
                        f"cannot copy the datasets (is the MLGym checkout mounted at "
                        f"{self.config.mlgym_mount}?): {message}"
                    )
                raise ContainerBroken(f"cannot install the task template: {message}")
            result = self._admin(container, "reset", args)
        if not result.get("ok"):
            raise ContainerBroken(f"restore failed: {result.get('message', result)}")
        if isinstance(result.get("limit_counters"), dict):
            self._limit_baseline[str(container.id)] = host_limit_counters(str(container.id))
        self._check_imports(container, template)
        self._watch_disk(container, {**args, "disk_limit": self.config.disk_limit})
        self.last_restore = result

    def _watch_disk(self, container: Container, args: dict[str, Any]) -> None:
        """The episode's disk watcher (README "Limits"): the root helper's `watch`, in an exec
        of its own that outlives this call; the next reset kills it."""
        if args.get("disk_limit") is None:
            return
        python = self._pythons.get(str(container.id)) or self.config.admin_python
        argv = [*ROOT_ENV, python, "-I", "-B", ADMIN_PATH, "watch", json.dumps(args)]
        try:
            container.exec_run(argv, user="root", detach=True)
        except DOCKER_ERRORS as e:
            raise self._refused(container, "start the disk watcher", str(e)) from e

    def disk_limit_hit(self) -> str | None:
        """Why the episode passed its disk limit, when the watcher found it did (its mark, read
        through the engine's archive API: nothing runs in the container); None otherwise."""
        if self.config.disk_limit is None or self._container is None:
            return None
        try:
            stream, _ = self._container.get_archive(DISK_MARK)
            raw = b"".join(stream)
        except DOCKER_ERRORS:
            return None  # no mark (the usual case), or the container is gone: not this check's
        try:
            with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
                member = archive.extractfile(posixpath.basename(DISK_MARK))
                mark = json.loads(member.read() if member is not None else b"")
        except (tarfile.TarError, ValueError):
            return None
        return str(mark.get("reason")) if isinstance(mark, dict) and mark.get("reason") else None

    def _prepare(self, container: Container) -> _Ids:
        """Once per container: the helpers in /opt/air_mlgym, the agent's ids, the evaluator's
        interpreter (a root-owned copy of the agent's environment when the image's Python is
        the agent's), the checks and the home snapshot (taken before the first episode)."""
        cid = str(container.id)
        known = self._prepared.get(cid)
        if known is not None:
            return known
        self._kill_agent(container)
        try:
            self._root_exec(container, ["/bin/mkdir", "-p", TOOLS_DIR])
            container.put_archive(TOOLS_DIR, _tar(self._tool_entries()))
            ids = []
            for flag in ("-u", "-g", "-G"):
                found = self._root_exec(container, ["/usr/bin/id", flag, self.config.user])
                output = found.output if isinstance(found.output, bytes) else b""
                ids.append(output.decode(errors="replace").strip())
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot prepare {self.container_name}: {e}") from e
        groups = ids.pop().split()
        if not all(x.isdigit() for x in [*ids, *groups]):
            raise EnvironmentUnusable(
                f"user {self.config.user!r} does not exist in {self.container_name} "
                f"({ids}); fix: a task image with MLGym's user, or set the env arg `user`"
            )
        prepared = _Ids(uid=int(ids[0]), gid=int(ids[1]))
        self._apply_limits(container)
        self._kernel_freeze[cid] = self._setup_freezer(container)
        try:
            self._pythons[cid] = self._evaluator_python(container)
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot prepare {self.container_name}: {e}") from e
        result = self._admin(
            container,
            "prepare",
            {
                "home": self.config.home,
                "workspace_name": posixpath.basename(self.config.workspace),
                "uid": prepared.uid,
                "gids": sorted({prepared.gid, *map(int, groups)}),
            },
            timeout=600,
        )
        if result.get("interpreter_problem"):
            raise EnvironmentUnusable(
                f"{self.container_name}: the evaluation interpreter {self._pythons[cid]} is not "
                f"trustworthy or not usable ({result['interpreter_problem']}); fix: keep the "
                "agent's environment as the image ships it (it is copied before the first "
                "episode), or install a root-owned python3 with the evaluation's packages in "
                "the image and set admin_python"
            )
        if result.get("pid1_problem"):
            raise EnvironmentUnusable(
                f"{self.container_name}: {result['pid1_problem']}: pid 1 cannot be frozen or "
                "killed from inside the container, so it could race the evaluation and plant "
                "files in the next episode; fix: start the container as root with an init, "
                'e.g. [containers] user = "root" and command = '
                f"{json.dumps(list(INIT_COMMAND))} in the airvisor profile"
            )
        if "snapshot" not in result:
            raise ContainerBroken(f"cannot snapshot {self.config.home}: {result}")
        self._ids = prepared
        self._prepared[cid] = prepared
        return prepared

    def _apply_limits(self, container: Container) -> None:
        """The container's pids, memory and CPU limits (README "Limits"), set through the
        engine's update API before the first episode; a stricter limit it already has (the
        airvisor profile's `[containers] memory`/`cpus`) is kept."""
        host = container.attrs.get("HostConfig") or {}
        update: dict[str, int] = {}

        def stricter(current: int | None, wanted: int | None) -> int | None:
            if wanted is None or (current and 0 < current <= wanted):
                return None
            return wanted

        pids = stricter(host.get("PidsLimit"), self.config.pids_limit)
        if pids is not None:
            update["PidsLimit"] = pids
        memory = stricter(host.get("Memory"), self.config.memory_limit)
        if memory is not None:
            update["Memory"] = update["MemorySwap"] = memory  # no swap beyond it
        nano = None if self.config.cpus is None else round(self.config.cpus * 1e9)
        if host.get("CpuQuota") and host.get("CpuPeriod"):
            have = round(host["CpuQuota"] / host["CpuPeriod"] * 1e9)
        else:
            have = host.get("NanoCpus")
        nano = stricter(have, nano)
        if nano is not None:
            update["NanoCpus"] = nano
        if not update:
            return
        api: Any = self.client.api
        try:
            # docker-py's update_container has no PidsLimit or NanoCpus; its own request,
            # with every field the engine's ContainerUpdate takes
            response = api._post_json(api._url("/containers/{0}/update", container.id), update)
            api._raise_for_status(response)
            container.reload()
        except DOCKER_ERRORS as e:
            raise EnvironmentUnusable(
                f"{self.container_name}: the engine refused the limits {update} ({e}); fix: set "
                "pids_limit, memory or cpus to what this host supports (null: no limit)"
            ) from e

    def _limit_hit(self, container: Container, error: str = "") -> str | None:
        """Whether the agent's processes hold all the pids or memory the container may use
        (root's helper cannot even start then): the kernel's counters of the container's
        cgroup (read on this host, against those of the episode's reset), else the runtime's
        own words, else as the engine reports the usage."""
        baseline = self._limit_baseline.get(str(container.id))
        counted = host_limit_counters(str(container.id))
        if baseline is not None and counted:
            hits = [what for what, n in counted.items() if n > int(baseline.get(what, 0))]
            if hits:
                return f"the container's {' and '.join(hits)} limit was hit during the episode"
        said = RESOURCE_ERRORS.search(error)
        if said is not None:
            return f"the container could not start a process ({said[0]})"
        try:
            stats = container.stats(stream=False, one_shot=True)
        except DOCKER_ERRORS:
            return None
        if not isinstance(stats, dict):
            return None
        pids = stats.get("pids_stats") or {}
        limit = pids.get("limit") or (container.attrs.get("HostConfig") or {}).get("PidsLimit")
        current = pids.get("current")
        if isinstance(current, int) and isinstance(limit, int) and 0 < limit <= current + 4:
            return f"the container's process limit is used up ({current} of {limit} pids)"
        memory = stats.get("memory_stats") or {}
        usage, cap = memory.get("usage"), memory.get("limit")
        if isinstance(usage, int):  # as `docker stats` counts it: the page cache aside
            extra = memory.get("stats") or {}
            usage -= int(extra.get("total_inactive_file", extra.get("inactive_file", 0)) or 0)
        if isinstance(usage, int) and isinstance(cap, int) and 0 < cap * 0.95 <= usage:
            return f"the container's memory limit is used up ({usage >> 20} of {cap >> 20} MiB)"
        return None

    def _kill_agent(self, container: Container) -> None:
        """Before a session's first checks in a container: every process of the agent's
        (another session's episode may have left a fork bomb) gets SIGKILL from one kill(-1)
        run as the agent (a root-owned program; nothing root runs is the agent's)."""
        try:
            done = container.exec_run(["/bin/kill", "-KILL", "-1"], user=self.config.user)
        except DOCKER_ERRORS as e:
            raise self._refused(container, "kill the agent's processes", str(e)) from e
        if done.exit_code not in (0, 1, 137, -1, None):  # 137: killed itself, as it should
            raise self._refused(container, "kill the agent's processes", _text(done.output))

    # --- the kernel freeze (README "Freeze") --------------------------------------------------

    def _setup_freezer(self, container: Container) -> bool:
        """Whether the kernel freezes this container's agent: the env arg `freeze`, and for
        "auto" and "kernel" a probe of the host through the freezer container."""
        if self.config.freeze == "signals":
            return False
        try:
            if self._freezer is None:
                self._freezer = KernelFreezer(self.client, home=self.config.home)
            self._freezer.start(str(container.attrs["Image"]))  # the id: what it runs
            self._freezer.probe(container)
        except FreezerUnavailable as e:
            if self.config.freeze == "kernel":
                raise EnvironmentUnusable(
                    f"{self.container_name}: the kernel freeze (env arg freeze = \"kernel\") "
                    f"cannot be used here: {e}; fix: a host with cgroup v2 (Linux 5.14 or "
                    'later) and a rootful Docker engine, or freeze = "auto" / "signals"'
                ) from e
            if self.freeze_fallback is None:
                logger.warning(
                    "%s: the agent's processes are held by signals, not by the kernel: %s",
                    self.container_name, e,
                )  # fmt: skip
            self.freeze_fallback = str(e)
            return False
        self.freeze_fallback = None
        return True

    def _kernel_hold(self, container: Container, uid: int, stop: bool) -> tuple[bool, str | None]:
        """Before an evaluation: the agent's processes frozen (ended, for `stop`) by the
        kernel. Returns whether the kernel holds them, and why the evaluation is the agent's
        failure if it is (what could not be frozen or ended). A freezer that fails here leaves
        the evaluation to the signal freeze, logged."""
        if not self._kernel_freeze.get(str(container.id)) or self._freezer is None:
            return False, None
        why = "the agent's processes could not be {} for the evaluation: {}"
        try:
            left = self._freezer.freeze(container, uid)
            if stop:
                gone = self._freezer.kill(container)
                if gone is not None:
                    return True, why.format("ended", gone)
            elif left is not None:
                return True, why.format("frozen", left)
        except FreezerUnavailable as e:
            logger.warning("%s: the kernel freeze failed: %s", self.container_name, e)
            self._kernel_thaw(container)
            return False, None
        return True, None

    def _kernel_thaw(self, container: Container) -> None:
        if self._freezer is None or not self._kernel_freeze.get(str(container.id)):
            return
        try:
            self._freezer.thaw(container)
        except FreezerUnavailable as e:  # the next reset kills them all the same
            logger.warning("%s: cannot thaw the agent's processes: %s", self.container_name, e)

    def _kernel_kill(self, container: Container) -> None:
        """At reset: every process of the agent's cgroup killed by the kernel (the root
        helper's reset then ends any of the agent's that was never swept into it)."""
        if self._freezer is None or not self._kernel_freeze.get(str(container.id)):
            return
        try:
            left = self._freezer.kill(container)
        except FreezerUnavailable as e:
            logger.warning("%s: the kernel kill failed: %s", self.container_name, e)
            return
        if left is not None:
            logger.warning("%s: the kernel kill left %s", self.container_name, left)

    def _refused(self, container: Container, what: str, error: str) -> ContainerUnavailable:
        hit = self._limit_hit(container, error)
        if hit is not None:
            return AgentExhaustedLimit(f"{what} could not run: {hit}")
        return ExecRefused(f"{self.container_name} refused to {what}: {error[-500:]}")

    def _evaluator_python(self, container: Container) -> str:
        """The interpreter the root helper and the evaluation run with (SessionConfig
        `admin_python`); takes the snapshot of the agent's environment when needed."""
        choice = self.config.admin_python
        if choice != "auto":
            if not self._root_test(container, "-x", choice):
                raise EnvironmentUnusable(
                    f"{self.container_name} has no {choice} (env arg admin_python); fix: "
                    'install it in the image, or use admin_python = "auto"'
                )
            return self._trusted(container, choice)
        snapshot_python = f"{PYTHON_SNAPSHOT}/bin/python3"
        if self._root_test(container, "-x", snapshot_python):
            return snapshot_python
        for source in self._python_env_candidates():
            if not self._root_test(container, "-x", f"{source}/bin/python3"):
                continue
            done = self._root_exec(
                container,
                ["/usr/bin/timeout", "-k", "5", "1800", "/bin/sh", "-c", SNAPSHOT_SCRIPT,
                 "snapshot", source, PYTHON_SNAPSHOT, HOME_MANIFEST],
                demux=True,
            )  # fmt: skip
            if done.exit_code == 0:
                return snapshot_python
            _, err = done.output if isinstance(done.output, tuple) else (b"", b"")
            raise EnvironmentUnusable(
                f"{self.container_name}: cannot take a root-owned copy of the agent's "
                f"environment {source} (exit {done.exit_code}: "
                f"{(err or b'').decode(errors='replace').strip()[-500:]}); fix: use a fresh "
                "container (the copy is taken before its first episode)"
            )
        if self._root_test(container, "-x", SYSTEM_PYTHON):
            return self._trusted(container, SYSTEM_PYTHON)
        raise EnvironmentUnusable(
            f"{self.container_name} has no Python to evaluate with: neither the agent's "
            f"environment ({', '.join(self._python_env_candidates())}) nor {SYSTEM_PYTHON}; "
            "fix: use MLGym's image (aigym/mlgym-agent) or set python_env / admin_python"
        )

    def _trusted(self, container: Container, python: str) -> str:
        """`python`, once it is shown that only root can change it (checked before root runs
        it: an interpreter the agent can write would run the agent's code as root). Two
        execs of coreutils, no fork inside (a container at its pids limit cannot make this
        say "untrusted"): the real path, then the owner and mode of it and each directory
        above it."""
        try:
            real = self._root_exec(container, ["/usr/bin/readlink", "-e", "--", python])
            path = _text(real.output).strip()
            if real.exit_code != 0 or not path.startswith("/"):
                raise self._refused(container, f"resolve {python}", _text(real.output))
            chain = [path]
            while chain[-1] != "/":
                chain.append(posixpath.dirname(chain[-1]))
            done = self._root_exec(container, ["/usr/bin/stat", "-c", "%u %a %n", "--", *chain])
        except DOCKER_ERRORS as e:
            raise self._refused(container, f"inspect {python}", str(e)) from e
        lines = _text(done.output).strip().splitlines()
        if done.exit_code != 0 or len(lines) != len(chain):
            raise self._refused(container, f"inspect {python}", _text(done.output))
        why = ""
        for line in lines:
            owner, mode, name = line.split(" ", 2)
            if owner != "0" or int(mode, 8) & 0o022:
                why = f"{name} is owned by uid {owner} with mode {mode}"
                break
        if why:
            raise EnvironmentUnusable(
                f"{self.container_name}: the evaluation interpreter {python} is not "
                f"trustworthy ({why}); fix: name a root-owned interpreter in admin_python, or "
                'use admin_python = "auto" (a root-owned copy of the agent\'s environment)'
            )
        return python

    def _python_env_candidates(self) -> list[str]:
        if self.config.python_env:
            return [self.config.python_env]
        base = f"{self.config.home}/miniconda3"
        envs = [f"{base}/envs/{self.config.conda_env}"] if self.config.conda_env else []
        return [*envs, base]

    def _root_exec(self, container: Container, argv: list[str], demux: bool = False) -> Any:
        """Run `argv` (absolute program path) as root with a clean environment."""
        return container.exec_run([*ROOT_ENV, *argv], user="root", demux=demux)

    def _root_test(self, container: Container, flag: str, path: str) -> bool:
        """`test flag path` as root: its answer (0 or 1), never a refused exec read as "no"."""
        try:
            done = self._root_exec(container, ["/usr/bin/test", flag, path])
        except DOCKER_ERRORS as e:
            raise self._refused(container, f"test {flag} {path}", str(e)) from e
        if done.exit_code not in (0, 1):
            raise self._refused(container, f"test {flag} {path}", _text(done.output))
        return bool(done.exit_code == 0)

    def _check_imports(self, container: Container, template: _Template) -> None:
        """Once per task and container: the evaluator imports what the task's evaluation
        files import (else every evaluation would fail as if the solution were wrong)."""
        key = (str(container.id), template.key)
        if key in self._checked_imports or not template.imports:
            return
        result = self._admin(container, "check-imports", {"imports": list(template.imports)})
        if not result.get("ok"):
            raise EnvironmentUnusable(
                f"{self.container_name}: the evaluation of task {template.key.rsplit('-', 1)[0]}"
                f" cannot run: {result.get('message')}; fix: install the packages in the "
                "image's task environment"
            )
        self._checked_imports.add(key)

    def _admin(
        self, container: Container, command: str, args: dict[str, Any], timeout: float = 120
    ) -> dict[str, Any]:
        """Run one root-helper command in its own exec as root; its JSON answer."""
        python = self._pythons.get(str(container.id)) or self.config.admin_python
        argv = [
            "/usr/bin/timeout", "-k", "5", f"{timeout:g}",
            python, "-I", "-B", ADMIN_PATH, command, json.dumps(args),
        ]  # fmt: skip
        try:
            result = self._root_exec(container, argv, demux=True)
        except DOCKER_ERRORS as e:
            # the engine could not start the exec: the agent may hold it all
            raise self._refused(container, command, str(e)) from e
        stdout, stderr = result.output if isinstance(result.output, tuple) else (b"", b"")
        text = (stdout or b"").decode(errors="replace").strip()
        try:
            answer = json.loads(text.splitlines()[-1]) if text else None
        except json.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            error = (stderr or b"").decode(errors="replace").strip()[-2000:]
            hit = self._limit_hit(container, f"{error}\n{text}")
            if hit is not None:  # the kernel says why: the agent's processes hold it all
                raise AgentExhaustedLimit(f"{command} could not run: {hit}")
            if result.exit_code in (126, 127):
                raise EnvironmentUnusable(
                    f"{self.container_name} cannot run {python} ({error}); fix: the task "
                    "image needs the agent's Python environment or a root-owned python3"
                )
            raise ContainerBroken(f"{command} gave no answer (exit {result.exit_code}): {error}")
        return answer

    def _restart_container(self, why: str) -> None:
        logger.warning("restarting container %s: %s", self.container_name, why)
        self._drop_shell()
        try:
            self.container().restart(timeout=0)
        except DOCKER_ERRORS as e:
            raise ContainerBroken(f"cannot restart {self.container_name}: {e}") from e
        self.restarts += 1

    def _replace_container(self, why: str) -> None:
        """The container cannot be restored: get a fresh one under the same name."""
        logger.warning("replacing container %s: %s", self.container_name, why)
        self._drop_shell()
        old = self._container_id
        self.replacements += 1
        if self._recreate is not None:
            self._recreate(self.container_name)
        else:  # airvisor's: killed, its pool's health check recreates it under the same name
            with contextlib.suppress(*DOCKER_ERRORS):
                self.client.containers.get(self.container_name).kill()
        deadline = time.monotonic() + max(self.config.container_wait, 1.0)
        while True:
            with contextlib.suppress(ContainerUnavailable):
                fresh = find_running(self.client, self.container_name, wait=0)
                if fresh.id != old:
                    self._container, self._container_id = fresh, fresh.id
                    return
            if time.monotonic() >= deadline:
                raise ContainerUnavailable(
                    f"{self.container_name} could not be restored ({why}) and was not replaced "
                    f"within {self.config.container_wait:g}s"
                )
            time.sleep(0.5)

    def _template(self, task: TaskSpec, ids: _Ids) -> _Template:
        cache_key = (task.id, ids.uid, ids.gid)
        cached = self._templates.get(cache_key)
        if cached is None:
            cached = build_template(task, self.protection(task), ids, self.config.mlgym_mount)
            self._templates[cache_key] = cached
        return cached

    def protection(self, task: TaskSpec) -> TaskProtection:
        return self._protection.get(task.id) or TaskProtection()

    def _tool_entries(self) -> list[_Entry]:
        package = resources.files("air_mlgym")
        return [
            _Entry("tools.py", package.joinpath("container_tools.py").read_bytes(), 0o644, 0, 0),
            _Entry("admin.py", package.joinpath("container_admin.py").read_bytes(), 0o644, 0, 0),
        ]

    # --- commands --------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float | None = None) -> tuple[RunResult, list[str]]:
        """Run `command` in the agent's shell; notes tell the agent about recoveries.

        Raises ContainerUnavailable only when the container itself is gone.
        """
        limit = timeout or self.config.short_timeout
        no_output = self.config.no_output_timeout or limit
        notes: list[str] = []
        shell = self.shell()
        if self._replaced_quietly:
            self._replaced_quietly = False
            notes.append(
                "(The previous shell had exited; this command ran in a new shell in "
                f"{self.config.workspace}. Variables, functions and `cd` from before are gone.)"
            )
        try:
            result = shell.run(command, timeout=limit, no_output_timeout=no_output)
        except ShellDied as e:
            self._drop_shell()
            self.shell()  # raises ContainerUnavailable when the container went away
            notes.append(
                "The shell exited during this command; a new shell was started in "
                f"{self.config.workspace}. Variables, functions and `cd` from before are gone."
            )
            return RunResult(output=e.output, exit_code=None), notes
        if not result.timed_out:
            return result, notes
        why = (
            f"no output was produced for {no_output:g} seconds"
            if result.no_output_timeout
            else f"the command ran for more than {limit:g} seconds"
        )
        notes.append(f"EXECUTION TIMED OUT because {why}; the command was killed.")
        rest = shell.interrupt()
        if rest is None:
            self._drop_shell()
            self.shell()
            notes.append(
                f"The shell did not recover and was replaced; cwd is {self.config.workspace}."
            )
            return result, notes
        return RunResult(
            output=result.output + rest.output,
            exit_code=None,
            timed_out=True,
            no_output_timeout=result.no_output_timeout,
        ), notes

    def put_file(self, path: str, data: bytes) -> None:
        """Write `data` to an absolute `path` in the container, owned by the agent."""
        directory, name = posixpath.split(path)
        try:
            self.container().put_archive(
                directory, _tar([_Entry(name, data, 0o644, self._ids.uid, self._ids.gid)])
            )
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot write {path}: {e}") from e

    def tool(self, args: Sequence[str], payload: str | None = None) -> tuple[RunResult, list[str]]:
        """Run one file command of `container_tools.py` in the agent's shell (its cwd)."""
        argv = list(args)
        if payload is not None:
            payload_path = f"/tmp/air_mlgym_payload_{secrets.token_hex(6)}"
            self.put_file(payload_path, payload.encode())
            argv = [a if a != "{payload}" else payload_path for a in argv]
            command = (
                f"python3 {TOOLS_PATH} {shlex.join(argv)}; __t=$?; "
                f"rm -f {payload_path}; (exit $__t)"
            )
        else:
            command = f"python3 {TOOLS_PATH} {shlex.join(argv)}"
        return self.run(command, timeout=self.config.short_timeout)

    def evaluate(
        self, known: Mapping[str, Evaluation] | None = None, *, stop: bool = False
    ) -> Evaluation:
        """Evaluate the current solution (README "Evaluation"). `known` maps solution digests
        to earlier evaluations of this episode: an unchanged solution is not run again (a
        submit passes none: it is always evaluated, as MLGym does). `stop`: the episode ends
        with it (a submit, the final evaluation): the agent's processes are ended first.

        What the agent causes is a failed evaluation with its reason (`agent_failure`), never
        an exception (README "Blame")."""
        task = self.task
        assert task is not None
        container = self.container()
        ids = self._prepare(container)
        template = self._template(task, ids)
        kind = EVALUATION_KINDS.get(task.entrypoint, "python")
        nonce = secrets.token_hex(16)
        timeout = self.evaluation_timeout(task)
        args = {
            "nonce": nonce,
            "uid": ids.uid,
            "gid": ids.gid,
            "home": self.config.home,
            "workspace": self.config.workspace,
            "task_key": template.key,
            "kind": kind,
            "script": posixpath.basename(task.evaluation_paths[0]),
            "submission": "submission.csv",
            "timeout": timeout,
            "known_hashes": sorted(known or {}),
            "evaluation_files": list(template.evaluation_files),
            "returns": {k: dict(v) for k, v in self.protection(task).returns.items()},
            "submission_rules": dict(self.protection(task).submission),
            "stop": stop,
            "disk_limit": self.config.disk_limit,
        }
        kernel, refused = self._kernel_hold(container, ids.uid, stop)
        try:
            if refused is not None:
                return self._agent_failed(refused)
            args["held_by_kernel"] = kernel
            answer = self._admin(container, "evaluate", args, timeout=timeout + 60)
        except AgentExhaustedLimit as e:
            return self._agent_failed(str(e))
        finally:
            if kernel and not stop:
                self._kernel_thaw(container)
        if not answer.get("written"):
            # The root helper itself failed (what the agent causes is an answer, not this):
            # airvisor's fault, an errored rollout; never a rebuilt workspace scored instead.
            raise EnvironmentUnusable(
                f"{self.container_name}: the evaluation of {task.id} failed in air_mlgym's root "
                f"helper: {answer.get('message', answer)}; fix: report this as a bug of air_mlgym "
                f"with the trace: {str(answer.get('trace', ''))[-1500:]}"
            )
        result = self._read_result(container, nonce)
        status = result.get("status")
        digest = result.get("hash")
        if status == "cached" and known and isinstance(digest, str) and digest in known:
            return replace(known[digest], cached=True)
        if status == "ok" and isinstance(result.get("metrics"), dict):
            metrics = result["metrics"]
            return Evaluation(metrics, str(result.get("output", "")), json.dumps(metrics), digest)
        if status == "invalid_submission":
            why = str(result.get("output", ""))
            return Evaluation(
                None, why, f"The submission was refused before scoring: {why}", digest
            )
        if status == "no_submission":
            return Evaluation(
                None,
                "",
                "Submission artefact not found. You have to produce a valid submission "
                "artefact (a regular file of yours, not a link) as described in the task "
                "description to validate your results.",
                digest,
            )
        if status == "agent_failure":
            return self._agent_failed(str(result.get("message")), digest)
        if status in ("evaluator_broken", "error"):
            # Not the solution's fault: the evaluation cannot run in this container.
            raise EnvironmentUnusable(
                f"{self.container_name}: the evaluation of {task.id} cannot run: "
                f"{result.get('message')}; fix: install what it needs in the image's task "
                "environment"
            )
        output = str(result.get("output") or result.get("message") or "").strip()
        if status == "timeout":
            message = f"The evaluation did not finish within {timeout:g} seconds."
        else:
            message = "Failed to decode metrics from the evaluation script."
        return Evaluation(None, output, f"{message} Output:\n---\n{output}\n---", digest)

    def _agent_failed(self, why: str, digest: str | None = None) -> Evaluation:
        logger.info("%s: the evaluation failed because of the agent: %s", self.container_name, why)
        return Evaluation(
            None, why, f"The evaluation failed because of your processes or files: {why}",
            digest, agent_failure=why,
        )  # fmt: skip

    def evaluation_timeout(self, task: TaskSpec) -> float:
        """The limit of an evaluation and of a training command (`python ...`): an explicit
        long_timeout wins; else the task's training_timeout, else MLGym's long timeout."""
        if self.config.long_timeout_explicit or task.training_timeout is None:
            return self.config.long_timeout
        return task.training_timeout

    def _read_result(self, container: Container, nonce: str) -> dict[str, Any]:
        """The evaluation's result file (root-only, written by the evaluator): read through
        the engine's archive API, not through anything that runs in the container."""
        path = f"{STATE_DIR_RESULTS}/{nonce}.json"
        try:
            stream, _ = container.get_archive(path)
            raw = b"".join(stream)
        except DOCKER_ERRORS as e:
            raise ContainerBroken(f"no evaluation result at {path}: {e}") from e
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            member = archive.extractfile(posixpath.basename(path))
            data = member.read() if member is not None else b""
        try:  # (left for the next reset to remove, with every other result: no exec here)
            result = json.loads(data)
        except json.JSONDecodeError as e:
            raise ContainerBroken(f"unreadable evaluation result: {e}") from e
        return result if isinstance(result, dict) else {}


def parse_metrics(output: str) -> dict[str, Any] | None:
    """The metrics object an evaluation script printed: the whole output as JSON, else the
    last line that is a JSON object."""
    text = output.strip()
    candidates = [text] + [line.strip() for line in reversed(text.splitlines())]
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


@dataclass(frozen=True)
class _Entry:
    name: str
    data: bytes | None  # None: a directory
    mode: int
    uid: int
    gid: int


def _tree(
    source: Path,
    target: str,
    *,
    read_only: bool,
    owner: tuple[int, int],
    root: bool = False,
) -> Iterator[_Entry]:
    """Entries for `source` (file or directory). A directory's contents go under `target`
    (MLGym copies a dataset directory's contents into workspace/data); with `root`, the
    directory itself becomes `target`."""
    uid, gid = owner
    if source.is_file():
        executable = os.access(source, os.X_OK)
        mode = (0o555 if executable else 0o444) if read_only else (0o755 if executable else 0o644)
        yield _Entry(target, source.read_bytes(), mode, uid, gid)
        return
    if root:
        yield _Entry(target, None, 0o555 if read_only else 0o755, uid, gid)
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source).as_posix()
        name = f"{target}/{rel}"
        if path.is_dir():
            yield _Entry(name, None, 0o555 if read_only else 0o755, uid, gid)
        elif path.is_file():
            yield from _tree(path, name, read_only=read_only, owner=owner)


def _tar(entries: Iterator[_Entry] | list[_Entry], mtime: float | None = None) -> bytes:
    buffer = io.BytesIO()
    now = time.time() if mtime is None else mtime
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mode = entry.mode
            info.uid, info.gid = entry.uid, entry.gid
            info.mtime = int(now)
            if entry.data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(entry.data)
                archive.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def workspace_listing(task: TaskSpec) -> list[str]:
    """What the agent will find in the workspace, computed on the host (for the prompt)."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in task.starter_code)
    if any(d.is_local for d in task.datasets):
        names.append("data/")
    return names


@dataclass(frozen=True)
class _Template:
    key: str  # <task id>-<digest of the template>: a changed task gets a new template
    archive: bytes  # extracted in STATE_DIR_TASKS
    install_args: dict[str, Any]
    evaluation_files: tuple[str, ...]
    imports: tuple[str, ...] = ()  # top-level modules the evaluation files import


def build_template(
    task: TaskSpec, protection: TaskProtection, ids: _Ids, mlgym_mount: str | None
) -> _Template:
    """The task's template for the container's root helper (README "Isolation"):
    `<key>/workspace` is what every episode's workspace is rebuilt from (the agent's starter
    files; evaluation files read-only; `data/` root-owned, hidden files root-only) and
    `<key>/eval` the evaluator's private copy (pristine evaluation files, a proxy shim for each
    of the agent's modules the evaluation imports)."""
    agent = (ids.uid, ids.gid)
    starter = {p.name: p for p in task.starter_code}
    evaluation = tuple(
        dict.fromkeys(
            [Path(p).parts[0] for p in task.evaluation_paths] + list(protection.evaluation_files)
        )
    )
    missing = [name for name in evaluation if name not in starter]
    if missing:
        raise ContainerUnavailable(
            f"{task.config_path}: evaluation files {missing} are not among the task's "
            f"starter_code ({sorted(starter)}); fix the task config or the metrics table"
        )
    hidden = set(protection.hidden_files)
    if protection.solution_modules is not None:
        modules = protection.solution_modules
    elif task.entrypoint == "PythonSubmissionTasks":
        modules = tuple(
            Path(n).stem for n in sorted(starter) if n.endswith(".py") and n not in evaluation
        )
    else:
        modules = ()
    entries: list[_Entry] = []
    for name, path in sorted(starter.items()):
        if name in evaluation or name in hidden:
            entries += _tree(path, f"workspace/{name}", read_only=True, owner=(0, 0), root=True)
        else:
            entries += _tree(path, f"workspace/{name}", read_only=False, owner=agent, root=True)
    local = [d for d in task.datasets if d.is_local]
    copy_from: list[str] = []
    if local:
        entries.append(_Entry("workspace/data", None, 0o555, 0, 0))
        for dataset in local:
            if mlgym_mount is None:
                entries += _tree(dataset.data_path, "workspace/data", read_only=True, owner=(0, 0))
            else:
                rel = dataset.data_path.relative_to(task.checkout).as_posix()
                copy_from.append(posixpath.join(mlgym_mount, rel))
    for name in evaluation:
        entries += _tree(starter[name], f"eval/{name}", read_only=True, owner=(0, 0), root=True)
    for module in modules:
        text = SHIM.format(name=module, admin=ADMIN_PATH)
        entries.append(_Entry(f"eval/{module}.py", text.encode(), 0o444, 0, 0))
    digest = hashlib.sha256(_tar(entries, mtime=TEMPLATE_MTIME))
    digest.update(json.dumps([sorted(hidden), copy_from]).encode())
    key = f"{task.id}-{digest.hexdigest()[:16]}"
    rooted = [
        _Entry(key, None, 0o700, 0, 0),
        _Entry(f"{key}/workspace", None, 0o755, *agent),
        _Entry(f"{key}/eval", None, 0o700, 0, 0),
    ]
    rooted += [
        _Entry(f"{key}/{e.name}", e.data, e.mode, e.uid, e.gid)
        for e in entries
        if e.name not in {"workspace", "eval"}
    ]
    local_modules = {Path(e.name).stem for e in entries if e.name.startswith("eval/")}
    local_modules |= {Path(name).stem for name in starter}
    return _Template(
        key=key,
        archive=_tar(rooted, mtime=TEMPLATE_MTIME),
        install_args={"task_key": key, "copy_data_from": copy_from, "hidden": sorted(hidden)},
        evaluation_files=evaluation,
        imports=tuple(
            sorted(evaluation_imports([starter[n] for n in evaluation]) - local_modules)
        ),
    )


def evaluation_imports(paths: Sequence[Path]) -> set[str]:
    """The top-level modules the Python files among `paths` import at module level (absolute
    imports; a file that does not parse contributes nothing)."""
    found: set[str] = set()
    files = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*.py"))]
    for path in files:
        if path.suffix != ".py":
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found
