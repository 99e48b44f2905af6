from airvisor.policy import CheckpointHalves, choose_resume_step

BOTH = CheckpointHalves(trainer_complete=True, orchestrator_complete=True)
TRAINER_ONLY = CheckpointHalves(trainer_complete=True, orchestrator_complete=False)
ORCH_ONLY = CheckpointHalves(trainer_complete=False, orchestrator_complete=True)


def test_no_checkpoints_means_fresh_start() -> None:
    choice = choose_resume_step({})
    assert choice.step is None
    assert choice.describe() == "start from scratch"


def test_newest_complete_step_wins() -> None:
    assert choose_resume_step({5: BOTH, 10: BOTH, 15: BOTH}).step == 15


def test_half_written_newest_is_skipped_with_reason() -> None:
    # The orchestrator saved step 15 before the trainer finished it (prime-rl does this).
    choice = choose_resume_step({5: BOTH, 10: BOTH, 15: ORCH_ONLY})
    assert choice.step == 10
    assert choice.skipped == ((15, "trainer half incomplete"),)
    assert "skipped step 15" in choice.describe()


def test_only_incomplete_checkpoints_start_from_scratch() -> None:
    choice = choose_resume_step({5: TRAINER_ONLY, 10: ORCH_ONLY})
    assert choice.step is None
    assert [s for s, _ in choice.skipped] == [10, 5]


def test_never_negative_one() -> None:
    # prime-rl's "-1" (latest by name) would pick 20 here and crash on the missing half.
    assert choose_resume_step({20: ORCH_ONLY, 3: BOTH}).step == 3
