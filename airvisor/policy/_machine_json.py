"""The run machine as it is persisted with the run: JSON with a format version.

`encode_machine` writes every field of `RunMachine` (pydantic's dump of the dataclass: the
phase by its value, a failure and a scope as objects); `decode_machine` reads it back, checked
field by field against the dataclass's types (pydantic, strict: a wrong type or an unknown
phase is an error, not a coercion). A field added later with a default reads from an older
blob as its default; a change that would misread an older blob bumps `MACHINE_FORMAT`.

The backoff deadline is on the writing daemon's monotonic clock, which means nothing to another
process (after a reboot it restarts from zero): it is stored as the wall time it stands for and
turned back into a deadline on the reading daemon's clock (`MONOTONIC_FIELDS`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from airvisor.policy._runmachine import RunMachine

# 2: `earlier` holds every earlier attempt waiting for its status (a list of [attempt,
# failure]; version 1 held one or null, read as a list of it); `unsaid` added.
MACHINE_FORMAT = 2
READABLE_FORMATS = (1, MACHINE_FORMAT)
# Fields on the monotonic clock, stored as the wall time they stand for.
MONOTONIC_FIELDS = ("backoff_until",)

_ADAPTER: TypeAdapter[RunMachine] = TypeAdapter(RunMachine)


class MachineBlobError(ValueError):
    """A persisted machine this airvisor cannot read (corrupt, or another format version)."""


def encode_machine(machine: RunMachine, *, now: float, wall: float) -> str:
    """`machine` as persisted. `now`: the monotonic clock, `wall`: the wall time, both read
    at once (a monotonic deadline is stored as `wall + (deadline - now)`)."""
    fields: dict[str, Any] = _ADAPTER.dump_python(machine, mode="json")
    for name in MONOTONIC_FIELDS:
        if fields[name] is not None:
            fields[name] = wall + (fields[name] - now)
    return json.dumps({"version": MACHINE_FORMAT, "machine": fields}, sort_keys=True)


def decode_machine(text: str, *, now: float, wall: float) -> RunMachine:
    """The machine `text` persisted, its monotonic deadlines on this process's clock (`now`,
    `wall` read at once). Raises MachineBlobError saying what is wrong with it."""
    try:
        blob = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise MachineBlobError(f"the persisted run machine is not JSON: {exc}") from None
    if not isinstance(blob, dict) or not isinstance(blob.get("machine"), dict):
        raise MachineBlobError("the persisted run machine is not an object with a 'machine'")
    version = blob.get("version")
    if version not in READABLE_FORMATS or isinstance(version, bool):
        raise MachineBlobError(f"the persisted run machine has format version {version!r}; "
                               f"this airvisor reads versions "
                               f"{', '.join(map(str, READABLE_FORMATS))}")
    fields = dict(blob["machine"])
    if version == 1 and "earlier" in fields:  # (one earlier attempt, or none)
        fields["earlier"] = [] if fields["earlier"] is None else [fields["earlier"]]
    for name in MONOTONIC_FIELDS:
        value = fields.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            fields[name] = now + (value - wall)
    try:
        return _ADAPTER.validate_json(json.dumps(fields), strict=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'machine'}: {e['msg']}"
                             for e in exc.errors())
        raise MachineBlobError(f"the persisted run machine does not read: {problems}") from None
