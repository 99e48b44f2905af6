"""Task containers as the tests start them (shared by the conftest and the test modules)."""

from __future__ import annotations

from typing import Any


def run_task_container(
    client: Any,
    image: str,
    name: str,
    labels: dict[str, str],
    volumes: dict[str, dict[str, str]] | None = None,
) -> Any:
    """A task container as the shipped mlgym profile has airvisor start it: pid 1 is
    air_mlgym's root init, the agent's shells are execs as user agent."""
    from air_mlgym._containers import INIT_COMMAND

    return client.containers.run(
        image, list(INIT_COMMAND), name=name, detach=True, stdin_open=True, user="root",
        working_dir="/home/agent", network_mode="none", labels=labels, volumes=volumes or {},
    )  # fmt: skip


def exec_output(container: Any, argv: list[str], *, user: str = "root", tries: int = 5) -> bytes:
    """The output of a command that always prints something, run in the container: docker-py's
    exec_run now and then hands back an empty output for a command that printed (the stream
    attached after a fast command ended, docker/docker-py#2042; its exit code is right), so an
    empty answer is asked again, a few times. Raises on a non-zero exit status."""
    for _ in range(tries):
        result = container.exec_run(argv, user=user)
        assert result.exit_code == 0, result.output
        if result.output:
            return bytes(result.output)
    raise AssertionError(f"{argv[:3]}... printed nothing in {tries} tries")
