"""The next attempt's resolution computed ahead (primerl/_planahead.py, issue 30 item 4).

The store's rules as tables over a counting `compute` (kept only when prime-rl resolved; never
two computations of one key at once; a failure is not kept; callers get copies); the key over
what the resolution reads; and prime-rl's real resolver of both versions: a resolution asked
ahead is the one the preflight of the same attempt uses, resolved once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from airvisor.primerl import _attempt, _prepare, plan_ahead, prepare_attempt, run_layout
from airvisor.primerl._planahead import PLANS, PlanAhead, resolution_key
from airvisor.primerl._resolve import Resolution
from airvisor.profile import Profile, load_profile

from ..box.conftest import demo_profile_dict, write_profile
from .test_layout import v04_full_step

pytestmark = pytest.mark.timeout(600)


def resolution(source: Literal["prime-rl", "airvisor"] = "prime-rl") -> Resolution:
    return Resolution(source=source, facts=None, rl={"max_steps": 3})  # type: ignore[arg-type]


class Counting:
    def __init__(self, result: Resolution | Exception) -> None:
        self.result = result
        self.calls = 0

    def __call__(self) -> Resolution:
        self.calls += 1
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def test_prime_rls_resolution_is_kept_and_served_as_a_copy() -> None:
    plans = PlanAhead()
    compute = Counting(resolution())
    first = plans.resolve("k", compute)
    assert first.rl is not None
    first.rl["max_steps"] = 99  # a caller's change never reaches the next caller
    second = plans.resolve("k", compute)
    assert compute.calls == 1 and plans.served_ahead == 1
    assert second.rl == {"max_steps": 3}


@pytest.mark.parametrize("result", [resolution("airvisor"), RuntimeError("refused")])
def test_airvisors_reading_and_failures_are_not_kept(result: Resolution | Exception) -> None:
    plans = PlanAhead()
    compute = Counting(result)
    for _ in range(2):
        if isinstance(result, Exception):
            with pytest.raises(RuntimeError):
                plans.resolve("k", compute)
        else:
            plans.resolve("k", compute)
    assert compute.calls == 2 and len(plans) == 0 and plans.served_ahead == 0


def test_no_key_is_never_kept() -> None:
    plans = PlanAhead()
    compute = Counting(resolution())
    plans.resolve(None, compute)
    plans.resolve(None, compute)
    assert compute.calls == 2 and len(plans) == 0


def test_a_caller_waits_for_the_computation_under_way_instead_of_starting_another() -> None:
    plans = PlanAhead()
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow() -> Resolution:
        calls.append("ahead")
        entered.set()
        release.wait(30)
        return resolution()

    def again() -> Resolution:
        calls.append("preflight")
        return resolution()

    def ahead() -> None:
        plans.resolve("k", slow)

    assert plans.warm(ahead)
    assert entered.wait(30)
    got: list[Resolution] = []
    waiter = threading.Thread(target=lambda: got.append(plans.resolve("k", again)))
    waiter.start()
    release.set()
    waiter.join(30)
    assert calls == ["ahead"] and got and plans.served_ahead == 1


def test_warm_ups_are_coalesced_while_one_waits_for_the_worker() -> None:
    plans = PlanAhead()
    started, gate = threading.Event(), threading.Event()
    ran: list[int] = []

    def occupy() -> None:
        started.set()
        gate.wait(30)

    assert plans.warm(occupy)
    assert started.wait(30)  # the worker is busy with it; nothing waits
    queued = [plans.warm(lambda n=n: ran.append(n)) for n in range(3)]  # type: ignore[misc]
    gate.set()
    plans.wait_idle(30)
    # The first one queued runs; those asked while it waited were dropped (it scans afresh).
    assert queued == [True, False, False] and ran == [0]


def test_the_oldest_resolution_makes_room() -> None:
    plans = PlanAhead(capacity=2)
    for key in ("a", "b", "c"):
        plans.resolve(key, Counting(resolution()))
    assert "a" not in plans and "b" in plans and "c" in plans


def profile_at(tmp_path: Path, version: str = "0.4", launcher: str = "demo") -> Profile:
    data = demo_profile_dict(tmp_path / "run", version=version, launcher=launcher)
    return load_profile(write_profile(tmp_path / "profile.toml", data))


def test_the_key_covers_what_the_resolution_reads(tmp_path: Path) -> None:
    profile = profile_at(tmp_path)
    key = resolution_key(profile, resume_step=4, split=True, environ={"A": "1"})
    assert key == resolution_key(profile, resume_step=4, split=True, environ={"A": "1"})
    others = {
        resolution_key(profile, resume_step=6, split=True, environ={"A": "1"}),
        resolution_key(profile, resume_step=4, split=False, environ={"A": "1"}),
        resolution_key(profile, resume_step=4, split=True, environ={"A": "2"}),
    }
    assert key not in others and len(others) == 3
    config = Path(profile.prime_rl.args[-1])
    if not config.is_absolute():
        assert profile.source is not None
        config = profile.source.parent / config
    config.write_text(config.read_text() + "\n# edited mid-run\n")
    assert resolution_key(profile, resume_step=4, split=True, environ={"A": "1"}) != key
    config.unlink()
    assert resolution_key(profile, resume_step=4, split=True, environ={"A": "1"}) is None


@pytest.fixture
def counted_resolver(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """Every run of prime-rl's resolver, by resume step (the real one, counted)."""
    calls: list[int | None] = []
    real = _prepare.resolve_in_scratch

    def counting(profile: Profile, **kw: Any) -> Resolution:
        calls.append(kw["resume_step"])
        return real(profile, **kw)

    monkeypatch.setattr(_prepare, "resolve_in_scratch", counting)
    monkeypatch.setattr(_attempt, "resolve_in_scratch", counting)
    return calls


@pytest.mark.parametrize("version", ["0.4", "main"])
def test_the_preflight_uses_the_resolution_computed_ahead(
        tmp_path: Path, version: str, counted_resolver: list[int | None]) -> None:
    profile = profile_at(tmp_path, version=version, launcher="prime-rl")
    layout = run_layout(prepare_attempt(profile, None, number=1, attempt_dir=tmp_path / "a1",
                                        container_names=[], summary="").profile)
    if version == "0.4":
        v04_full_step(layout.run_dir, 4)
        expected_step: int | None = 4
    else:
        expected_step = None  # (main's checkpoint layout has its own tests: a fresh start)
    counted_resolver.clear()
    served = PLANS.served_ahead
    assert plan_ahead(profile, layout, split=True)
    PLANS.wait_idle(300)
    assert counted_resolver == [expected_step]  # prime-rl resolved it, ahead
    prepared = prepare_attempt(profile, layout, number=2, attempt_dir=tmp_path / "a2",
                               container_names=[], summary="", split=True)
    assert counted_resolver == [expected_step]  # ... and only then
    assert PLANS.served_ahead == served + 1
    assert prepared.choice.step == expected_step and prepared.plan is not None
    assert prepared.plan.resolution.checked_by_prime_rl
