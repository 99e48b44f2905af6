"""`airvisor start` to a daemon: one submission is at most one run, whatever times out.

Every submission carries a request id (a uuid, or `--request-id` / $AIRVISOR_REQUEST_ID from a
script). The daemon stores it with the run it creates (unique), and answers a repeat with that
run. When no answer comes (the daemon is slow to check the profile, or stopped), the submission
is not confirmed: the CLI says so and asks the daemon what became of that request id
(GET /submissions/{id}), waiting while the daemon is still checking it, and reports the run, the
refusal, or that no run was created, with the command that checks again.

Exit codes: 0 the run was created (or had been, by this request id); 2 refused, or certainly not
created; 4 not confirmed (still being checked, or the daemon did not answer the lookup either).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import click
import httpx

from airvisor.cli._common import EXIT_BAD_INPUT, EXIT_OK

EXIT_NOT_CONFIRMED = 4
# How long a submission may take to be answered (the daemon runs the profile's checks first),
# and how long after that the CLI keeps asking what became of it while the daemon checks it.
SUBMIT_TIMEOUT_ENV = "AIRVISOR_SUBMIT_TIMEOUT"
CONFIRM_WAIT_ENV = "AIRVISOR_CONFIRM_WAIT"
SUBMIT_TIMEOUT = 30.0
CONFIRM_WAIT = 60.0
LOOKUP_TIMEOUT = 5.0  # one lookup: a small read
LOOKUP_INTERVAL = 0.5

LookupState = Literal["created", "in_progress", "refused", "not_created", "unanswered"]


@dataclass(frozen=True)
class Lookup:
    """What the daemon said of a request id after its submission went unanswered."""

    state: LookupState
    run_id: str | None = None
    detail: str = ""


def seconds_from_env(name: str, default: float) -> float:
    """A duration in seconds from the environment; a clear error for a bad value."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise click.UsageError(f"${name}={text!r} is not a number of seconds (e.g. 30)")
    return value


def check_command(request_id: str) -> str:
    return f"airvisor status --request-id {request_id}"


def unconfirmed_outcome(lookup: Lookup, request_id: str) -> tuple[str, int]:
    """The last word on a submission whose answer did not come, and the exit code (pure)."""
    check = check_command(request_id)
    repeat = (f"the same `airvisor start` with `--request-id {request_id}` is safe to repeat: "
              "it never makes a second run")
    if lookup.state == "created":
        return f"the daemon created run {lookup.run_id} for this submission", EXIT_OK
    if lookup.state == "refused":
        return (f"the daemon refused the run (request id {request_id}): {lookup.detail}",
                EXIT_BAD_INPUT)
    if lookup.state == "not_created":
        return (f"the daemon did not create a run for this submission (request id "
                f"{request_id}): nothing was started. `{check}` checks again; {repeat}",
                EXIT_BAD_INPUT)
    if lookup.state == "in_progress":
        why = "the daemon is still checking it"
    else:
        why = f"the daemon did not answer the lookup either ({lookup.detail})"
    return (f"the submission is not confirmed: {why} (request id {request_id}). `{check}` shows "
            f"its run once it exists; {repeat}", EXIT_NOT_CONFIRMED)


def lookup_once(client: Any, request_id: str) -> Lookup:
    # lazy: the daemon client only for the commands that talk to it
    from airvisor.daemon import DaemonError

    try:
        answer = client.submission(request_id, timeout=LOOKUP_TIMEOUT)
    except DaemonError as err:
        if err.status == 404:
            return Lookup("not_created", detail=str(err))
        return Lookup("unanswered", detail=f"HTTP {err.status}: {err}")
    except httpx.HTTPError as err:
        return Lookup("unanswered", detail=str(err) or type(err).__name__)
    state = answer.get("state")
    if state == "created":
        return Lookup("created", run_id=str(answer.get("run_id")))
    if state == "refused":
        return Lookup("refused", detail=str(answer.get("detail", "")))
    return Lookup("in_progress", detail=str(answer.get("detail", "")))


def look_up(client: Any, request_id: str, wait: float) -> Lookup:
    """Ask until the daemon knows the outcome, or `wait` seconds have passed."""
    deadline = time.monotonic() + wait
    while True:
        found = lookup_once(client, request_id)
        if found.state not in ("in_progress", "unanswered") or time.monotonic() >= deadline:
            return found
        time.sleep(LOOKUP_INTERVAL)


def submit_to_daemon(client: Any, profile_ref: str, overrides: dict[str, Any], mode: str,
                     request_id: str) -> tuple[str | None, int]:
    """Submit once; (the run's id or None, the exit code when there is no run to follow).
    Prints what happened."""
    # lazy: the daemon client only for the commands that talk to it
    from airvisor.daemon import DaemonError

    timeout = seconds_from_env(SUBMIT_TIMEOUT_ENV, SUBMIT_TIMEOUT)
    try:
        answer = client.submit_once(profile_ref, overrides, mode, request_id=request_id,
                                    timeout=timeout)
    except DaemonError as err:
        if err.status == 422 and "request_id: Extra inputs are not permitted" in str(err):
            # An airvisor from before request ids (a daemon not restarted after an upgrade):
            # refused, rather than sent without one, which could make two runs again.
            version = client.health_info.get("version", "unknown")
            click.echo(f"airvisor: the daemon at {client.url} runs an older airvisor "
                       f"({version}) that does not take request ids: restart it after the "
                       "upgrade (systemctl restart airvisor), or start with --foreground",
                       err=True)
            return None, EXIT_BAD_INPUT
        if err.status < 500:
            click.echo(f"airvisor: the daemon refused the run: {err}", err=True)
            return None, EXIT_BAD_INPUT
        why = f"the daemon answered HTTP {err.status}: {err}"  # it may have created it first
    except (httpx.ConnectError, httpx.ConnectTimeout) as err:  # nothing was sent
        click.echo(f"airvisor: could not reach the daemon at {client.url}: {err}; nothing was "
                   "submitted", err=True)
        return None, EXIT_BAD_INPUT
    except httpx.HTTPError as err:
        why = (f"no answer within {timeout:g} s" if isinstance(err, httpx.TimeoutException)
               else f"the connection failed ({err or type(err).__name__})")
    else:
        run_id = str(answer.run["id"])
        if answer.created:
            click.echo(f"submitted run {run_id} to the daemon at {client.url} "
                       f"(request id {request_id})")
        else:
            click.echo(f"the daemon at {client.url} already had this submission (request id "
                       f"{request_id}): run {run_id} ({answer.run.get('state')}); no second "
                       "run was started")
        return run_id, EXIT_OK
    click.echo(f"airvisor: {why}: the submission is not confirmed (request id {request_id}); "
               "asking the daemon what became of it", err=True)
    found = look_up(client, request_id, seconds_from_env(CONFIRM_WAIT_ENV, CONFIRM_WAIT))
    message, code = unconfirmed_outcome(found, request_id)
    if found.state == "created":
        click.echo(f"{message} (request id {request_id}), at {client.url}")
        return found.run_id, EXIT_OK
    click.echo(f"airvisor: {message}", err=True)
    sys.stderr.flush()
    return None, code
