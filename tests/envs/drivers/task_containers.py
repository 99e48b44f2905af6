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
