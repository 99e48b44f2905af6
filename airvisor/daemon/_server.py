"""`airvisor daemon`: the API on uvicorn in a helper thread, the supervision loop on the main one.

The shape follows uvicorn's own supervisors: signal handlers only record what was asked; the
main loop acts on its next tick. The loop is also the only place that pings systemd's watchdog,
so a stuck loop stops the pings and systemd restarts the daemon (training keeps running and the
next daemon adopts it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import uvicorn
from fastapi import FastAPI

from airvisor._logging import get_logger
from airvisor._paths import database_path, state_dir
from airvisor.daemon._app import create_app
from airvisor.daemon._auth import (
    AuthConfigError,
    decide_auth,
    is_loopback_host,
    load_or_create_token,
)
from airvisor.daemon._context import ApiContext
from airvisor.daemon._discovery import announce, announce_paths, withdraw
from airvisor.daemon._housekeeping import Housekeeping, limit_allocator_arenas
from airvisor.daemon._notify import Notifier, watchdog_interval
from airvisor.daemon._profiles import ProfileCatalog
from airvisor.daemon._service import RunService
from airvisor.runs import RunManager
from airvisor.store import Store
from airvisor.store._retention import SettingsError, load_state_settings, settings_file

log = get_logger("airvisor.daemon")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_FILE_NAME = "token"
# Tests only: after this many seconds the main loop stops ticking (and so stops pinging the
# watchdog) while the API keeps answering, as a hung engine would.
DEBUG_STALL_ENV = "AIRVISOR_DEBUG_STALL_LOOP_AFTER"
# A loop whose every tick fails for this long exits non-zero so systemd restarts it.
FAILING_TICKS_LIMIT_SECONDS = 60.0


class DaemonStartError(Exception):
    """The daemon cannot start; str() says why and what to do."""


@dataclass(frozen=True)
class DaemonSettings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    uds: Path | None = None
    stop_runs: bool = False
    no_auth: bool = False
    token_file: Path | None = None  # default: <state dir>/token
    tick_seconds: float = 0.2

    @property
    def where(self) -> str:
        return f"unix:{self.uds}" if self.uds else f"http://{_url_host(self.host)}:{self.port}"

    def resolved_token_file(self, state: Path) -> Path:
        return self.token_file if self.token_file is not None else state / TOKEN_FILE_NAME


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def bind_socket(settings: DaemonSettings) -> socket.socket:
    """Listen before anything else happens, so a taken port is a clear error at once."""
    if settings.uds is not None:
        return _bind_unix(settings.uds)
    try:
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise DaemonStartError(f"cannot resolve --host {settings.host!r}: {err.strerror}") from err
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        hint = (" Another airvisor daemon may be running: `curl "
                f"{settings.where}/health`; or pick another --port.") \
            if err.errno == errno.EADDRINUSE else ""
        raise DaemonStartError(f"cannot listen on {settings.where}: {err.strerror}.{hint}"
                               ) from err
    sock.set_inheritable(False)
    return sock


def _bind_unix(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise DaemonStartError(f"--uds {path} exists and is not a socket; remove it or "
                                   "choose another path")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # left over from a daemon that died: nobody listens on it
        else:
            raise DaemonStartError(f"another process already listens on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as err:
        sock.close()
        raise DaemonStartError(f"cannot listen on unix socket {path}: {err.strerror}") from err
    # Owner and group only: the socket's permissions are the access control with --no-auth.
    os.chmod(path, 0o660)
    return sock


LOCK_FILE_NAME = "daemon.lock"


def lock_state_dir(state: Path) -> IO[str]:
    """One daemon per state directory: two would both adopt the same runs. The lock is held
    (and released by the kernel) for the life of the process, so a SIGKILLed daemon leaves no
    stale lock behind."""
    state.mkdir(parents=True, exist_ok=True)
    handle = (state / LOCK_FILE_NAME).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise DaemonStartError(
            f"another airvisor daemon (pid {holder}) already uses the state directory {state}; "
            "stop it first, or give this one its own AIRVISOR_STATE_DIR") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


class ApiServer:
    """uvicorn's Server in a helper thread (uvicorn installs no signal handlers off the main
    thread, which is what we want: signals belong to the daemon's main loop)."""

    def __init__(self, app: FastAPI, sock: socket.socket) -> None:
        config = uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False, server_header=False,
            timeout_graceful_shutdown=3, timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="airvisor-api", daemon=True)
        self._crashed: BaseException | None = None

    def _serve(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as err:  # SystemExit from a failed startup included
            self._crashed = err

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise DaemonStartError(f"the HTTP server did not start: {self._crashed!r}")
            if time.monotonic() > deadline:
                raise DaemonStartError(f"the HTTP server did not start within {timeout:.0f} s")
            time.sleep(0.01)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(timeout)
        self._sock.close()


ServiceFactory = Callable[[Store], RunService]


def default_service_factory(store: Store) -> RunService:
    return RunManager(store)


class Daemon:
    def __init__(
        self,
        settings: DaemonSettings,
        *,
        service_factory: ServiceFactory = default_service_factory,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self._service_factory = service_factory
        self._env = dict(os.environ if env is None else env)
        self.notifier = Notifier.from_env(self._env)
        # Written by signal handlers, read by the main loop.
        self._stop_signal: int | None = None
        self._reload_requested = False
        self._server: ApiServer | None = None
        self._lock_file: IO[str] | None = None
        self.housekeeping: Housekeeping | None = None

    # -- signals: record only ---------------------------------------------------------------
    def _on_stop_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stop_signal is not None and self._server is not None:
            self._server.server.force_exit = True  # a second signal: stop waiting for clients
        self._stop_signal = signum

    def _on_reload_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self._reload_requested = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_reload_signal)

    def request_stop(self) -> None:
        """For embedding (tests): the same as SIGTERM."""
        self._stop_signal = signal.SIGTERM

    # -- the daemon ---------------------------------------------------------------------------
    def prepare_auth(self, state: Path) -> str | None:
        settings = self.settings
        try:
            decision = decide_auth(host=None if settings.uds else settings.host,
                                   uds=str(settings.uds) if settings.uds else None,
                                   no_auth=settings.no_auth)
            if not decision.require_token:
                log.warning(decision.reason)
                return None
            token_file = settings.resolved_token_file(state)
            token = load_or_create_token(token_file)
        except AuthConfigError as err:
            raise DaemonStartError(str(err)) from err
        log.info(decision.reason, token_file=str(token_file))
        if settings.uds is None and not is_loopback_host(settings.host):
            log.warning("listening beyond loopback: reads (status, events, logs, metrics) need "
                        "no token; put the API behind a firewall or a reverse proxy if that "
                        "matters", host=settings.host)
        return token

    def run(self) -> int:
        """Serve and supervise until a stop signal; returns the process exit code."""
        limit_allocator_arenas(self._env)  # before any thread of the daemon starts
        state = state_dir()
        self._lock_file = lock_state_dir(state)
        token = self.prepare_auth(state)
        try:  # retention and log caps: the [state] table of <state dir>/settings.toml
            state_settings = load_state_settings(settings_file(state, self._env))
        except SettingsError as err:
            raise DaemonStartError(str(err)) from err
        sock = bind_socket(self.settings)
        where = self.settings.where
        if self.settings.uds is None:  # the real port, also when --port 0 picked one
            where = f"http://{_url_host(self.settings.host)}:{sock.getsockname()[1]}"
        try:
            store = Store(database_path())
            service = self._service_factory(store)
            service.address = where
            catalog = ProfileCatalog()
            self._reload_profiles(catalog)
            adopted = service.adopt_on_boot()
            if adopted:
                log.info("runs taken over from the previous daemon", runs=adopted)
            housekeeping = self.housekeeping = Housekeeping(store, state_settings)
            ctx = ApiContext(store=store, service=service, catalog=catalog, token=token,
                             state_dir=state, state_settings=state_settings)
            ctx.snapshot.refresh()
            self._server = ApiServer(create_app(ctx), sock)
            self._server.start()
            housekeeping.start()
        except BaseException:
            sock.close()
            raise
        announced = announce(
            announce_paths(state, self._env), url=where, pid=os.getpid(), state=state,
            token_file=self.settings.resolved_token_file(state) if token else None)
        log.info("airvisor daemon serving", where=where, pid=os.getpid(), state_dir=str(state),
                 discovery=[str(p) for p in announced])
        status = service.status_line()
        self.notifier.ready(status)
        code = self._loop(service, ctx, catalog, status)
        reason = signal.Signals(self._stop_signal).name if self._stop_signal else "error"
        runs = ("stopping runs" if self.settings.stop_runs
                else "training left running (the next daemon adopts it)")
        log.info("airvisor daemon stopping", reason=reason, runs=runs)
        self.notifier.stopping(f"stopping ({reason}); {runs}")
        withdraw(announced, pid=os.getpid())
        self._server.stop()
        housekeeping.stop()
        service.shutdown(stop_runs=self.settings.stop_runs)
        if self.settings.uds is not None:
            with contextlib.suppress(FileNotFoundError):
                self.settings.uds.unlink()
        self.notifier.close()
        log.info("airvisor daemon stopped")
        return code

    def _reload_profiles(self, catalog: ProfileCatalog) -> None:
        try:
            names = catalog.reload()
        except Exception as err:  # a broken profile dir must not stop supervision
            log.error("cannot read the profile search path", error=str(err))
            return
        log.info("profiles", names=sorted(names))

    def _loop(self, service: RunService, ctx: ApiContext, catalog: ProfileCatalog,
              status: str) -> int:
        assert self._server is not None
        interval = watchdog_interval(self._env, os.getpid())
        next_ping = 0.0
        stall_after = _float_or_none(self._env.get(DEBUG_STALL_ENV))
        started = time.monotonic()
        failing_since: float | None = None
        while self._stop_signal is None:
            if stall_after is not None and time.monotonic() - started >= stall_after:
                self._stall()
                break
            if self._reload_requested:
                self._reload_requested = False
                log.info("SIGHUP: reloading profiles; running runs are not touched")
                self._reload_profiles(catalog)
            if not self._server.alive:
                log.error("the HTTP server thread ended; exiting so the service manager "
                          "restarts the daemon (training keeps running)")
                return 1
            try:
                service.tick(self.settings.tick_seconds)
                ctx.snapshot.refresh()
                if self.housekeeping is not None:  # a released run: memory back, pruning
                    self.housekeeping.notice(service.live_run_ids())
                failing_since = None
            except Exception as err:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                log.error("supervision tick failed", error=repr(err), exc_info=err)
                if now - failing_since > FAILING_TICKS_LIMIT_SECONDS:
                    log.error("ticks have failed for a minute; exiting")
                    return 1
                time.sleep(self.settings.tick_seconds)
            now = time.monotonic()
            if interval is not None and now >= next_ping:
                self.notifier.watchdog()
                next_ping = now + interval
            current = service.status_line()
            if current != status:
                status = current
                self.notifier.status(status)
        return 0

    def _stall(self) -> None:
        log.warning("debug: the main loop stalls now (no ticks, no watchdog pings)",
                    env=DEBUG_STALL_ENV)
        while self._stop_signal is None:
            time.sleep(0.05)


def _float_or_none(raw: str | None) -> float | None:
    try:
        return float(raw) if raw else None
    except ValueError:
        return None
