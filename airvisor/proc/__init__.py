"""Process adapter: launching components (each in a cgroup of its run, or under a child
subreaper where no writable cgroup v2 exists), process identity, run markers, killing whole
trees."""

from airvisor.proc._cgroup import (
    CgroupRun,
    Containment,
    containment,
    containment_mode,
    detect_containment,
    instance_id,
    own_state_dir,
    parse_run_path,
    pid_cgroup,
    run_cgroups,
)
from airvisor.proc._kill import (
    KillReport,
    ProcessTable,
    SurvivorInfo,
    check_seconds,
    owning_run,
    protected_pids,
    terminate_tree,
)
from airvisor.proc._launch import Launched, ProcessIdentity, identity_of, launch, process_alive
from airvisor.proc._marker import (
    MARKER_COMPONENT_ENV,
    MARKER_OWNER_ENV,
    MARKER_RUN_ENV,
    Marker,
    marked_pids,
    processes_with_marker,
    read_marker,
)

__all__ = [
    "MARKER_COMPONENT_ENV",
    "MARKER_OWNER_ENV",
    "MARKER_RUN_ENV",
    "CgroupRun",
    "Containment",
    "KillReport",
    "Launched",
    "Marker",
    "ProcessIdentity",
    "ProcessTable",
    "SurvivorInfo",
    "check_seconds",
    "containment",
    "containment_mode",
    "detect_containment",
    "identity_of",
    "instance_id",
    "launch",
    "marked_pids",
    "own_state_dir",
    "owning_run",
    "parse_run_path",
    "pid_cgroup",
    "process_alive",
    "processes_with_marker",
    "protected_pids",
    "read_marker",
    "run_cgroups",
    "terminate_tree",
]
