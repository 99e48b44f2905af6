"""What a webhook receives. Documented in docs/notifications.md; keep the two in step."""

from __future__ import annotations

from typing import Any

from airvisor.notify._decide import Notification
from airvisor.store import RunRecord

SCHEMA_VERSION = 1


def json_payload(n: Notification, run: RunRecord | None, page_url: str | None = None
                 ) -> dict[str, Any]:
    return {
        "source": "airvisor",
        "schema": SCHEMA_VERSION,
        "event": n.kind,
        "title": n.title,
        "run_id": n.run_id,
        "run_name": run.name if run is not None else None,
        "state": run.state if run is not None else None,
        "step": run.step if run is not None else None,
        "attempt": n.attempt if n.attempt is not None else (run.attempt if run else None),
        "restarts": run.restarts if run is not None else None,
        "reason": n.reason,
        "resume_step": n.resume_step,
        "holders": n.holders,
        "stacks": n.stacks,
        "at": n.at,
        "event_id": n.event_id,
        "page": page_url,
    }


def slack_payload(body: dict[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook shape ({"text": ...}, mrkdwn), also taken by Mattermost and
    Discord's /slack endpoints."""
    lines = [f"*airvisor*: {body['title']}"]
    reason = body.get("reason")
    if reason and reason not in body["title"]:
        first = str(reason).splitlines()
        lines.append(f"> {first[0][:500]}" if first else "")
    if body.get("holders"):
        for h in body["holders"][:10]:
            lines.append(f"• GPU {h['gpu']}: pid {h['pid']} ({h['user']}) {h['memory']} "
                         f"`{str(h['command'])[:80]}`")
    for line in (body.get("stacks") or [])[:10]:
        lines.append(f"• {str(line)[:200]}")
    facts = [f"run `{body['run_id']}`"]
    if body.get("state"):
        facts.append(f"state {body['state']}")
    if body.get("step") is not None:
        facts.append(f"step {body['step']}")
    if body.get("resume_step") is not None:
        facts.append(f"resumed from step {body['resume_step']}")
    lines.append(", ".join(facts))
    if body.get("page"):
        lines.append(str(body["page"]))
    return {"text": "\n".join(lines)}


def render(fmt: str, body: dict[str, Any]) -> dict[str, Any]:
    return slack_payload(body) if fmt == "slack" else body
