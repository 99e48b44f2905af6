"""Process adapter: launching components, process identity, killing whole trees."""

from airvisor.proc._launch import (
    MARKER_COMPONENT_ENV,
    MARKER_RUN_ENV,
    Launched,
    ProcessIdentity,
    identity_of,
    launch,
)

__all__ = [
    "MARKER_COMPONENT_ENV",
    "MARKER_RUN_ENV",
    "Launched",
    "ProcessIdentity",
    "identity_of",
    "launch",
]
