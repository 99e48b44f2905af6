"""Stand-ins for prime-rl's inference server, torchrun + trainer, and orchestrator.

The demo profiles run airvisor's real supervisor over these simulated components; tests use them
to exercise launch, progress watching, fault recovery and process-tree cleanup without GPUs or
prime-rl. `python -m airvisor.demo --prime-rl {0.4,main} rl @ rl.toml` is that version's `rl`
launcher; `python -m airvisor.demo [--prime-rl V] {inference,torchrun,trainer,orchestrator}` runs
one component.
"""

from airvisor.demo._cli import SUBCOMMANDS, main
from airvisor.demo._config import (
    DEMO_ENV,
    DemoConfigError,
    InferenceDemoSettings,
    InferenceSettings,
    OrchestratorSettings,
    StepDemoSettings,
    TrainerSettings,
    parse_args,
)
from airvisor.demo._faults import FAULTS_DIR, fault_marker
from airvisor.demo._layout import (
    broadcast_marker,
    checkpoint_half,
    completion_file,
    metrics_file,
    orchestrator_paths,
    rollouts_dir,
    steps_to_delete,
    trainer_paths,
)
from airvisor.demo._log import format_line
from airvisor.demo._torchrun import TorchrunArgs, parse_torchrun_argv

ENGINE_CORE_TITLE = "VLLM::EngineCore"  # the process title of the inference stand-in's child

__all__ = [
    "DEMO_ENV",
    "ENGINE_CORE_TITLE",
    "FAULTS_DIR",
    "SUBCOMMANDS",
    "DemoConfigError",
    "InferenceDemoSettings",
    "InferenceSettings",
    "OrchestratorSettings",
    "StepDemoSettings",
    "TorchrunArgs",
    "TrainerSettings",
    "broadcast_marker",
    "checkpoint_half",
    "completion_file",
    "fault_marker",
    "format_line",
    "main",
    "metrics_file",
    "orchestrator_paths",
    "parse_args",
    "parse_torchrun_argv",
    "rollouts_dir",
    "steps_to_delete",
    "trainer_paths",
]
