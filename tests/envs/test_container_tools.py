"""MLGym's file commands (container_tools.py), run with a local python3 in a temp directory —
the same script and interpreter contract as inside the task container."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = (
    Path(__file__).resolve().parents[2] / "envs" / "air_mlgym" / "air_mlgym" / "container_tools.py"
)


def tool(cwd: Path, *args: str) -> tuple[int, str, dict[str, object] | None]:
    done = subprocess.run(
        [sys.executable, str(TOOLS), *args], cwd=cwd, capture_output=True, text=True, timeout=20
    )
    state = None
    lines = []
    for line in done.stdout.splitlines():
        if line.startswith("@@AIR "):
            state = json.loads(line[6:])
        else:
            lines.append(line)
    return done.returncode, "\n".join(lines), state


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "code.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 31)))
    (tmp_path / "notes.txt").write_text("alpha\nbeta\nalpha beta\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.csv").write_text("a,b\n1,2\n")
    return tmp_path


def payload(tmp: Path, text: str) -> str:
    path = tmp / "payload.txt"
    path.write_text(text)
    return str(path)


def test_view_shows_a_window_with_line_numbers(work: Path) -> None:
    code, out, state = tool(work, "view", "code.py", "20", "10")
    assert code == 0
    assert state == {"file": str(work / "code.py"), "line": 20}
    assert out.splitlines()[0] == f"[File: {work / 'code.py'} (30 lines total)]"
    assert "(14 more lines above)" in out and "15:x15 = 15" in out and "24:x24 = 24" in out
    assert "(6 more lines below)" in out


def test_view_clamps_past_the_end(work: Path) -> None:
    code, out, state = tool(work, "view", "code.py", "500", "10")
    assert code == 0 and state is not None and state["line"] == 30
    assert "30:x30 = 30" in out and "(0 more lines below)" in out


def test_view_missing_file(work: Path) -> None:
    code, out, _ = tool(work, "view", "nope.py", "1", "10")
    assert code == 1 and "not found" in out


def test_edit_replaces_a_range(work: Path, tmp_path: Path) -> None:
    code, out, _ = tool(work, "edit", "code.py", "2", "4", payload(tmp_path, "y = 2\nz = 3"), "100")
    assert code == 0 and "File updated" in out
    lines = (work / "code.py").read_text().splitlines()
    assert lines[:4] == ["x1 = 1", "y = 2", "z = 3", "x5 = 5"]
    assert len(lines) == 29


def test_edit_with_empty_text_deletes(work: Path, tmp_path: Path) -> None:
    code, _, _ = tool(work, "edit", "code.py", "1", "10", payload(tmp_path, ""), "100")
    assert code == 0
    assert (work / "code.py").read_text().splitlines()[0] == "x11 = 11"


def test_edit_that_breaks_python_is_refused(work: Path, tmp_path: Path) -> None:
    before = (work / "code.py").read_text()
    code, out, _ = tool(work, "edit", "code.py", "3", "3", payload(tmp_path, "def broken(:"), "100")
    assert code == 1 and "syntax error" in out and "NOT applied" in out
    assert (work / "code.py").read_text() == before


def test_edit_of_non_python_file_is_not_linted(work: Path, tmp_path: Path) -> None:
    code, _, _ = tool(work, "edit", "notes.txt", "1", "1", payload(tmp_path, "def broken(:"), "100")
    assert code == 0
    assert (work / "notes.txt").read_text().startswith("def broken(:\n")


def test_insert_after_a_line_and_at_the_top(work: Path, tmp_path: Path) -> None:
    assert tool(work, "insert", "notes.txt", "1", payload(tmp_path, "inserted"), "100")[0] == 0
    assert tool(work, "insert", "notes.txt", "0", payload(tmp_path, "top"), "100")[0] == 0
    assert (work / "notes.txt").read_text() == "top\nalpha\ninserted\nbeta\nalpha beta\n"


def test_insert_past_the_end_is_an_error(work: Path, tmp_path: Path) -> None:
    code, out, _ = tool(work, "insert", "notes.txt", "10", payload(tmp_path, "x"), "100")
    assert code == 1 and "past the end" in out


def test_create_makes_a_one_line_file_and_opens_an_existing_one(work: Path) -> None:
    # MLGym's create (tools/defaults.sh): `printf "\n"` into a new file, then open it; an
    # existing file is reported and opened
    code, out, state = tool(work, "create", "new/train.py", "100")
    assert code == 0 and (work / "new" / "train.py").read_text() == "\n"
    assert "(1 lines total)" in out
    assert state is not None and state["file"] == str(work / "new" / "train.py")
    code, out, state = tool(work, "create", "code.py", "100")
    assert code == 1 and "already exists" in out and "1:x1 = 1" in out
    assert state is not None and state["file"] == str(work / "code.py")


def test_search_file(work: Path) -> None:
    code, out, _ = tool(work, "search_file", "alpha", "notes.txt")
    assert code == 0
    assert "Found 2 matches" in out and "Line 1:alpha" in out and "Line 3:alpha beta" in out


def test_search_dir_counts_per_file_and_skips_binary(work: Path) -> None:
    (work / "blob.bin").write_bytes(b"\xff\xfe\x00alpha")
    code, out, _ = tool(work, "search_dir", "alpha", ".")
    assert code == 0
    assert "notes.txt (2 matches)" in out and "blob.bin" not in out


def test_find_file_matches_patterns(work: Path) -> None:
    code, out, _ = tool(work, "find_file", "*.csv", ".")
    assert code == 0 and "deep.csv" in out
    code, out, _ = tool(work, "find_file", "missing.txt", ".")
    assert code == 0 and "No matches" in out


def test_edit_keeps_the_bytes_of_untouched_lines(tmp_path: Path) -> None:
    original = b"caf\xe9 = 1\r\n# \xff\xfe stray bytes\nkeep = 'ol\xe1'\nlast = 4\n"
    (tmp_path / "latin.py").write_bytes(original)
    (tmp_path / "payload").write_text("last = 5")
    code, out, _ = tool(tmp_path, "edit", "latin.py", "4", "4", "payload", "10")
    assert code == 0, out
    assert (tmp_path / "latin.py").read_bytes() == original.replace(b"last = 4", b"last = 5")
    code, out, _ = tool(tmp_path, "view", "latin.py", "1", "10")
    assert code == 0 and "1:caf? = 1" in out  # shown (undecodable bytes as ?), not crashed
