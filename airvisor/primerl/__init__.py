"""prime-rl adapters: one per supported version, turning a profile into launch specs."""

from airvisor.primerl._adapters import (
    SUPPORTED_VERSIONS,
    TRAINER_MODULE,
    Adapter,
    AdapterError,
    LaunchSpec,
    PrimeRL04,
    PrimeRLMain,
    get_adapter,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "TRAINER_MODULE",
    "Adapter",
    "AdapterError",
    "LaunchSpec",
    "PrimeRL04",
    "PrimeRLMain",
    "get_adapter",
]
