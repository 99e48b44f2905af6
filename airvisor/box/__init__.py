"""The box backend of `airvisor.core`: a run's processes on this machine. RunSupervisor
launches an attempt (prime-rl's launcher or its components) contained in cgroups, watches
exits, /health and the launcher's lines, keeps the inference server across a failure of the
rest, adopts the processes a previous daemon left, and stops trees. One module per concern:
`_launch`, `_kept`, `_adopt`, `_memberwatch`, `_stop` (mixins over `_base`), composed in
`_supervisor`; `_hooks` (its I/O), `_probe` (the inference server's health), `_members`
(the launcher's tree), `_rollouts` (the episode log), `_takeover` (what a new daemon reads)."""

from airvisor.box._hooks import ComponentHandle, Hooks, describe_exit
from airvisor.box._supervisor import RunSupervisor

__all__ = ["ComponentHandle", "Hooks", "RunSupervisor", "describe_exit"]
