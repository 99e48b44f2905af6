"""Webhook notifications when a run needs a person: failed / gave up, recovered, stalled,
waiting for GPU memory held by others, succeeded. Driven by the events table (`EventWatcher`),
delivered off the supervision thread (`Dispatcher`)."""

from airvisor.notify._config import (
    NOTIFY_FILE_ENV,
    NotifyConfigError,
    Target,
    default_file,
    load_default,
    run_targets,
)
from airvisor.notify._decide import Notification, decide, parse_holders
from airvisor.notify._deliver import DeliveryError, Dispatcher, http_post
from airvisor.notify._payload import json_payload, render, slack_payload
from airvisor.notify._redact import redact_url, scrub, target_id
from airvisor.notify._watch import EventWatcher

__all__ = [
    "NOTIFY_FILE_ENV",
    "DeliveryError",
    "Dispatcher",
    "EventWatcher",
    "Notification",
    "NotifyConfigError",
    "Target",
    "decide",
    "default_file",
    "http_post",
    "json_payload",
    "load_default",
    "parse_holders",
    "redact_url",
    "render",
    "run_targets",
    "scrub",
    "slack_payload",
    "target_id",
]
