import pytest

from airvisor.policy import GiveUp, Restart, RestartPolicy, backoff_delay, decide_restart

POLICY = RestartPolicy(max_restarts=3, window=100.0, backoff_initial=1.0, backoff_factor=2.0,
                       backoff_max=3.0)


def replay(failure_times: list[float]) -> list[Restart | GiveUp]:
    """Replay a history of failures with the injected clock, recording each decision."""
    restarts: list[float] = []
    decisions: list[Restart | GiveUp] = []
    for now in failure_times:
        decision = decide_restart(POLICY, restarts, now)
        decisions.append(decision)
        if isinstance(decision, Restart):
            restarts.append(now)
    return decisions


def test_backoff_grows_exponentially_and_is_capped() -> None:
    decisions = replay([0.0, 10.0, 20.0])
    assert [d.delay for d in decisions if isinstance(d, Restart)] == [1.0, 2.0, 3.0]


def test_crash_loop_gives_up_with_reason() -> None:
    decisions = replay([0.0, 10.0, 20.0, 30.0])
    assert isinstance(decisions[-1], GiveUp)
    assert "3 restarts within 100 s" in decisions[-1].reason


def test_old_restarts_fall_out_of_the_window() -> None:
    decisions = replay([0.0, 10.0, 20.0, 150.0])
    last = decisions[-1]
    assert isinstance(last, Restart)
    assert last.delay == 1.0 and last.recent_restarts == 0


def test_zero_restarts_allowed_fails_at_once() -> None:
    policy = RestartPolicy(0, 10.0, 1.0, 2.0, 5.0)
    assert isinstance(decide_restart(policy, [], 0.0), GiveUp)


@pytest.mark.parametrize(("initial", "factor", "maximum", "earlier", "delay"), [
    (2.0, 2.0, 10.0, 0, 2.0),   # the first retry waits the initial delay
    (2.0, 2.0, 10.0, 1, 4.0),
    (2.0, 2.0, 10.0, 2, 8.0),
    (2.0, 2.0, 10.0, 3, 10.0),  # capped
    (5.0, 1.0, 300.0, 7, 5.0),  # factor 1: constant
    (0.0, 2.0, 300.0, 4, 0.0),  # no backoff at all
])
def test_the_one_backoff_formula(initial: float, factor: float, maximum: float, earlier: int,
                                 delay: float) -> None:
    """Restarts and webhook retries both wait `backoff_delay`."""
    assert backoff_delay(initial, factor, maximum, earlier) == delay


IMMEDIATE = RestartPolicy(max_restarts=3, window=100.0, backoff_initial=1.0, backoff_factor=2.0,
                          backoff_max=10.0, immediate_first=True)


@pytest.mark.parametrize(("earlier", "delay"), [
    ((), 0.0),  # the first restart within the window: at once
    ((950.0,), 1.0),  # the second: the backoff begins, backoff_initial
    ((950.0, 960.0), 2.0),  # then initial x factor
    ((800.0,), 0.0),  # a restart outside the window is forgotten: at once again
])
def test_the_first_restart_within_the_window_waits_no_backoff(
        earlier: tuple[float, ...], delay: float) -> None:
    decision = decide_restart(IMMEDIATE, list(earlier), now=1000.0)
    assert isinstance(decision, Restart)
    assert decision.delay == delay
    assert decision.recent_restarts == len([t for t in earlier if 1000.0 - t <= 100.0])


def test_immediate_first_still_gives_up_on_a_crash_loop() -> None:
    decision = decide_restart(IMMEDIATE, [950.0, 960.0, 970.0], now=1000.0)
    assert isinstance(decision, GiveUp) and decision.reason.startswith("crash loop: 3 restarts")
