"""Webhook URLs may carry secrets (Slack's path is one, tokens in query strings are common):
outside the HTTP request itself a URL is only ever shown redacted."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from urllib.parse import urlsplit


def redact_url(url: str) -> str:
    """scheme://host[:port] and a marker; user info, path and query are dropped."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid url, redacted>"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    tail = "/…" if (parts.path not in ("", "/") or parts.query or parts.username) else ""
    return f"{parts.scheme}://{host}{port}{tail}"


def target_id(url: str, fmt: str) -> str:
    """A stable id for a target that does not reveal its URL."""
    return hashlib.sha256(f"{fmt} {url}".encode()).hexdigest()[:16]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret URL in `text` by its redacted form (error
    messages of HTTP libraries like to quote the URL they failed on)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, redact_url(secret))
    return text
