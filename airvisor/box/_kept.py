"""The inference server kept across a recovery (issue 22): whether there is one to keep, its
health probed after a failure, the attempt record of the scope, and the server a new daemon
finds recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail
from airvisor.box._base import BoxSupervisorBase
from airvisor.box._hooks import INFERENCE, ComponentHandle
from airvisor.box._probe import inference_base_url, probe_kept_server
from airvisor.core import Task, TaskDone
from airvisor.policy._scope import InferenceHealth, ScopeDecision
from airvisor.policy._transition import Failure
from airvisor.proc import ProcessIdentity


class KeptServer(BoxSupervisorBase):
    """The inference server that runs as its own process and may outlive the rest."""

    @property
    def split(self) -> bool:
        """The attempt runs its inference server apart from prime-rl's `rl` (issue 22)."""
        return self.mode == "launcher" and INFERENCE in self.components

    def _kept_server(self) -> ComponentHandle | None:
        """The inference server, running as its own process (the split, or component mode),
        and alive: what a recovery may keep."""
        handle = self.components.get(INFERENCE)
        # Its exit event may still be on its way (the wait of its worker thread): a server
        # killed after its probe passed is not kept on `exited` alone (the simulation's seed
        # 2411), its pid and start time are looked at.
        if handle is None or handle.exited or not handle.identity.alive():
            return None
        return handle

    def _inference_left(self) -> bool:
        return self._kept_server() is not None

    def _scope_refusals(self) -> tuple[str, ...]:
        if self.split:
            return ()
        return self._split_refusals

    def _can_probe_kept_server(self) -> bool:
        return self._kept_server() is not None and self.profile.inference.port is not None

    def _probe_kept_server(self, failure: Failure) -> None:
        """The kept server's health now (`probe_kept_server`, on a worker): its process alive,
        /health and /v1/models, its engine answering in time, its log since the failure."""
        server = self._kept_server()
        port = self.profile.inference.port
        if server is None or port is None:
            return
        try:
            offset = server.log.path.stat().st_size
        except OSError:
            offset = 0
        members = [(server.identity.pid, server.identity.create_time)]
        base_url = inference_base_url(self.profile.inference.host, port)
        log_path, version = server.log.path, self.profile.prime_rl.version
        self._run_task(Task.SCOPE, lambda: probe_kept_server(
            members=members, base_url=base_url, version=version, log_path=log_path,
            log_offset=offset))

    def _record_scope(self, scope: ScopeDecision | None, cause: str,
                      kept: ComponentHandle | None) -> None:
        """The attempt record says how this attempt came to be launched: the recovery's scope
        and why (`airvisor status`, the API, the page), and whether its server runs apart."""
        details: dict[str, Any] = {"split": self._split is not None,
                                   "prl_run_id": self._prl_run_id,
                                   # why its server cannot be kept (a new daemon reads them)
                                   "keep_refusals": list(self._split_refusals),
                                   # its start on this supervisor's wall clock (the store's
                                   # started_at is the store's own time.time()): a new daemon
                                   # runs the adopted attempt's grace and clocks from it
                                   "began_at": self._wall()}
        if self.attempt > 1 or scope is not None:
            if kept is not None:
                reason, detail = "kept", scope.detail if scope is not None else ""
            elif scope is not None and scope.keep_inference:
                reason, detail = "inference_dead", "the kept server was gone at the relaunch"
            elif scope is not None:
                reason, detail = scope.reason, scope.detail
            else:  # (an operator's restart, a daemon's resume: no scope was decided)
                reason, detail = cause, f"a {cause} restart relaunches everything"
            details |= {"scope": "keep_inference" if kept is not None else "full",
                        "scope_reason": reason, "scope_detail": detail,
                        "scope_at": self._wall()}
            if kept is not None:
                details["inference_kept_from"] = kept.since
        self.store.merge_attempt_details(self.run_id, self.attempt, **details)

    def _carry_kept_server(self, kept: ComponentHandle) -> None:
        """The kept server is a member of this attempt too: status, stop (without a
        supervisor), and a later daemon's adoption find it with the attempt's components."""
        self.store.upsert_component(
            self.run_id, self.attempt, INFERENCE, kind="process", state="running",
            pid=kept.identity.pid, pgid=kept.pgid, create_time=kept.identity.create_time,
            argv=list(kept.argv), gpus=list(kept.gpus), log_path=str(kept.log.path),
            exit_code=None)
        self._event("inference_kept", f"inference server kept (pid {kept.identity.pid}, "
                    f"started in attempt {kept.since}): only {self._rest_name()} "
                    "relaunched", component=INFERENCE, pid=kept.identity.pid,
                    since=kept.since)

    def _rest_name(self) -> str:
        return ("prime-rl's rl without [inference] is" if self.mode == "launcher"
                else "the trainer and orchestrator are")

    def _recorded_server(self, attempt: int) -> ComponentHandle | None:
        """The inference server the store records running for `attempt`, if it still is."""
        for comp in self.store.components(self.run_id, attempt):
            if comp.name != INFERENCE or comp.kind != "process" or comp.state != "running" \
                    or comp.pid is None or comp.create_time is None:
                continue
            identity = ProcessIdentity(comp.pid, comp.create_time)
            if identity.alive():
                return ComponentHandle(
                    name=INFERENCE, identity=identity, pgid=comp.pgid or comp.pid,
                    log=LogTail(Path(comp.log_path) if comp.log_path else self.attempt_dir_of(
                        attempt) / "inference.log", from_end=True),
                    argv=comp.argv, gpus=comp.gpus, launched=None, since=attempt)
        return None

    def _restore_split(self, attempt: int) -> int | None:
        """What an adopted attempt whose server runs apart needs again: main's shared
        PRL_RUN_ID, why its server cannot be kept (if so); returns the attempt that started
        its kept server (None: this one)."""
        for row in self.store.attempts(self.run_id):
            if row.get("number") == attempt:
                details = row.get("details") or {}
                self._prl_run_id = details.get("prl_run_id")
                refusals = details.get("keep_refusals")
                if isinstance(refusals, list):
                    self._split_refusals = tuple(str(r) for r in refusals)
                kept_from = details.get("inference_kept_from")
                return kept_from if isinstance(kept_from, int) else None
        return None

    def _after_scope_probe(self, event: TaskDone) -> None:
        self._scope_probed(event.result if isinstance(event.result, InferenceHealth) else None)
