"""Key positions in TOML documents, including the shapes the scanner must skip over."""

from __future__ import annotations

from pathlib import Path

from airvisor.profile._locate import KeyLocator

DOCUMENT = '''# comment
top = 1
[run]
name = "x"   # trailing comment with = sign
  indented.dotted = 2
"quoted key" = 3

[[containers.mounts]]
source = "a"
[[containers.mounts]]
source = """multi
line = "not a key"
"""
target = "/b"

[prime_rl.overrides]
list = [
  "not = a key",
  { inline = 1 },
]
after = true
[prime_rl.overrides.orchestrator]
env = [{ id = "e", args = { k = 1 } }]
'''


def test_positions_of_keys_tables_and_array_elements() -> None:
    locator = KeyLocator(Path("p.toml"), DOCUMENT)
    assert locator.exact(("top",)) == (2, 1)
    assert locator.exact(("run",)) == (3, 1)
    assert locator.exact(("run", "name")) == (4, 1)
    assert locator.exact(("run", "indented", "dotted")) == (5, 3)
    assert locator.exact(("run", "quoted key")) == (6, 1)
    assert locator.exact(("containers", "mounts", 0, "source")) == (9, 1)
    assert locator.exact(("containers", "mounts", 1)) == (10, 1)
    assert locator.exact(("containers", "mounts", 1, "source")) == (11, 1)
    assert locator.exact(("containers", "mounts", 1, "target")) == (14, 1)
    assert locator.exact(("line",)) is None  # inside a multi-line string
    assert locator.exact(("prime_rl", "overrides", "after")) == (21, 1)
    assert locator.exact(("prime_rl", "overrides", "list")) == (17, 1)


def test_lookups_fall_back_to_the_nearest_parent() -> None:
    locator = KeyLocator(Path("p.toml"), DOCUMENT)
    deep = ("prime_rl", "overrides", "orchestrator", "env", 0, "args", "k")
    assert locator.where(deep) == "p.toml:23:1"
    assert locator.where(("run", "missing")) == "p.toml:3:1"
    assert locator.where(("nowhere",)) == "p.toml"
