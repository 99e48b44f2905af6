"""Process adapter: launching components, process identity, run markers, killing whole trees."""

from airvisor.proc._kill import KillReport, SurvivorInfo, protected_pids, terminate_tree
from airvisor.proc._launch import Launched, ProcessIdentity, identity_of, launch
from airvisor.proc._marker import (
    MARKER_COMPONENT_ENV,
    MARKER_RUN_ENV,
    Marker,
    marked_pids,
    processes_with_marker,
    read_marker,
)

__all__ = [
    "MARKER_COMPONENT_ENV",
    "MARKER_RUN_ENV",
    "KillReport",
    "Launched",
    "Marker",
    "ProcessIdentity",
    "SurvivorInfo",
    "identity_of",
    "launch",
    "marked_pids",
    "processes_with_marker",
    "protected_pids",
    "read_marker",
    "terminate_tree",
]
