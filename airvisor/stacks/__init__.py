"""Where each process of a run is: Python stacks through py-spy, a one-line verdict per
process, the attempt's stored stacks, and the look taken before a hung attempt is killed."""

from airvisor.stacks._capture import (
    BUDGET_SECONDS,
    EVENT_KIND,
    attempt_dir_of,
    capture,
    capture_run,
    read_capture,
    render_text,
    run_roots,
    stacks_before_kill,
    stacks_dir,
    with_stacks_first,
    write_capture,
)
from airvisor.stacks._model import Frame, ProcessStacks, StackCapture, Target, ThreadStack
from airvisor.stacks._pyspy import Dump, dump_process, explain_failure, find_py_spy, parse_dump
from airvisor.stacks._targets import Seen, assign, live_targets
from airvisor.stacks._verdict import describe_frames, main_thread, verdict

__all__ = [
    "BUDGET_SECONDS", "EVENT_KIND", "Dump", "Frame", "ProcessStacks", "Seen", "StackCapture",
    "Target", "ThreadStack", "assign", "attempt_dir_of", "capture", "capture_run",
    "describe_frames", "dump_process", "explain_failure", "find_py_spy", "live_targets",
    "main_thread", "parse_dump", "read_capture", "render_text", "run_roots",
    "stacks_before_kill", "stacks_dir", "verdict", "with_stacks_first", "write_capture",
]
