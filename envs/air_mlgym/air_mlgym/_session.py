"""The task session: one container, one long-lived shell in it, and the task's workspace.

No verifiers here. What the seeds got wrong and this gets right:
- reset leaves the workspace first (`cd /home/agent`), kills what the previous episode left
  running, and only then rebuilds the workspace, so episode N+1 never runs in a deleted cwd;
- files (starter code, data, evaluation scripts, the file-command helper) go in with
  `put_archive`, never through the shell;
- a shell that died or timed out is replaced by a fresh exec, not left to fail every later
  rollout; docker failures surface as `ContainerUnavailable` for the episode to handle.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import secrets
import shlex
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import docker
from docker.models.containers import Container

from air_mlgym._containers import ContainerUnavailable, find_running
from air_mlgym._shell import DOCKER_ERRORS, DockerShell, RunResult, ShellDied
from air_mlgym._tasks import TaskSpec

TOOLS_DIR = "/opt/air_mlgym"


class WorkspaceLost(ContainerUnavailable):
    """The container was recreated mid-episode: it runs, but the workspace must be rebuilt."""


TOOLS_PATH = f"{TOOLS_DIR}/tools.py"


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
    no_output_timeout: float | None = None  # default: the command's own timeout
    container_wait: float = 60.0  # how long a missing container may take to come back
    setup_commands: tuple[str, ...] = ()  # run in every new shell (after conda activation)
    conda_env: str | None = "mlgym_generic"  # activated when the task uses the generic env
    # Where the MLGym checkout is mounted inside the container (read-only); datasets are then
    # copied from there inside the container instead of being uploaded every episode.
    mlgym_mount: str | None = None

    @property
    def workspace(self) -> str:
        return f"{self.home}/workspace"


@dataclass(frozen=True)
class Evaluation:
    metrics: dict[str, Any] | None
    output: str
    message: str  # what the agent is told


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
    ) -> None:
        self.client = client
        self.container_name = container_name
        self.config = config or SessionConfig()
        self._revive = revive  # set for containers we own: start them again when stopped
        self._container: Container | None = None
        self._shell: DockerShell | None = None
        self._ids = _Ids()
        self.python = "python"
        self.task: TaskSpec | None = None
        self._replaced_quietly = False
        self._container_id: str | None = None
        self._resetting = False

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
        ids = self._shell.run("id -u; id -g", timeout=10)
        numbers = [int(x) for x in ids.output.split() if x.isdigit()]
        if len(numbers) == 2:
            self._ids = _Ids(uid=numbers[0], gid=numbers[1])
        if self.task is not None and self.task.use_generic_conda and self.config.conda_env:
            env = shlex.quote(self.config.conda_env)
            self._shell.run(
                f"command -v conda >/dev/null 2>&1 && conda activate {env} || true",
                timeout=60,
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

    # --- workspace -----------------------------------------------------------------------

    def reset(self, task: TaskSpec) -> None:
        """Leave and rebuild the workspace for a new episode of `task`.

        A shell that dies on the way (e.g. killed between episodes, before docker reports it
        gone) is replaced and the reset retried once.
        """
        self.task = task
        self._resetting = True
        try:
            for attempt in (1, 2):
                try:
                    self._reset_once(task)
                    return
                except ShellDied as e:
                    self._drop_shell()
                    if attempt == 2:
                        raise ContainerUnavailable(f"shell keeps dying during reset: {e}") from e
        finally:
            self._resetting = False

    def _reset_once(self, task: TaskSpec) -> None:
        shell = self.shell()
        self._replaced_quietly = False
        # Whatever the previous episode left running in the background goes first.
        shell.kill_children()
        # The fix for the seeds' bug: never delete the directory the shell stands in.
        self._run_checked(shell, f"cd {shlex.quote(self.config.home)}")
        container = self.container()
        ws = self.config.workspace
        try:
            # As root: data and evaluation files are root-owned and read-only for the agent.
            result = container.exec_run(["rm", "-rf", ws], user="root")
            if result.exit_code != 0:
                raise ContainerUnavailable(f"cannot clear {ws}: {result.output!r}")
            container.exec_run(["mkdir", "-p", TOOLS_DIR], user="root")
            container.put_archive(TOOLS_DIR, _tar(self._tool_entries()))
            container.put_archive(self.config.home, _tar(self._workspace_entries(task)))
            self._copy_mounted_datasets(container, task)
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot rebuild the workspace: {e}") from e
        self._run_checked(shell, f"cd {shlex.quote(ws)}")
        self._run_checked(shell, 'export CURRENT_FILE="" CURRENT_LINE=0')

    def _copy_mounted_datasets(self, container: Container, task: TaskSpec) -> None:
        """With the checkout mounted in the container, copy datasets there (no upload)."""
        mount = self.config.mlgym_mount
        if mount is None:
            return
        data = f"{self.config.workspace}/data"
        for dataset in (d for d in task.datasets if d.is_local):
            source = posixpath.join(mount, dataset.data_path.relative_to(task.checkout).as_posix())
            copied = container.exec_run(["cp", "-R", f"{source}/.", data], user="root")
            if copied.exit_code != 0:
                output = copied.output if isinstance(copied.output, bytes) else b""
                raise ContainerUnavailable(
                    f"cannot copy dataset {dataset.name} from {source} (is the MLGym checkout "
                    f"mounted at {mount}?): {output.decode(errors='replace').strip()}"
                )
        container.exec_run(["chown", "-R", "0:0", data], user="root")
        container.exec_run(["chmod", "-R", "a-w", data], user="root")

    def restore_evaluation_files(self) -> None:
        """Put pristine evaluation scripts back before evaluating (the agent may edit them)."""
        assert self.task is not None
        entries = list(self._evaluation_entries(self.task))
        if not entries:
            return
        try:
            self.container().put_archive(self.config.workspace, _tar(entries))
        except DOCKER_ERRORS as e:
            raise ContainerUnavailable(f"cannot restore evaluation files: {e}") from e

    def _tool_entries(self) -> list[_Entry]:
        source = resources.files("air_mlgym").joinpath("container_tools.py").read_bytes()
        return [_Entry("tools.py", source, mode=0o644, uid=0, gid=0)]

    def _workspace_entries(self, task: TaskSpec) -> Iterator[_Entry]:
        agent = (self._ids.uid, self._ids.gid)
        yield _Entry("workspace", None, mode=0o755, uid=agent[0], gid=agent[1])
        local = [d for d in task.datasets if d.is_local]
        if local:
            yield _Entry("workspace/data", None, mode=0o555, uid=0, gid=0)
        if local and self.config.mlgym_mount is None:
            for dataset in local:
                # MLGym copies each local dataset's directory into workspace/data.
                yield from _tree(dataset.data_path, "workspace/data", read_only=True, owner=(0, 0))
        eval_names = {Path(p).parts[0] for p in task.evaluation_paths}
        for path in task.starter_code:
            if path.name in eval_names and task.evaluation_read_only:
                continue  # added below, read-only
            yield from _tree(
                path, f"workspace/{path.name}", read_only=False, owner=agent, root=True
            )
        for entry in self._evaluation_entries(task):
            yield _Entry(f"workspace/{entry.name}", entry.data, entry.mode, entry.uid, entry.gid)

    def _evaluation_entries(self, task: TaskSpec) -> Iterator[_Entry]:
        if not task.evaluation_read_only:
            return
        eval_names = {Path(p).parts[0] for p in task.evaluation_paths}
        for path in task.starter_code:
            if path.name in eval_names:
                yield from _tree(path, path.name, read_only=True, owner=(0, 0), root=True)

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

    def evaluate(self) -> Evaluation:
        """Run the task's evaluation script the way MLGym does and parse its JSON metrics."""
        task = self.task
        assert task is not None
        self.restore_evaluation_files()
        ws = self.config.workspace
        script = shlex.quote(posixpath.join(ws, task.evaluation_paths[0]))
        py = self.python
        if task.entrypoint in {"CSVSubmissionTasks", "ModelSubmissionTasks"}:
            if task.entrypoint == "CSVSubmissionTasks":
                probe, _ = self.run(
                    f"test -f {shlex.quote(ws)}/submission.csv && echo yes || echo no"
                )
                submission = f"{ws}/submission.csv" if probe.output.strip() == "yes" else None
                flag = "--submission_file"
            else:
                probe, _ = self.run(f"find {shlex.quote(ws)} -type f -name '*.yaml' | head -n 1")
                submission = probe.output.strip() or None
                flag = "--config_fname"
            if submission is None:
                return Evaluation(
                    None,
                    "",
                    "Submission artefact not found. You have to produce a valid submission "
                    "artefact as described in the task description to validate your results.",
                )
            command = f"{py} {script} {flag} {shlex.quote(submission)}"
        elif task.entrypoint == "LMSubmissionTasks":
            command = (
                "torchrun --nproc_per_node=$(nvidia-smi --list-gpus 2>/dev/null | wc -l) "
                f"--standalone {script}"
            )
        else:
            command = f"{py} {script}"
        timeout = task.training_timeout or self.config.long_timeout
        result, notes = self.run(f"(cd {shlex.quote(ws)} && {command})", timeout=timeout)
        metrics = parse_metrics(result.output)
        if metrics is None:
            message = (
                "Failed to decode metrics from the evaluation script. Output:\n---\n"
                f"{result.output.strip()}\n---"
            )
            if notes:
                message += "\n" + "\n".join(notes)
            return Evaluation(None, result.output, message)
        return Evaluation(metrics, result.output, json.dumps(metrics))

    def _run_checked(self, shell: DockerShell, command: str) -> None:
        """Run a setup command; ShellDied propagates (the caller retries with a new shell)."""
        result = shell.run(command, timeout=self.config.short_timeout)
        if result.exit_code != 0:
            raise ContainerUnavailable(f"setup command {command!r} failed: {result.output!r}")


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


def _tar(entries: Iterator[_Entry] | list[_Entry]) -> bytes:
    buffer = io.BytesIO()
    now = time.time()
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
