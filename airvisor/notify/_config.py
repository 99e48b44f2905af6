"""Notification targets: a run's `[notify]` section plus the daemon-wide default file."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from airvisor.notify._redact import redact_url, target_id
from airvisor.profile._schema import NotifySection

NOTIFY_FILE_ENV = "AIRVISOR_NOTIFY_FILE"
NOTIFY_FILE_NAME = "notify.toml"


class NotifyConfigError(Exception):
    """The daemon-wide notify file cannot be used; str() names the file, the field and the fix."""


@dataclass(frozen=True)
class Target:
    url: str = field(repr=False)  # never in logs or reprs
    format: str
    events: frozenset[str]
    name: str | None
    timeout: float
    retries: int
    backoff_initial: float
    backoff_max: float

    @property
    def id(self) -> str:
        return target_id(self.url, self.format)

    @property
    def label(self) -> str:
        where = redact_url(self.url)
        return f"{self.name} ({where})" if self.name else where


def targets_of(section: NotifySection) -> list[Target]:
    return [Target(url=w.url, format=w.format, events=frozenset(w.events), name=w.name,
                   timeout=section.timeout, retries=section.retries,
                   backoff_initial=section.backoff_initial, backoff_max=section.backoff_max)
            for w in section.webhooks]


def run_targets(profile: dict[str, Any], default: NotifySection) -> list[Target]:
    """A run's targets from its stored profile (`RunRecord.profile`), plus the default ones
    unless it set `use_daemon_default = false`; one target per URL and format."""
    raw = profile.get("notify")
    section = NotifySection.model_validate(raw) if isinstance(raw, dict) else NotifySection()
    targets = targets_of(section)
    if section.use_daemon_default:
        targets += targets_of(default)
    unique: dict[str, Target] = {}
    for target in targets:
        unique.setdefault(target.id, target)
    return list(unique.values())


def default_file(state_dir: Path, env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    explicit = env.get(NOTIFY_FILE_ENV)
    return Path(explicit).expanduser() if explicit else state_dir / NOTIFY_FILE_NAME


def load_default(path: Path) -> NotifySection:
    """The `[notify]` table of the daemon-wide file; an empty section when the file is absent."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return NotifySection()
    except (OSError, UnicodeDecodeError) as err:
        raise NotifyConfigError(f"{path}: cannot read it ({err}); fix its permissions or "
                                f"remove it") from err
    except tomllib.TOMLDecodeError as err:
        raise NotifyConfigError(f"{path}: not valid TOML: {err}; fix the syntax there") from err
    unknown = sorted(set(data) - {"notify"})
    if unknown:
        raise NotifyConfigError(f"{path}: unknown table(s) {', '.join(unknown)}; the file holds "
                                "only a [notify] table (as in a profile)")
    raw = data.get("notify", {})
    try:
        return NotifySection.model_validate(raw)
    except ValidationError as err:
        problems = []
        for item in err.errors():
            where = ".".join(str(p) for p in ("notify", *item["loc"]))
            problems.append(f"{path}: {where}: {item['msg']}")  # never the input: it may be a URL
        raise NotifyConfigError("\n".join(problems) + "\n(fix: change these values in "
                                f"{path}; the keys are those of a profile's [notify])") from err
