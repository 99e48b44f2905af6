"""Pure decisions over run-directory listings: keep_last, `-1`, step names; torchrun's argv."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airvisor.demo import DemoConfigError, parse_torchrun_argv, steps_to_delete
from airvisor.demo._layout import resolve_resume_step, step_numbers


def test_keep_last_is_prime_rls_trainer_clean() -> None:
    # trainer/ckpt.py maybe_clean (both versions): the keep_last newest tracked steps and the
    # keep_interval multiples stay; completeness plays no part.
    assert steps_to_delete([5, 10, 15, 20], keep_last=2, keep_interval=None) == [5, 10]
    assert steps_to_delete([5, 10, 15, 20], keep_last=1, keep_interval=10) == [5, 15]
    assert steps_to_delete([5, 10], keep_last=None, keep_interval=None) == []


@given(st.sets(st.integers(1, 60)), st.integers(1, 5))
def test_keep_last_properties(tracked: set[int], keep: int) -> None:
    deleted = set(steps_to_delete(tracked, keep_last=keep, keep_interval=None))
    kept = tracked - deleted
    assert deleted <= tracked
    assert len(kept) == min(keep, len(tracked))
    assert all(d < min(kept) for d in deleted) if kept else not deleted


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


def test_torchrun_takes_prime_rls_logging_flags() -> None:
    # v0.4 rl.py:725-744 and main entrypoints/rl.py:320-334 spell `--redirect` (argparse prefix
    # of --redirects).
    args = parse_torchrun_argv(
        ["--role=trainer", "--rdzv-endpoint=localhost:29601", "--rdzv-id=abc",
         "--log-dir=/tmp/x/torchrun", "--local-ranks-filter=0", "--redirect=3", "--tee=3",
         "--nproc-per-node=2", "-m", "prime_rl.trainer.rl.train", "@", "t.json"]
    )
    assert (args.role, args.log_dir) == ("trainer", "/tmp/x/torchrun")
    assert (args.redirects, args.tee) == (3, 3)
    assert args.local_ranks_filter == frozenset({0})
    assert args.ignored == ()
    with pytest.raises(DemoConfigError, match="--tee takes 0-3"):
        parse_torchrun_argv(["--tee=0:1,1:2", "x.py"])
