"""The processes table (`airvisor processes` / `reap`): one line per process, its reason under
it, whatever the command line holds."""

from __future__ import annotations

from airvisor.reaper import format_candidates
from airvisor.reaper._discover import Candidate


def candidate(pid: int, command: str, **extra: object) -> Candidate:
    fields: dict[str, object] = {"pid": pid, "ppid": 1, "children": (), "depth": 0,
                                 "user": "alice", "uid": 1000, "age": 75.0,
                                 "command": command, "kind": "vllm", "reason": "stale vLLM"}
    fields.update(extra)
    return Candidate(**fields)  # type: ignore[arg-type]


def test_each_process_is_one_row_with_its_reason_under_it() -> None:
    table = format_candidates([
        candidate(12, "python -m vllm.entrypoints.openai.api_server [--port 8000]",
                  children=(13,), gpu_memory={0: 5 << 30}, ports=(8000,)),
        candidate(13, "python -c import os\nos.fork()", ppid=12, depth=1,
                  blocked_by="slurm job 7", reason="in a live job"),
    ]).splitlines()
    assert table[0].split() == ["PID", "TREE", "USER", "AGE", "GPU", "MEM", "PORTS", "COMMAND"]
    assert table[1].split()[:2] == ["12", "ppid"]
    assert table[1].endswith("[--port 8000]")  # brackets are text, not rich markup
    assert "0:5.0 GiB" in table[1] and "8000" in table[1]
    assert table[2].strip() == "why: stale vLLM"
    assert table[3].lstrip().startswith("└ 13")
    assert table[3].endswith("python -c import os⏎os.fork()")  # a newline stays in its row
    assert table[4].strip() == "not reaped: slurm job 7: in a live job"
    assert len(table) == 5


def test_no_candidates() -> None:
    assert format_candidates([]) == "No stale processes."
