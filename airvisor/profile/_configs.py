"""Deep merge of TOML tables, as prime-rl composes `@` files (later files win, tables merge)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_into(target: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` merged into `target` in place (tables merge key by key, anything else is
    replaced by a copy); returns `target`.

    The cost is the size of `override`, whatever the size of `target`: folding N flags or
    `--set` keys one at a time into one table stays linear (a copying merge per key is
    quadratic: 16,000 keys took 35 s).
    """
    for key, value in override.items():
        existing = target.get(key)
        if isinstance(value, Mapping) and isinstance(existing, Mapping):
            if not isinstance(existing, dict):
                existing = target[key] = dict(existing)
            merge_into(existing, value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` on top of `base` in a new table; neither input is changed.

    For many merges into one result, start from a copy and use `merge_into`.
    """
    return merge_into(copy.deepcopy(dict(base)), override)
