"""The CLI's side of the API: find a daemon, submit/stop runs, read status, events and logs."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from airvisor._paths import SYSTEM_STATE_DIR, state_dir
from airvisor.daemon._discovery import DaemonAddress, find_addresses

TOKEN_ENV = "AIRVISOR_TOKEN"
TOKEN_FILE_ENV = "AIRVISOR_TOKEN_FILE"
SYSTEM_TOKEN_FILE = SYSTEM_STATE_DIR / "token"  # the system unit's state dir
# Requests other than the /health probe and streams: submit may run profile checks.
REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class Submitted:
    """POST /runs's answer: the run, and whether this request created it (False: its request
    id had already created it)."""

    run: dict[str, Any]
    created: bool


class DaemonError(Exception):
    """The daemon refused or failed a request; str() is its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _transport_for(url: str) -> tuple[str, httpx.HTTPTransport | None]:
    """`unix:/path/to/sock` (or unix:///path) talks HTTP over a unix socket."""
    if url.startswith("unix:"):
        path = url.removeprefix("unix:")
        path = "/" + path.lstrip("/")
        return "http://airvisor", httpx.HTTPTransport(uds=path)
    return url.rstrip("/"), None


def token_files(env: dict[str, str], announced: Path | None = None) -> list[Path]:
    """Where the daemon's token may be: $AIRVISOR_TOKEN_FILE, else the file the daemon
    announced (its discovery file), then this user's state dir, then the system service's
    (/var/lib/airvisor, readable by root only)."""
    if env.get(TOKEN_FILE_ENV):
        return [Path(env[TOKEN_FILE_ENV]).expanduser()]
    files = [announced] if announced is not None else []
    return [*files, state_dir() / "token", SYSTEM_TOKEN_FILE]


def read_token(env: dict[str, str] | None = None, announced: Path | None = None) -> str | None:
    """$AIRVISOR_TOKEN, else the first readable token file (see token_files)."""
    env = dict(os.environ) if env is None else env
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV].strip()
    for path in token_files(env, announced):
        try:
            token = path.read_text().strip()
        except OSError:
            continue
        if token:
            return token
    return None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # FastAPI's validation errors
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []))}: {item.get('msg')}"
            for item in detail if isinstance(item, dict))
    return str(detail) if detail is not None else response.text


class DaemonClient:
    def __init__(self, url: str, *, token: str | None = None, timeout: float = REQUEST_TIMEOUT
                 ) -> None:
        base, transport = _transport_for(url)
        self.url = url
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base, transport=transport, timeout=timeout,
                                  headers=headers)
        self.health_info: dict[str, Any] = {}  # the /health answer that found it

    @classmethod
    def connect(cls, url: str | None = None, timeout: float = 0.5) -> DaemonClient | None:
        """A client for the box's daemon, or None when none answers /health within `timeout`
        seconds. Tried in order: `url`; else $AIRVISOR_URL alone when set; else the
        addresses running daemons announce (see airvisor.daemon._discovery), then
        http://127.0.0.1:8765."""
        addresses = [DaemonAddress(url=url, source="argument")] if url else find_addresses()
        for address in addresses:
            client = cls._probe(address, timeout)
            if client is not None:
                return client
        return None

    @classmethod
    def _probe(cls, address: DaemonAddress, timeout: float) -> DaemonClient | None:
        client = cls(address.url, token=read_token(announced=address.token_file))
        try:
            response = client._http.get("/health", timeout=timeout)
            body = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            body = None
        if not isinstance(body, dict) or body.get("service") != "airvisor":
            client.close()
            return None
        client.health_info = body
        return client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise DaemonError(response.status_code, _message(response))
        return response.json()

    # -- the API ------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/health")
        return result

    def submit(self, profile_ref: str, overrides: dict[str, Any] | None = None,
               start_mode: str = "auto") -> dict[str, Any]:
        """Start a run; `profile_ref` is a name known to the daemon or an absolute path."""
        return self.submit_once(profile_ref, overrides, start_mode).run

    def submit_once(self, profile_ref: str, overrides: dict[str, Any] | None = None,
                    start_mode: str = "auto", *, request_id: str | None = None,
                    timeout: float | None = None) -> Submitted:
        """Start a run, at most once per `request_id` (a repeat answers the run it created).
        Raises DaemonError for a refusal, httpx's errors when no answer came (then the daemon
        may still create it: `submission(request_id)` tells)."""
        body: dict[str, Any] = {"profile": profile_ref, "overrides": overrides or {},
                                "start_mode": start_mode}
        if request_id is not None:
            body["request_id"] = request_id
        kwargs: dict[str, Any] = {"json": body}
        if timeout is not None:
            kwargs["timeout"] = timeout
        response = self._http.request("POST", "/runs", **kwargs)
        if response.status_code >= 400:
            raise DaemonError(response.status_code, _message(response))
        return Submitted(run=response.json(), created=response.status_code == 201)

    def submission(self, request_id: str, timeout: float | None = None) -> dict[str, Any]:
        """What became of a submission (GET /submissions/{id}); DaemonError 404: no run was
        created for it and the daemon is not checking it."""
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        result: dict[str, Any] = self._json("GET", f"/submissions/{request_id}", **kwargs)
        return result

    def get_run(self, run_id: str = "current") -> dict[str, Any]:
        """One run's details; "current" is the newest live run (DaemonError 404 when none)."""
        result: dict[str, Any] = self._json("GET", f"/runs/{run_id}")
        return result

    def list_runs(self, limit: int = 50, *, states: Sequence[str] = (),
                  profile: str | None = None) -> list[dict[str, Any]]:
        """The newest runs, newest first; of one of `states` / of `profile` when given."""
        params: dict[str, Any] = {"limit": limit}
        if states:
            params["state"] = list(states)
        if profile is not None:
            params["profile"] = profile
        result: list[dict[str, Any]] = self._json("GET", "/runs", params=params)
        return result

    def state(self) -> dict[str, Any]:
        """The state directory's retention settings and the newest pruning passes."""
        result: dict[str, Any] = self._json("GET", "/state")
        return result

    def _resolve(self, run_id: str) -> str:
        """"current" -> the current run's id (the other endpoints take real ids only)."""
        if run_id != "current":
            return run_id
        return str(self.get_run("current")["id"])

    def live_run_ids(self) -> set[str]:
        """The runs this daemon supervises now (their processes are not stale)."""
        return {str(run["id"]) for run in self.list_runs() if run.get("live")}

    def stop(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("POST", f"/runs/{self._resolve(run_id)}/stop")
        return result

    def restart(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("POST", f"/runs/{self._resolve(run_id)}/restart")
        return result

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json(
            "GET", f"/runs/{self._resolve(run_id)}/events", params={"after": after})
        return result

    def logs(self, run_id: str, component: str, tail: int = 200, follow: bool = False
             ) -> Iterator[str]:
        """Lines of a component's log (without their newlines); with follow, until the run
        ends. `run_id` may be "current"."""
        run_id = self._resolve(run_id)
        params = {"tail": tail, "follow": "true" if follow else "false"}
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=None) if follow else None
        kwargs: dict[str, Any] = {"params": params}
        if timeout is not None:
            kwargs["timeout"] = timeout
        with self._http.stream("GET", f"/runs/{run_id}/logs/{component}", **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise DaemonError(response.status_code, _message(response))
            yield from response.iter_lines()


def daemon_live_run_ids() -> tuple[set[str], str | None]:
    """The runs the box's daemon supervises, and its URL; (set(), None) when no daemon
    answers. A daemon that answers but cannot list its runs raises DaemonError: callers
    about to kill processes must not guess."""
    client = DaemonClient.connect()
    if client is None:
        return set(), None
    with client:
        try:
            return client.live_run_ids(), client.url
        except httpx.HTTPError as err:
            raise DaemonError(0, f"the daemon at {client.url} did not list its runs: {err}"
                              ) from err
