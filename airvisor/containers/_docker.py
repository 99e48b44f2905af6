"""The Docker adapter: the only module that imports `docker`.

Every engine call goes through `DockerEngine`, which turns the SDK's exceptions into
`ContainerError`s with a human message (no docker traceback leaks) and its responses into plain
`ContainerFacts` / `ProbeResult` values for the pure policy.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, Mount

from airvisor.containers._types import ContainerError, ContainerFacts, ContainerSpec, ProbeResult

_DEFAULT_HOST = "unix:///var/run/docker.sock"


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or _DEFAULT_HOST


def _unreachable(detail: str) -> ContainerError:
    return ContainerError(
        f"Docker engine not reachable at {engine_address()}: start dockerd / check permissions "
        f"(is this user in the docker group?) [{detail}]"
    )


def _explain(error: BaseException) -> str:
    if isinstance(error, docker.errors.APIError):
        explanation = error.explanation
        if isinstance(explanation, bytes):
            explanation = explanation.decode("utf-8", "replace")
        return str(explanation or error).strip()
    return str(error).strip() or type(error).__name__


@contextmanager
def _engine_errors(action: str) -> Iterator[None]:
    """Turn whatever the SDK raises during `action` into a ContainerError."""
    try:
        yield
    except ContainerError:
        raise
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as error:
        raise _unreachable(f"{action}: {_explain(error)}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        raise ContainerError(f"{action}: {_explain(error)}") from None


def _is_gpu_runtime_error(message: str) -> bool:
    return "could not select device driver" in message or "nvidia-container" in message


class DockerEngine:
    """A connection to the Docker engine, made on first use."""

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client
        self._connect_lock = threading.Lock()
        # Probes that timed out and are still blocked in the engine, by container id: the next
        # check does not stack another thread on a container that is already hung.
        self._hung_probes: dict[str, threading.Thread] = {}

    @property
    def client(self) -> docker.DockerClient:
        with self._connect_lock:
            if self._client is None:
                try:
                    self._client = docker.from_env()
                except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
                    raise _unreachable(_explain(e)) from None
            return self._client

    def close(self) -> None:
        with self._connect_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- engine and images --------------------------------------------------------------------
    def ping(self) -> None:
        with _engine_errors("ping"):
            self.client.ping()

    def image_present(self, image: str) -> bool:
        try:
            with _engine_errors(f"inspect image {image}"):
                self.client.images.get(image)
        except ContainerError as error:
            if "No such image" in error.message or "no such image" in error.message:
                return False
            raise
        return True

    def pull(self, image: str) -> None:
        """Pull `image`; a ContainerError whose message holds the registry's answer on failure."""
        repository, tag = _split_image(image)
        with _engine_errors(f"pull {image}"):
            self.client.images.pull(repository, tag=tag)

    def run_once(self, image: str, argv: list[str], *, mounts: list[tuple[str, str]],
                 labels: Mapping[str, str], timeout: float) -> tuple[int, str]:
        """Run `argv` (its first element the entrypoint) in a throwaway container of `image`:
        as root, without network, `mounts` ((source, target) pairs) read-only; its exit status
        and output (stdout and stderr). The container is removed whatever happens."""
        with _engine_errors(f"run a container of {image}"):
            container = self.client.containers.create(
                image, command=argv[1:], entrypoint=[argv[0]], user="root",
                network_mode="none", labels=dict(labels), detach=True,
                mounts=[Mount(target=target, source=source, type="bind", read_only=True)
                        for source, target in mounts])
        try:
            with _engine_errors(f"run a container of {image}"):
                container.start()
                status = container.wait(timeout=timeout)
                output = container.logs(stdout=True, stderr=True)
        finally:
            try:
                with _engine_errors("remove the throwaway container"):
                    container.remove(force=True)
            except ContainerError:
                pass  # already gone; a leftover carries `labels`
        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
        return int(status.get("StatusCode", -1)), text

    # -- containers ---------------------------------------------------------------------------
    def create(self, spec: ContainerSpec) -> ContainerFacts:
        kwargs: dict[str, Any] = {
            "name": spec.name,
            "command": list(spec.command),
            "labels": dict(spec.labels),
            "environment": dict(spec.env),
            "user": spec.user,
            "working_dir": spec.working_dir,
            "network_mode": spec.network_mode,
            # MLGym's `docker run -i`: one long-lived shell reading commands from stdin, no tty.
            "stdin_open": True,
            "tty": False,
            "detach": True,
            "mounts": [
                Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                for m in spec.mounts
            ],
        }
        if spec.nano_cpus is not None:
            kwargs["nano_cpus"] = spec.nano_cpus
        if spec.mem_limit is not None:
            kwargs["mem_limit"] = spec.mem_limit
        if spec.gpu_ids:
            kwargs["device_requests"] = [
                DeviceRequest(
                    driver="nvidia",
                    device_ids=[str(gpu) for gpu in spec.gpu_ids],
                    capabilities=[["gpu"]],
                )
            ]
        try:
            with _engine_errors(f"create container {spec.name}"):
                container = self.client.containers.create(spec.image, **kwargs)
        except ContainerError as error:
            if "No such image" in error.message or "no such image" in error.message:
                raise ContainerError(
                    f"create container {spec.name}: image {spec.image} is not present: "
                    "run preflight (it pulls when a registry answers) or `docker load` it"
                ) from None
            raise
        return _facts(container.attrs)

    def start(self, container_id: str, name: str) -> None:
        try:
            with _engine_errors(f"start container {name}"):
                self.client.api.start(container_id)
        except ContainerError as error:
            if _is_gpu_runtime_error(error.message):
                raise ContainerError(
                    f"container {name} could not start: Docker has no NVIDIA GPU runtime for its "
                    f"GPU device request ({error.message}). Install the NVIDIA Container Toolkit "
                    "and restart dockerd, or run the task containers without GPUs "
                    "([containers] gpus = [] and [gpus] containers = [])"
                ) from None
            raise

    def inspect(self, ref: str) -> ContainerFacts | None:
        """A container by id or name; None when it does not exist."""
        try:
            with _engine_errors(f"inspect container {ref}"):
                return _facts(self.client.api.inspect_container(ref))
        except ContainerError as error:
            if "No such container" in error.message or "no such container" in error.message:
                return None
            raise

    def list_labelled(self, labels: Mapping[str, str | None]) -> list[ContainerFacts]:
        """Containers (running or not) carrying every label (`None`: any value); filtered on the
        server, then inspected so the caller can re-check the labels."""
        selectors = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        with _engine_errors("list containers"):
            summaries = self.client.api.containers(all=True, filters={"label": selectors})
        found = []
        for summary in summaries:
            facts = self.inspect(summary["Id"])
            if facts is not None:  # removed meanwhile
                found.append(facts)
        return found

    def remove(self, container_id: str, *, grace: float) -> None:
        """Stop (SIGTERM, SIGKILL after `grace` seconds) and remove; already gone is fine."""
        try:
            with _engine_errors(f"stop container {container_id[:12]}"):
                self.client.api.stop(container_id, timeout=max(0, round(grace)))
        except ContainerError as error:
            if "No such container" in error.message or "no such container" in error.message:
                return
            # A paused or wedged container may refuse a stop: the forced remove below kills it.
        try:
            with _engine_errors(f"remove container {container_id[:12]}"):
                self.client.api.remove_container(container_id, force=True)
        except ContainerError as error:
            lowered = error.message.lower()
            if "no such container" in lowered or "already in progress" in lowered:
                return
            raise

    # -- health -------------------------------------------------------------------------------
    def probe_many(
        self, container_ids: list[str], argv: list[str], *, user: str, timeout: float
    ) -> dict[str, ProbeResult]:
        """One exec round-trip into each container, concurrently, each bounded by `timeout`.

        The SDK's exec has no timeout, so each runs in a daemon thread joined with a deadline; a
        thread that outlives it stays blocked until the container is removed (which closes the
        exec stream), and that container is not probed again while it is blocked.
        """
        results: dict[str, ProbeResult] = {}
        threads: dict[str, threading.Thread] = {}
        self._hung_probes = {k: t for k, t in self._hung_probes.items() if t.is_alive()}
        for container_id in container_ids:
            hung = self._hung_probes.get(container_id)
            if hung is not None and hung.is_alive():
                results[container_id] = ProbeResult(
                    False, "an earlier command is still hanging in the container", timed_out=True
                )
                continue
            self._hung_probes.pop(container_id, None)
            thread = threading.Thread(
                target=self._probe_into,
                args=(container_id, argv, user, results),
                name=f"airvisor-probe-{container_id[:12]}",
                daemon=True,
            )
            thread.start()
            threads[container_id] = thread
        deadline = time.monotonic() + timeout
        for container_id, thread in threads.items():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self._hung_probes[container_id] = thread
                results[container_id] = ProbeResult(
                    False, f"no answer within {timeout:g}s (exec_timeout)", timed_out=True
                )
        return results

    def _probe_into(
        self, container_id: str, argv: list[str], user: str, results: dict[str, ProbeResult]
    ) -> None:
        try:
            result = self._probe(container_id, argv, user)
        except ContainerError as error:
            result = ProbeResult(False, error.message)
        except Exception as error:  # a worker thread must report, never die silently
            result = ProbeResult(False, f"{type(error).__name__}: {error}")
        # A late answer after the deadline is dropped: the caller already recorded a timeout.
        results.setdefault(container_id, result)

    def _probe(self, container_id: str, argv: list[str], user: str) -> ProbeResult:
        api = self.client.api
        with _engine_errors("exec"):
            exec_id = api.exec_create(container_id, argv, user=user, stdout=True, stderr=True)["Id"]
            output = api.exec_start(exec_id)
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        if exit_code == 0:
            return ProbeResult(True)
        text = output.decode("utf-8", "replace").strip() if isinstance(output, bytes) else ""
        return ProbeResult(False, f"exit code {exit_code}: {text[-200:]}".rstrip(": "))


def _split_image(image: str) -> tuple[str, str | None]:
    """`repo[:tag][@digest]` -> (repo, tag) as `images.pull` wants them; a ':' after the last
    '/' is a tag, one before it belongs to a registry host:port."""
    if "@" in image:
        return image, None
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1 :]
    return image, "latest"


def _facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    host_config = attrs.get("HostConfig") or {}
    requests_ = tuple(host_config.get("DeviceRequests") or ())
    gpu_ids = tuple(
        str(device)
        for request in requests_
        if request.get("Driver") == "nvidia"
        for device in (request.get("DeviceIDs") or ())
    )
    status = str(state.get("Status") or "unknown")
    exit_code = state.get("ExitCode")
    return ContainerFacts(
        container_id=str(attrs.get("Id", "")),
        name=str(attrs.get("Name", "")).lstrip("/"),
        state=status,
        exit_code=(
            int(exit_code) if exit_code is not None and status in ("exited", "dead") else None
        ),
        oom_killed=bool(state.get("OOMKilled")),
        error=str(state.get("Error") or ""),
        labels=dict(config.get("Labels") or {}),
        image=str(config.get("Image") or ""),
        gpu_ids=gpu_ids,
        device_requests=requests_,
    )
