"""How a run is shown: one view model (built from the store, served by the API as JSON), one
rich renderer for the terminal, and the log reader behind `airvisor logs` and the API."""

from airvisor._logfile import tail_lines
from airvisor.view._logfiles import LogNotFound, find_log, layout_sources, log_files
from airvisor.view._model import (
    RECENT_EVENTS,
    AttemptView,
    ComponentView,
    EventView,
    RestartView,
    RunSummaryView,
    RunView,
    SlurmView,
    build_run_view,
    containment_of,
    event_view,
    find_run,
    find_runs,
    profile_name,
    run_view,
    summary_view,
)
from airvisor.view._progress import (
    ApiSource,
    ProgressView,
    RunSource,
    Shown,
    StoreSource,
    pipe_progress_due,
)
from airvisor.view._render import (
    event_detail,
    event_line,
    progress_line,
    render_run,
    render_runs,
    to_text,
)
from airvisor.view._tail import LogStream

__all__ = [
    "RECENT_EVENTS",
    "ApiSource",
    "AttemptView",
    "ComponentView",
    "EventView",
    "LogNotFound",
    "LogStream",
    "ProgressView",
    "RestartView",
    "RunSource",
    "RunSummaryView",
    "RunView",
    "Shown",
    "SlurmView",
    "StoreSource",
    "build_run_view",
    "containment_of",
    "event_detail",
    "event_line",
    "event_view",
    "find_log",
    "find_run",
    "find_runs",
    "layout_sources",
    "log_files",
    "pipe_progress_due",
    "profile_name",
    "progress_line",
    "render_run",
    "render_runs",
    "run_view",
    "summary_view",
    "tail_lines",
    "to_text",
]
