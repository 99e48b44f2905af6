"""The run machine persisted with the run, and the one a new daemon starts from.

The core's executor writes the machine whole (`policy._machine_json`) whenever a decision
changes it, in the transaction that records the decision (`Store.transaction`). A daemon that
takes a run over starts from what was persisted (`policy._runmachine.taken_over`); a run an
older airvisor wrote has none, and a blob this airvisor cannot read is said (logged, and as a
run event) and treated the same: the machine is rebuilt as before, from the restart history
here and from the recovery and stop recorded with the run by the backend's takeover
(`RecoveryTakenOver`, `StopTakenOver`).
"""

from __future__ import annotations

from airvisor._logging import get_logger
from airvisor.policy import Phase, RunMachine
from airvisor.policy._machine_json import MachineBlobError, decode_machine
from airvisor.policy._runmachine import taken_over
from airvisor.store import Store

log = get_logger("airvisor.core")


def machine_taken_over(store: Store, run_id: str, *, now: float, wall: float) -> RunMachine:
    """The machine a new daemon starts `run_id` from (phase TAKEOVER). `now`: this process's
    monotonic clock, `wall`: the wall time, read at once (the backoff's deadline)."""
    run = store.get_run(run_id)
    blob = run.machine_json if run is not None else None
    if blob is not None:
        try:
            return taken_over(decode_machine(blob, now=now, wall=wall))
        except MachineBlobError as exc:
            message = f"{exc}: the run is taken over from its recorded history instead"
            log.error(message, run=run_id)
            store.add_event(run_id, "machine_unreadable", message)
    history = store.restart_history(run_id)
    return RunMachine(Phase.TAKEOVER, restarts=len(history),
                      counted_restarts=tuple(r.at for r in history if r.counted))
