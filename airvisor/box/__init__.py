"""The box backend of `airvisor.core`: a run's processes on this machine. RunSupervisor
launches an attempt (prime-rl's launcher or its components) contained in cgroups, watches
exits, /health and the launcher's lines, keeps the inference server across a failure of the
rest, adopts the processes a previous daemon left, and stops trees."""

from airvisor.box._supervisor import ComponentHandle, Hooks, RunSupervisor, describe_exit

__all__ = ["ComponentHandle", "Hooks", "RunSupervisor", "describe_exit"]
