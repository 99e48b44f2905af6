"""What a look at a run's stacks finds: typed, serialisable (the JSON form of the artifacts and
the API's answer are these models)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field


class _Frozen(BaseModel):
    # A field with a default is still always in the JSON: the API's schema says it is required.
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class Frame(_Frozen):
    """One frame, as py-spy reports it."""

    name: str = Field(description="The function (py-spy's qualified name, e.g. Thread.run).")
    filename: str = Field(description="The file (a shared object for a native frame).")
    short: str = Field(description="py-spy's short file name: relative to its sys.path entry.")
    line: int = Field(description="The line number (0 for a native frame).")
    native: bool = Field(default=False, description="A C/C++ frame (py-spy --native).")
    code: str | None = Field(default=None,
                             description="The source line, when the file could be read.")


class ThreadStack(_Frozen):
    thread_id: int
    name: str | None = None
    os_thread_id: int | None = None
    active: bool = Field(default=False, description="py-spy: running, not idle in a wait.")
    owns_gil: bool = False
    frames: list[Frame] = Field(default_factory=list, description="Innermost frame first.")


class Target(_Frozen):
    """A process to look at: its run component and, for a trainer rank, the rank."""

    pid: int
    component: str
    rank: int | None = None
    argv: list[str] = Field(default_factory=list)

    @computed_field(  # type: ignore[prop-decorator]
        description="How verdicts name it: \"trainer rank 1\", \"orchestrator (pid 123)\".")
    @property
    def label(self) -> str:
        if self.rank is not None:
            return f"{self.component} rank {self.rank}"
        return f"{self.component} (pid {self.pid})"


class ProcessStacks(_Frozen):
    """One process's threads, or why there are none (`note`)."""

    target: Target
    threads: list[ThreadStack] = Field(default_factory=list)
    native: bool = Field(default=False, description="Native frames are included.")
    note: str | None = Field(default=None, description="Why the stacks are missing or partial.")
    errors: list[str] = Field(default_factory=list,
                              description="Each failed py-spy read: its arguments and its whole "
                                          "error output.")
    stopped: bool = Field(default=False,
                          description="The process was stopped (SIGSTOP or a tracer's stop): "
                                      "it runs nothing, its frames are where it stopped.")
    verdict: str = Field(default="", description="One line: where its main thread is.")


class StackCapture(_Frozen):
    """Every member process's stacks at one moment, with one verdict line per process."""

    run_id: str
    attempt: int
    reason: Literal["stall", "on demand"]
    taken_at: float = Field(description="Wall-clock time (Unix seconds) the look began.")
    seconds: float = Field(description="How long the look took.")
    processes: list[ProcessStacks] = Field(default_factory=list)
    summary: str | None = Field(default=None,
                                description="One line across the trainer's ranks: which wait in "
                                            "which collective or GPU sync, which is elsewhere "
                                            "(the odd one out); none for fewer than two ranks.")
    notes: list[str] = Field(default_factory=list,
                             description="What kept it from looking at all (py-spy missing, "
                                         "no live process).")

    @property
    def verdicts(self) -> list[str]:
        return [p.verdict for p in self.processes]
