"""Putting a stored run into a phase for a test's set-up, through the store's one writer of
phase and state (`Store.set_phase`), along edges the state machine allows (as a supervisor
would have moved it)."""

from __future__ import annotations

from collections import deque
from typing import Any

from airvisor.policy import Phase, edges, phase_of_record
from airvisor.store import Store


def path_to(start: Phase, target: Phase) -> list[Phase]:
    """The shortest walk of allowed edges from `start` to `target` (`start` excluded)."""
    graph = edges()
    came_from: dict[Phase, Phase | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == target:
            break
        for there in sorted(graph[here]):
            if there not in came_from:
                came_from[there] = here
                queue.append(there)
    if target not in came_from:
        raise ValueError(f"no path of allowed edges from {start} to {target}")
    walk: list[Phase] = []
    at: Phase | None = target
    while at is not None and at != start:
        walk.append(at)
        at = came_from[at]
    return walk[::-1]


def move_run(store: Store, run_id: str, phase: Phase | str, **fields: Any) -> None:
    """Move the run from its recorded phase to `phase` (a Phase, or a public state such as
    "running" or "recovering"), then write `fields`."""
    target = Phase(phase) if str(phase) in set(Phase) else _phase_of_state(str(phase))
    run = store.get_run(run_id)
    assert run is not None, run_id
    here = phase_of_record(run.phase, run.state)
    for step in path_to(here, target):
        store.set_phase(run_id, step, previous=here)
        here = step
    if fields:
        store.update_run(run_id, **fields)


def _phase_of_state(state: str) -> Phase:
    return {"recovering": Phase.RECOVERY_STOPPING, "stopping": Phase.STOPPING_STOPPED}[state]
