"""MLGym's file commands, run inside the task container (python3 standard library only).

Copied into the container once per episode and invoked by the session as
`python3 <this file> <command> <args...>` through the agent's own shell, so relative paths
resolve against the agent's working directory. Editor state (the open file and the line the
window is centred on) is kept by the caller and passed in on every call; a command that changes
it prints a first line `@@AIR {json}` with the new state.
Exit status 0 on success, 1 on a usage problem the agent should see.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Callable, Iterator

MAX_SEARCH_FILES = 100
MAX_SEARCH_LINES = 100
SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules"}


def _state(path: str, line: int) -> None:
    print("@@AIR " + json.dumps({"file": os.path.abspath(path), "line": line}))


# Files are read and written with surrogateescape and no newline translation, so an edit keeps
# every byte of the lines it does not touch (Latin-1 data, CRLF line ends, stray bytes).
ENCODING = {"encoding": "utf-8", "errors": "surrogateescape", "newline": ""}


def _read_lines(path: str) -> list[str]:
    with open(path, **ENCODING) as handle:  # type: ignore[call-overload]
        return str(handle.read()).split("\n")


def _split_text(text: str) -> list[str]:
    return text.split("\n") if text else []  # an empty edit deletes the lines


def _lines_of(path: str) -> list[str]:
    lines = _read_lines(path)
    if lines and lines[-1] == "":
        lines = lines[:-1]  # a final newline does not make an extra line
    return lines


def _write(path: str, lines: list[str]) -> None:
    with open(path, "w", **ENCODING) as handle:  # type: ignore[call-overload]
        handle.write("\n".join(lines) + ("\n" if lines else ""))


def _window(path: str, line: int, window: int) -> int:
    lines = _lines_of(path)
    total = len(lines)
    line = max(1, min(line, max(total, 1)))
    first = max(1, line - window // 2)
    last = min(total, first + window - 1)
    first = max(1, min(first, last - window + 1)) if total else 1
    _state(path, line)
    print(f"[File: {os.path.abspath(path)} ({total} lines total)]")
    print(f"({first - 1} more lines above)")
    for number in range(first, last + 1):
        print(f"{number}:{lines[number - 1]}")
    print(f"({max(total - last, 0)} more lines below)")
    return 0


def _fail(message: str) -> int:
    print(message)
    return 1


def _check_file(path: str) -> str | None:
    if not os.path.exists(path):
        return f"File {path} not found"
    if os.path.isdir(path):
        return f"{path} is a directory; open a file"
    return None


# MLGym's edit check (tools/edit_linting.sh): these flake8 errors, when the edit adds them.
FLAKE8 = ["flake8", "--isolated", "--select=F821,F822,F831,E111,E112,E113,E999,E902"]


def _flake8(path: str, text: str) -> list[str] | None:
    """flake8's findings on `text` as `code message` (line numbers dropped, so errors the file
    had before an edit are recognised after it), or None without flake8."""
    import shutil
    import subprocess
    import tempfile

    if shutil.which(FLAKE8[0]) is None:
        return None
    with tempfile.NamedTemporaryFile(
        "w", suffix=".py", delete=False, encoding="utf-8", errors="surrogateescape", newline=""
    ) as handle:
        handle.write(text)
    try:
        done = subprocess.run(
            [*FLAKE8, handle.name], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        os.unlink(handle.name)
    findings = []
    for line in done.stdout.splitlines():
        parts = line.split(":", 3)  # path:line:col: CODE message
        if len(parts) == 4:
            findings.append(f"line {parts[1]}: {parts[3].strip()}")
    return findings


def _python_error(path: str, lines: list[str], before: list[str]) -> str | None:
    if not path.endswith(".py"):
        return None
    text = "\n".join(lines) + "\n"
    after_findings = _flake8(path, text)
    if after_findings is not None:
        before_findings = _flake8(path, "\n".join(before) + "\n") or []
        known = {f.split(": ", 1)[1] for f in before_findings}
        new = [f for f in after_findings if f.split(": ", 1)[1] not in known]
        return "\n".join(new) if new else None
    try:
        compile(text, path, "exec")
    except SyntaxError as e:
        return f"{e.msg} (line {e.lineno})"
    except (UnicodeError, ValueError):  # undecodable bytes: Python could not run it either
        return None
    return None


def cmd_view(path: str, line: str, window: str) -> int:
    problem = _check_file(path)
    if problem:
        return _fail(problem)
    return _window(path, int(line), int(window))


def cmd_create(path: str, window: str) -> int:
    """MLGym's `create`: a new file with one empty line, opened; an existing file is reported
    and opened instead (tools/defaults.sh)."""
    if os.path.exists(path):
        print(f"Error: File '{path}' already exists.")
        if os.path.isdir(path):
            return 1
        _window(path, 1, int(window))
        return 1
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    _write(path, [""])
    return _window(path, 1, int(window))


def _replace(path: str, first: int, last: int, new: list[str], window: str, what: str) -> int:
    lines = _lines_of(path)
    total = len(lines)
    if first > total + 1:
        return _fail(f"Error: line {first} is past the end of the file ({total} lines).")
    last = min(last, total)
    updated = lines[: first - 1] + new + lines[last:]
    error = _python_error(path, updated, lines)
    if error is not None:
        print(f"Your proposed {what} has introduced a syntax error: {error}")
        print("This is how the file would have looked (the edit was NOT applied):")
        shown_first = max(1, first - 5)
        shown_last = min(len(updated), first + len(new) + 5)
        for number in range(shown_first, shown_last + 1):
            print(f"{number}:{updated[number - 1]}")
        print(f"Fix the {what} and try again.")
        return 1
    _write(path, updated)
    print(f"File updated ({what} applied). Review the change; fix it if needed.")
    return _window(path, first + max(len(new) - 1, 0) // 2, int(window))


def cmd_edit(path: str, first: str, last: str, payload: str, window: str) -> int:
    problem = _check_file(path)
    if problem:
        return _fail(problem)
    with open(payload, encoding="utf-8") as handle:
        new = _split_text(handle.read())
    return _replace(path, int(first), int(last), new, window, "edit")


def cmd_insert(path: str, after: str, payload: str, window: str) -> int:
    problem = _check_file(path)
    if problem:
        return _fail(problem)
    with open(payload, encoding="utf-8") as handle:
        new = _split_text(handle.read())
    line = int(after)
    return _replace(path, line + 1, line, new, window, "insert")


def cmd_search_file(term: str, path: str) -> int:
    problem = _check_file(path)
    if problem:
        return _fail(problem)
    hits = [(i, text) for i, text in enumerate(_lines_of(path), 1) if term in text]
    if not hits:
        print(f'No matches found for "{term}" in {os.path.abspath(path)}')
        return 0
    if len(hits) > MAX_SEARCH_LINES:
        return _fail(f'More than {MAX_SEARCH_LINES} lines matched "{term}"; narrow the search.')
    print(f'Found {len(hits)} matches for "{term}" in {os.path.abspath(path)}:')
    for number, text in hits:
        print(f"Line {number}:{text}")
    print(f'End of matches for "{term}" in {os.path.abspath(path)}')
    return 0


def _walk(directory: str) -> Iterator[str]:
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            yield os.path.join(root, name)


def cmd_search_dir(term: str, directory: str) -> int:
    if not os.path.isdir(directory):
        return _fail(f"Directory {directory} not found")
    counts: list[tuple[str, int]] = []
    for path in _walk(directory):
        try:
            with open(path, encoding="utf-8") as handle:
                count = sum(line.count(term) for line in handle)
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable
        if count:
            counts.append((path, count))
    if not counts:
        print(f'No matches found for "{term}" in {os.path.abspath(directory)}')
        return 0
    if len(counts) > MAX_SEARCH_FILES:
        return _fail(f'More than {MAX_SEARCH_FILES} files matched "{term}"; narrow the search.')
    total = sum(c for _, c in counts)
    print(f'Found {total} matches for "{term}" in {os.path.abspath(directory)}:')
    for path, count in counts:
        print(f"{path} ({count} matches)")
    print(f'End of matches for "{term}" in {os.path.abspath(directory)}')
    return 0


def cmd_find_file(name: str, directory: str) -> int:
    if not os.path.isdir(directory):
        return _fail(f"Directory {directory} not found")
    found = [p for p in _walk(directory) if fnmatch.fnmatch(os.path.basename(p), name)]
    if not found:
        print(f'No matches found for "{name}" in {os.path.abspath(directory)}')
        return 0
    print(f'Found {len(found)} matches for "{name}" in {os.path.abspath(directory)}:')
    for path in found[:MAX_SEARCH_FILES]:
        print(path)
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    "view": cmd_view,
    "create": cmd_create,
    "edit": cmd_edit,
    "insert": cmd_insert,
    "search_file": cmd_search_file,
    "search_dir": cmd_search_dir,
    "find_file": cmd_find_file,
}


def main(argv: list[str]) -> int:
    # Undecodable bytes of a file are shown as "?": they never crash the output.
    sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    if not argv or argv[0] not in COMMANDS:
        return _fail(f"unknown tool command {argv[:1]}")
    try:
        return int(COMMANDS[argv[0]](*argv[1:]))
    except TypeError:
        return _fail(f"wrong arguments for {argv[0]}")
    except OSError as e:
        return _fail(f"Error: {e.strerror or e}: {e.filename or ''}".rstrip(": "))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
