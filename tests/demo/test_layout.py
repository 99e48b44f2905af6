"""Pure decisions over run-directory listings: pruning, `-1`, step names; torchrun's argv."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.demo import DemoConfigError, parse_torchrun_argv, steps_to_prune
from airvisor.demo._layout import resolve_resume_step, step_numbers


def test_prune_keeps_newest_complete_and_never_touches_newer_incomplete() -> None:
    # 25 is being written (incomplete); 5..20 complete; 3 is an old incomplete leftover.
    assert steps_to_prune([5, 10, 15, 20], [3, 5, 10, 15, 20, 25], keep=2) == [3, 5, 10]
    assert steps_to_prune([5, 10], [5, 10, 15], keep=3) == []
    assert steps_to_prune([5, 10, 15], [5, 10, 15], keep=None) == []


@given(
    st.sets(st.integers(1, 60)),
    st.sets(st.integers(1, 60)),
    st.integers(1, 5),
)
def test_prune_properties(complete: set[int], incomplete: set[int], keep: int) -> None:
    present = complete | incomplete
    pruned = set(steps_to_prune(complete, present, keep))
    kept_complete = complete - pruned
    assert pruned <= present
    assert len(kept_complete) == min(keep, len(complete))
    # What survives is the newest complete ones, and nothing newer than them was removed.
    assert all(p < min(kept_complete) for p in pruned) if kept_complete else not pruned


def test_latest_is_the_highest_name_as_in_prime_rl() -> None:
    assert resolve_resume_step(-1, [5, 15, 10]) == 15
    assert resolve_resume_step(-1, []) is None
    assert resolve_resume_step(10, [5]) == 10


def test_step_numbers_ignore_other_names() -> None:
    assert step_numbers(["step_10", "step_2", "tmp", "step_x", ".step_3.tmp-1"]) == [2, 10]


@pytest.mark.parametrize(
    "argv",
    [
        # the adapter's v0.4 / main form
        [
            "--nproc-per-node=2",
            "--rdzv-endpoint=localhost:29601",
            "--rdzv-id=run1",
            "--local-ranks-filter=0",
            "-m",
            "prime_rl.trainer.rl.train",
            "@",
            "t.toml",
            "--x",
            "1",
        ],
        # `--opt value` form, underscores, and the no-python console-script form
        [
            "--nproc_per_node",
            "2",
            "--rdzv_endpoint",
            "localhost:29601",
            "--rdzv-id",
            "run1",
            "--no-python",
            "trainer",
            "@",
            "t.toml",
            "--x",
            "1",
        ],
        # a script path, with an unknown option in `=` form
        [
            "--nproc-per-node",
            "2",
            "--rdzv-endpoint",
            "127.0.0.1:29601",
            "--rdzv-id=run1",
            "--future-option=3",
            "src/prime_rl/trainer/rl/train.py",
            "@",
            "t.toml",
            "--x",
            "1",
        ],
    ],
)
def test_torchrun_forms(argv: list[str]) -> None:
    args = parse_torchrun_argv(argv)
    assert args.nproc_per_node == 2
    assert args.master_port == 29601
    assert args.master_addr == "127.0.0.1"
    assert args.rdzv_id == "run1"
    assert args.worker_args == ("@", "t.toml", "--x", "1")


def test_torchrun_defaults_and_errors() -> None:
    args = parse_torchrun_argv(["--standalone", "--nproc-per-node=gpu", "train.py"], visible_gpus=3)
    assert (args.nproc_per_node, args.master_port, args.worker_args) == (3, 29500, ())
    assert args.ignored == ()
    with pytest.raises(DemoConfigError, match="missing the training script"):
        parse_torchrun_argv(["--nproc-per-node=2"])
    with pytest.raises(DemoConfigError, match="--nproc-per-node must be a number"):
        parse_torchrun_argv(["--nproc-per-node=two", "x.py"])
    with pytest.raises(DemoConfigError, match="needs a value"):
        parse_torchrun_argv(["--nproc-per-node"])
