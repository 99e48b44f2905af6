"""The next attempt's resolution, computed ahead (issue 30 item 4: airvisor off the path).

prime-rl's resolver runs in a fresh interpreter of prime-rl's own (~0.7 s: importing its config
classes), and every preflight runs it for the resume step it chose. On a failure that is most
of airvisor's share of the recovery. But the inputs are known before the failure: the profile,
the user's config files and the resume step, which is the newest complete checkpoint. So the
supervisor asks for it ahead (`PlanAhead.warm`, on a worker thread of its own) whenever a
checkpoint may have completed, and the preflight's `resolve_profile` takes it from here at
once. The key is everything the resolution reads: the profile (as bound), the resume step,
the split, the environment, and the bytes of every config file after an `@`; a change to any
of them misses, and prime-rl resolves again (a config edited mid-run is never served stale).
Only prime-rl's own resolutions are kept (airvisor's fallback reading costs nothing).
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from airvisor._logging import get_logger
from airvisor.primerl._resolve import Resolution
from airvisor.profile._rlargs import RlArgsError, toml_refs
from airvisor.profile._schema import Profile

log = get_logger("airvisor.primerl")

KEPT_RESOLUTIONS = 8  # a few runs' next attempts; each is a few KB of resolved config


def resolution_key(profile: Profile, *, resume_step: int | None, split: bool,
                   environ: Mapping[str, str] | None) -> str | None:
    """What a resolution depends on, hashed; None when a config file cannot be read (then
    nothing is cached: prime-rl's own refusal is what the user must see)."""
    digest = hashlib.sha256()
    digest.update(profile.model_dump_json().encode())
    digest.update(f"\0{resume_step}\0{split}\0".encode())
    env = os.environ if environ is None else environ
    for name in sorted(env):
        digest.update(f"{name}={env[name]}\0".encode(errors="surrogateescape"))
    base = profile.source.parent if profile.source is not None else Path.cwd()
    try:
        refs = toml_refs(profile.prime_rl.args)
    except RlArgsError:
        return None
    for ref in refs:
        path = ref.path if ref.path.is_absolute() else base / ref.path
        try:
            digest.update(path.read_bytes())
        except OSError:
            return None
    return digest.hexdigest()


class PlanAhead:
    """Resolutions by key: computed ahead on one worker thread of its own, or awaited when the
    preflight asks for one still being computed (the same key is never resolved twice at
    once). Callers get a copy: a resolution's dicts are never shared between attempts."""

    def __init__(self, capacity: int = KEPT_RESOLUTIONS) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Future[Resolution]] = OrderedDict()
        self._worker: ThreadPoolExecutor | None = None
        self._queued = False  # a warm-up job waits for the worker (later ones are dropped)
        self.served_ahead = 0  # resolutions a caller found kept (or being computed)

    def resolve(self, key: str | None, compute: Callable[[], Resolution]) -> Resolution:
        """The resolution under `key`: the one kept (waited for while it is computed), else
        `compute()` now, kept when it is prime-rl's. A failed computation is not kept: its
        error goes to its caller; a caller that waited for it computes for itself."""
        if key is None:
            return compute()
        with self._lock:
            future = self._entries.get(key)
            mine = future is None
            if future is None:
                future = Future()
                self._keep_locked(key, future)
            else:
                self._entries.move_to_end(key)
        if not mine:
            try:
                resolution = future.result()
                with self._lock:
                    self.served_ahead += 1
                return copy.deepcopy(resolution)
            except Exception:
                return compute()
        try:
            resolution = compute()
        except BaseException as exc:
            self._forget(key, future)
            future.set_exception(exc)
            raise
        if not resolution.checked_by_prime_rl:
            self._forget(key, future)  # airvisor's own reading: cheap, never kept
        future.set_result(resolution)
        return copy.deepcopy(resolution)

    def warm(self, job: Callable[[], None]) -> bool:
        """Run `job` (which calls `resolve`) on the worker, unless one already waits for it;
        True when it was queued. Its errors are logged: the preflight resolves anyway."""
        with self._lock:
            if self._queued:
                return False
            self._queued = True
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="airvisor-plan-ahead")
            worker = self._worker

        def run() -> None:
            with self._lock:
                self._queued = False
            try:
                job()
            except Exception as exc:
                log.info("the next attempt's resolution was not computed ahead", error=str(exc))

        worker.submit(run)
        return True

    def wait_idle(self, timeout: float | None = None) -> None:
        """Until the warm-up jobs queued so far have run (tests, benches)."""
        with self._lock:
            worker = self._worker
        if worker is not None:
            worker.submit(lambda: None).result(timeout)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def _keep_locked(self, key: str, future: Future[Resolution]) -> None:
        self._entries[key] = future
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def _forget(self, key: str, future: Future[Resolution]) -> None:
        with self._lock:
            if self._entries.get(key) is future:
                del self._entries[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


# The process's one store: the daemon's supervisors warm it, their preflights read it.
PLANS = PlanAhead()
