"""The run page served by the daemon at `/`, and its background sampler.

The page is plain HTML, CSS and dependency-free JavaScript shipped as package data (no build
step, nothing fetched at run time); its charts are inline SVG drawn by that script.
"""

from airvisor.daemon.web._collector import (
    TRAINING_KEYS,
    Background,
    RunSampler,
    gpu_series,
    metrics_from_log_line,
    metrics_from_row,
    runs_of_points,
    training_series,
)
from airvisor.daemon.web._routes import DefaultNotify, install, page_data

__all__ = [
    "TRAINING_KEYS",
    "Background",
    "DefaultNotify",
    "RunSampler",
    "gpu_series",
    "install",
    "metrics_from_log_line",
    "metrics_from_row",
    "page_data",
    "runs_of_points",
    "training_series",
]
