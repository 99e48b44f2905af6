"""A component's prime-rl config: its config_files deep-merged in order, then its inline table.

Each value remembers where it came from (file, line, column) so a later check can point at the
line a person has to edit, whether that line is in the profile or in one of its config files.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airvisor.profile._locate import KeyLocator, Loc
from airvisor.profile._problems import Problem, ProfileError
from airvisor.profile._schema import ComponentName, Profile
from airvisor.profile._toml import TomlDocument, read_toml

ConfigPath = tuple[str, ...]


@dataclass(frozen=True)
class ComponentConfig:
    """The merged config of one component, with the origin of each key."""

    component: str
    data: dict[str, Any]
    origins: dict[ConfigPath, str] = field(default_factory=dict)
    default_where: str = "profile"

    def get(self, *path: str) -> Any:
        node: Any = self.data
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        return node

    def where(self, *path: str) -> str:
        key = tuple(path)
        while key:
            found = self.origins.get(key)
            if found is not None:
                return found
            key = key[:-1]
        return self.default_where


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` on top of `base`; tables merge key by key, anything else is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _record_origins(
    data: Mapping[str, Any],
    locator: KeyLocator | None,
    loc_prefix: Loc,
    fallback: str,
    out: dict[ConfigPath, str],
    prefix: ConfigPath = (),
) -> None:
    for key, value in data.items():
        path = (*prefix, key)
        out[path] = locator.where((*loc_prefix, *path)) if locator is not None else fallback
        if isinstance(value, Mapping):
            _record_origins(value, locator, loc_prefix, fallback, out, path)


def merge_component_config(
    component: str,
    config_files: Sequence[Path],
    inline: Mapping[str, Any],
    *,
    profile_locator: KeyLocator | None,
    profile_where: str,
) -> tuple[ComponentConfig, list[Problem]]:
    """Merge the files then the inline table; unreadable files become problems (and are skipped)."""
    problems: list[Problem] = []
    data: dict[str, Any] = {}
    origins: dict[ConfigPath, str] = {}
    for index, path in enumerate(config_files):
        document = read_toml(path, what=f"{component} config file")
        if isinstance(document, TomlDocument):
            data = deep_merge(data, document.data)
            _record_origins(document.data, document.locator, (), str(path), origins)
            continue
        listed_at = (
            profile_locator.where((component, "config_files", index))
            if profile_locator is not None
            else profile_where
        )
        problems.append(
            Problem(
                document.where,
                f"{document.message} (listed in [{component}] config_files at {listed_at})",
                document.fix,
            )
        )
    data = deep_merge(data, inline)
    _record_origins(inline, profile_locator, (component, "config"), profile_where, origins)
    default = (
        profile_locator.where((component,)) if profile_locator is not None else profile_where
    )
    return ComponentConfig(component, data, origins, default), problems


def sourced_component_config(profile: Profile, name: ComponentName) -> ComponentConfig:
    """The merged config of `name` with origins; raises ProfileError for unreadable files."""
    section = getattr(profile, name)
    locator = profile._locator if isinstance(profile._locator, KeyLocator) else None
    merged, problems = merge_component_config(
        name,
        section.config_files,
        section.config,
        profile_locator=locator,
        profile_where=str(profile.source) if profile.source else "profile",
    )
    if problems:
        raise ProfileError(problems)
    return merged


def component_config(profile: Profile, name: ComponentName) -> dict[str, Any]:
    """The merged prime-rl config of one component (config_files in order, then inline)."""
    return sourced_component_config(profile, name).data
