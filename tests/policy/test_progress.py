import pytest

from airvisor.policy import StallRule, stalled_for
from airvisor.primerl import (
    child_failure_from_line,
    milestone_from_log_line,
    step_from_log_line,
    step_from_metrics_row,
)

TRAINER = ("\x1b[32m2026-11-26 01:02:03\x1b[0m \x1b[1mSUCCESS\x1b[0m Step 12 | Time: 13.04s | "
           "Loss: 0.0312 | Entropy: 0.5 | Grad. Norm: 0.1 | LR: 1e-06 | Throughput: 1 tokens/s")
ORCH = "SUCCESS Step 7 | Time: 13.04s | Reward: 0.1160 | Throughput: 4577.7 tokens/s"


@pytest.mark.parametrize(
    ("line", "step"),
    [
        (TRAINER, 12),
        (ORCH, 7),
        ("\x1b[1;32mSUCCESS\x1b[0m \x1b[1mStep\x1b[0m 3 | Time: 1s", 3),  # colour inside
        ("INFO Starting orchestrator step 5", None),  # not a finished step
        ("Waiting for weight checkpoint 4", None),
        ("", None),
    ],
)
def test_step_lines(line: str, step: int | None) -> None:
    assert step_from_log_line(line) == step


def test_milestones() -> None:
    assert milestone_from_log_line("\x1b[1mINFO\x1b[0m Starting training loop") == \
        "training_loop_started"
    assert milestone_from_log_line("SUCCESS RL trainer finished!") == "trainer_finished"
    assert milestone_from_log_line("Step 3 | x") is None


@pytest.mark.parametrize(
    ("row", "step"),
    [('{"step": 4, "time": 1.0}', 4), ('{"step": "4"}', None), ('{"step": true}', None),
     ('{"ste', None), ("[1, 2]", None), ('{"loss": 1}', None)],
)
def test_metrics_rows(row: str, step: int | None) -> None:
    assert step_from_metrics_row(row) == step


RULE = StallRule(stall_timeout=10.0, first_step_grace=30.0)


def test_first_step_gets_the_longer_grace() -> None:
    assert stalled_for(RULE, now=129.0, attempt_started_at=100.0, last_progress_at=None) is None
    assert stalled_for(RULE, now=131.0, attempt_started_at=100.0, last_progress_at=None) == 1.0


def test_stall_after_progress_uses_stall_timeout() -> None:
    assert stalled_for(RULE, now=115.0, attempt_started_at=0.0, last_progress_at=106.0) is None
    assert stalled_for(RULE, now=117.0, attempt_started_at=0.0, last_progress_at=106.0) == 1.0


@pytest.mark.parametrize(("line", "expected"), [
    # v0.4 rl.py and main utils/process.py: f"{process_name.capitalize()} failed with exit code"
    ("ERROR Trainer failed with exit code 1", ("trainer", "1")),
    ("\x1b[31mERROR\x1b[0m Orchestrator failed with exit code -9", ("orchestrator", "-9")),
    ("Teacher_inference failed with exit code 2", ("teacher-inference", "2")),
    ("Env_server failed with exit code 3", ("env-server", "3")),
    ("Trainer finished with exit code 0", None),
    ("Step 3 | Loss 0.1", None),
])
def test_the_launchers_failure_line_names_the_child(
        line: str, expected: tuple[str, str] | None) -> None:
    found = child_failure_from_line(line)
    assert (None if found is None else (found.component, found.code)) == expected
