"""Extract exactly one command from a model reply: pure string handling, no I/O.

Models (Qwen3 and friends) answer with thinking, prose and markdown around the command. The
rules, in order:
1. Thinking is dropped: `<think>...</think>` blocks, text before a lone `</think>` (the opening
   tag was part of the prompt), and an unclosed `<think>` to the end of the reply.
2. When the reply has fenced code blocks, the last block in a shell-like language (or none) is
   the command text. Otherwise the first line that starts with a known command word is.
3. In the command text, MLGym's own commands (`open`, `goto`, `scroll_up`, `scroll_down`,
   `create`, `edit a:b ... end_of_edit`, `insert n ... end_of_insert`, `search_dir`,
   `search_file`, `find_file`, `validate`, `submit`) are parsed with their arguments; anything
   else is a shell command. A special command stops the text: a fenced block of shell lines
   followed by `validate` runs only the shell lines.
A reply without a command yields `NoCommand` with a message that tells the model what to send.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

SPECIAL_COMMANDS = frozenset(
    {
        "open",
        "goto",
        "scroll_up",
        "scroll_down",
        "create",
        "edit",
        "insert",
        "search_dir",
        "search_file",
        "find_file",
        "validate",
        "submit",
    }
)

# Words that start a shell command in prose (no fence). Inside a fence anything is a command.
SHELL_WORDS = frozenset(
    {
        "apt", "apt-get", "awk", "bash", "cat", "cd", "chmod", "conda", "cp", "curl", "cut",
        "diff", "du", "echo", "env", "export", "file", "find", "free", "git", "grep", "gunzip",
        "head", "kill", "less", "ln", "ls", "make", "mkdir", "more", "mv", "nproc", "nvidia-smi",
        "pip", "pip3", "printf", "ps", "pwd", "python", "python3", "rm", "rmdir", "sed", "sh",
        "sort", "source", "stat", "tail", "tar", "time", "timeout", "top", "touch", "tr", "tree",
        "uniq", "unzip", "wc", "which", "xargs", "torchrun", "accelerate", "sleep", "nohup",
        "date", "uname", "df", "tee", "id", "whoami", "jq", "wget", "zcat", "gzip",
    }
)  # fmt: skip

# Special commands that are also shell functions in the agent's shell (MLGym's tools define
# them the same way): they may appear anywhere in a shell command.
IN_SHELL_COMMANDS = frozenset({"validate", "submit"})

# MLGym's blocklist (mlgym/tools/tools.py, ToolsConfig): interactive programs and editors that
# would hang or make no sense; the standalone ones only when they are the whole command.
BLOCKLIST = frozenset({"vim", "vi", "emacs", "nano", "nohup", "git"})
BLOCKLIST_STANDALONE = frozenset(
    {"python", "python3", "ipython", "bash", "sh", "exit", "/bin/bash", "/bin/sh", "nohup",
     "vi", "vim", "emacs", "nano", "su"}
)  # fmt: skip
BLOCKLIST_MESSAGE = "Interactive operation '{name}' is not supported by this environment"

SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "zsh", "terminal", "text"})

USAGE = {
    "open": 'open "<path>" [<line_number>]',
    "goto": "goto <line_number>",
    "scroll_up": "scroll_up",
    "scroll_down": "scroll_down",
    "create": "create <path>",
    "edit": "edit <start_line>:<end_line>\n<replacement text>\nend_of_edit",
    "insert": "insert <line_number>\n<text to insert after that line>\nend_of_insert",
    "search_dir": "search_dir <search_term> [<dir>]",
    "search_file": "search_file <search_term> [<file>]",
    "find_file": "find_file <file_name> [<dir>]",
    "validate": "validate",
    "submit": "submit",
}

HOW_TO_REPLY = (
    "Reply with exactly one command in a ```bash fenced block, for example:\n"
    "```bash\nls -la\n```\n"
    "Available commands besides shell commands: "
    + ", ".join(sorted(SPECIAL_COMMANDS - {"edit", "insert"}))
    + ", and multi-line edits:\n"
    + USAGE["edit"]
)


@dataclass(frozen=True)
class Command:
    kind: str  # a SPECIAL_COMMANDS name or "shell"
    text: str  # the command as extracted (shown in the trajectory)
    args: tuple[str, ...] = ()
    body: str | None = None  # the text of edit / insert
    start: int | None = None  # edit: first line; insert: the line after which to insert
    end: int | None = None  # edit: last line (inclusive)
    note: str | None = None  # told to the model with the observation (e.g. ignored extras)


@dataclass(frozen=True)
class NoCommand:
    message: str


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n", re.MULTILINE)
_FENCE_CLOSE = re.compile(r"^[ \t]*```[ \t]*$", re.MULTILINE)
_EDIT_HEADER = re.compile(r"^edit\s+(\d+)\s*:\s*(\d+)\s*$")
_INSERT_HEADER = re.compile(r"^insert\s+(\d+)\s*$")


def blocked_command(text: str) -> str | None:
    """The blocklisted program `text` starts with (MLGym's rule as intended: its own check
    compares only the first character of the first word, so it never blocks), or None."""
    words = text.strip().split()
    if not words:
        return None
    name = words[0]
    if name in BLOCKLIST:
        return name
    if name in BLOCKLIST_STANDALONE and name == text.strip():
        return name
    return None


def strip_thinking(reply: str) -> str:
    return _split_thinking(reply)[0]


def _split_thinking(reply: str) -> tuple[str, bool]:
    """(the reply without thinking, whether it ended inside an unclosed <think>)."""
    text = _THINK_BLOCK.sub("", reply)
    lowered = text.lower()
    close = lowered.rfind("</think>")
    if close != -1:  # the opening tag was in the prompt (chat template) or is already gone
        text = text[close + len("</think>") :]
        lowered = text.lower()
    opening = lowered.find("<think>")
    if opening != -1:  # unclosed: the model ran out of tokens while thinking
        return text[:opening], True
    return text, False


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, content) of each fenced block; an unclosed last fence runs to the end."""
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        opening = _FENCE_OPEN.search(text, pos)
        if opening is None:
            return blocks
        closing = _FENCE_CLOSE.search(text, opening.end())
        if closing is None:
            blocks.append((opening.group(1).lower(), text[opening.end() :]))
            return blocks
        blocks.append((opening.group(1).lower(), text[opening.end() : closing.start()]))
        pos = closing.end()


def extract_command(reply: str) -> Command | NoCommand:
    # CRLF replies: fences and edit terminators are matched line by line.
    reply = (reply or "").replace("\r\n", "\n")
    text, unclosed = _split_thinking(reply)
    if not text.strip():
        if unclosed:
            return NoCommand(
                "Your reply ended inside <think> without a command. Think briefly, close "
                "</think>, then give the command.\n" + HOW_TO_REPLY
            )
        return NoCommand("Your reply was empty. " + HOW_TO_REPLY)
    blocks = [(lang, body) for lang, body in fenced_blocks(text) if body.strip()]
    if blocks:
        shell_blocks = [body for lang, body in blocks if lang in SHELL_LANGUAGES]
        if not shell_blocks:
            language = blocks[-1][0]
            return NoCommand(
                f"Your reply has a ```{language} block but no command. To write a file use "
                "`create` and `edit`; to run code use a shell command such as "
                "`python script.py`.\n" + HOW_TO_REPLY
            )
        return _parse_command_text(shell_blocks[-1], fenced=True)
    return _parse_command_text(text, fenced=False)


def _first_word(line: str) -> str:
    stripped = _clean_line(line)
    return stripped.split(maxsplit=1)[0] if stripped else ""


def _clean_line(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith("$ "):
        stripped = stripped[2:].lstrip()
    if len(stripped) > 1 and stripped.startswith("`") and stripped.endswith("`"):
        stripped = stripped.strip("`").strip()
    return stripped


def _parse_command_text(text: str, *, fenced: bool) -> Command | NoCommand:
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        word = _first_word(line)
        if not word:
            continue
        if fenced or word in SPECIAL_COMMANDS or word in SHELL_WORDS or word.startswith("./"):
            start = i
            break
    if start is None:
        return NoCommand("Your reply contains no command. " + HOW_TO_REPLY)
    word = _first_word(lines[start])
    if word in SPECIAL_COMMANDS:
        return _parse_special(lines, start)
    if not fenced:
        return Command(kind="shell", text=_clean_line(lines[start]))
    # A fenced shell block: every line up to the first special command (one command per turn).
    # `validate` and `submit` are shell functions in the agent's shell (as in MLGym), so they
    # may follow shell lines: `python train.py && validate` evaluates after training.
    shell_lines: list[str] = []
    rest: list[str] = []
    for i, line in enumerate(lines[start:]):
        word = _first_word(line)
        if (
            not line.startswith((" ", "\t"))
            and word in SPECIAL_COMMANDS
            and word not in IN_SHELL_COMMANDS
        ):
            rest = lines[start + i :]
            break
        shell_lines.append(line)
    shell_lines[0] = _clean_line(shell_lines[0])
    command = "\n".join(shell_lines).strip()
    note = None
    if any(line.strip() for line in rest):
        note = (
            f"Only the shell commands before `{_first_word(rest[0])}` ran; send one command "
            "per reply."
        )
    return Command(kind="shell", text=command, note=note)


def _parse_special(lines: list[str], start: int) -> Command | NoCommand:
    header = _clean_line(lines[start])
    word = header.split(maxsplit=1)[0]
    trailing = [line for line in lines[start + 1 :] if line.strip()]
    if word in {"edit", "insert"}:
        return _parse_block_command(word, header, lines, start)
    try:
        args = tuple(shlex.split(header)[1:])
    except ValueError as e:
        return NoCommand(f"Could not parse `{header}` ({e}). Usage: {USAGE[word]}")
    note = None
    if trailing:
        note = "Only the first command ran; send one command per reply."
    problem = _check_args(word, args)
    if problem is not None:
        return NoCommand(f"{problem} Usage: {USAGE[word]}")
    return Command(kind=word, text=header, args=args, note=note)


def _check_args(word: str, args: tuple[str, ...]) -> str | None:
    counts = {
        "open": (1, 2),
        "goto": (1, 1),
        "scroll_up": (0, 0),
        "scroll_down": (0, 0),
        "create": (1, 1),
        "search_dir": (1, 2),
        "search_file": (1, 2),
        "find_file": (1, 2),
        "validate": (0, 0),
        "submit": (0, 0),
    }
    low, high = counts[word]
    if word in {"validate", "submit", "scroll_up", "scroll_down"}:
        return None  # extra words after these are harmless; MLGym ignores them too
    if not low <= len(args) <= high:
        return f"`{word}` takes {low}-{high} argument(s), got {len(args)}."
    if word == "goto" and not args[0].isdigit():
        return f"`goto` needs a line number, got {args[0]!r}."
    if word == "open" and len(args) == 2 and not args[1].isdigit():
        return f"`open` takes a line number after the path, got {args[1]!r}."
    return None


def _parse_block_command(
    word: str, header: str, lines: list[str], start: int
) -> Command | NoCommand:
    pattern = _EDIT_HEADER if word == "edit" else _INSERT_HEADER
    marker = "end_of_edit" if word == "edit" else "end_of_insert"
    match = pattern.match(header)
    if match is None:
        return NoCommand(f"Malformed `{word}` header `{header}`. Usage:\n{USAGE[word]}")
    body_lines: list[str] = []
    for line in lines[start + 1 :]:
        if line.strip() == marker:
            break
        body_lines.append(line)
    else:
        return NoCommand(
            f"Malformed {word} command: the text must end with a line `{marker}`. Usage:\n"
            + USAGE[word]
        )
    body = "\n".join(body_lines)
    text = "\n".join([header, *body_lines, marker])
    if word == "edit":
        first, last = int(match.group(1)), int(match.group(2))
        if first < 1 or last < first - 1:
            return NoCommand(
                f"`edit {first}:{last}` is not a valid line range: lines count from 1 and the "
                "end must not come before the start."
            )
        return Command(kind="edit", text=text, body=body, start=first, end=last)
    return Command(kind="insert", text=text, body=body, start=int(match.group(1)))
