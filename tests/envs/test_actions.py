"""Command extraction from messy model replies (pure)."""

from __future__ import annotations

import pytest
from air_mlgym import Command, NoCommand, extract_command, strip_thinking
from air_mlgym._actions import blocked_command

# (reply, expected kind, expected text) — text None means "don't check".
CASES: list[tuple[str, str, str | None]] = [
    ("ls -la", "shell", "ls -la"),
    ("```bash\nls -la\n```", "shell", "ls -la"),
    ("```\npython train.py\n```", "shell", "python train.py"),
    ("```sh\n$ cat data/train.csv | head\n```", "shell", "cat data/train.csv | head"),
    ("<think>I should look around.</think>\n```bash\nls\n```", "shell", "ls"),
    ("<think>\nlong\nthinking\n</think>\n\nvalidate", "validate", "validate"),
    ("The opening tag was in the prompt.</think>\n```bash\npwd\n```", "shell", "pwd"),
    (
        "I'll check the files first.\n\n```bash\nls data\n```\nThis lists the data.",
        "shell",
        "ls data",
    ),
    ("First:\n```bash\nls\n```\nthen:\n```bash\ncat strategy.py\n```", "shell", "cat strategy.py"),
    ("Let me validate my solution.\nvalidate", "validate", "validate"),
    ("submit", "submit", "submit"),
    ("```\nsubmit\n```", "submit", "submit"),
    ("`validate`", "validate", "validate"),
    ("open strategy.py", "open", "open strategy.py"),
    ('open "my file.py" 20', "open", 'open "my file.py" 20'),
    ("goto 40", "goto", "goto 40"),
    ("scroll_down", "scroll_down", "scroll_down"),
    ("```bash\nscroll_up\n```", "scroll_up", "scroll_up"),
    ("create train.py", "create", "create train.py"),
    ("search_dir accuracy", "search_dir", None),
    ("search_file row_strategy strategy.py", "search_file", None),
    ("find_file *.csv data", "find_file", None),
    (
        "```\nedit 5:6\n    return 0\nend_of_edit\n```",
        "edit",
        "edit 5:6\n    return 0\nend_of_edit",
    ),
    ("Now I edit:\nedit 1:1\nimport os\nend_of_edit\nDone.", "edit", None),
    ("```\ninsert 3\nx = 1\nend_of_insert\n```", "insert", None),
    ("```bash\ncd data\nls -la\n```", "shell", "cd data\nls -la"),
    # a shell block followed by validate runs only the shell part
    # validate/submit are shell functions: they run after the shell lines (MLGym)
    ("```bash\npython train.py\nvalidate\n```", "shell", "python train.py\nvalidate"),
    ("```console\n$ nvidia-smi\n```", "shell", "nvidia-smi"),
    ("<THINK>caps</THINK>```bash\nls\n```", "shell", "ls"),
    ("```bash\nls\n", "shell", "ls"),  # unclosed fence (reply cut off)
    ("   ```bash\n   ls\n   ```", "shell", "ls"),
    ("Let me wait.\nsleep 5", "shell", "sleep 5"),
    ("./run.sh --fast", "shell", "./run.sh --fast"),
]

NO_COMMAND: list[tuple[str, str]] = [
    ("", "empty"),
    ("   \n\n", "empty"),
    ("<think>I am still thinking about what to do", "<think>"),
    ("I think the best approach is to use a random forest.", "no command"),
    ("```python\ndef row_strategy(history):\n    return 0\n```", "```python"),
    ("edit 1:2\nprint(1)\n", "end_of_edit"),
    ("```\ninsert 3\nx = 1\n```", "end_of_insert"),
    ("edit 5:2\nx\nend_of_edit", "not a valid line range"),
    ("goto forty", "line number"),
    ("open", "argument"),
    ("edit 1-2\nx\nend_of_edit", "Malformed"),
    ("<think>a</think>", "empty"),
]


@pytest.mark.parametrize(("reply", "kind", "text"), CASES)
def test_extracts_one_command(reply: str, kind: str, text: str | None) -> None:
    parsed = extract_command(reply)
    assert isinstance(parsed, Command), parsed
    assert parsed.kind == kind
    if text is not None:
        assert parsed.text == text


@pytest.mark.parametrize(("reply", "hint"), NO_COMMAND)
def test_no_command_gets_a_helpful_message(reply: str, hint: str) -> None:
    parsed = extract_command(reply)
    assert isinstance(parsed, NoCommand), parsed
    assert hint.lower() in parsed.message.lower()


def test_edit_keeps_body_indentation_and_range() -> None:
    parsed = extract_command("```\nedit 3:4\n    if x:\n        y()\nend_of_edit\n```")
    assert isinstance(parsed, Command)
    assert (parsed.start, parsed.end) == (3, 4)
    assert parsed.body == "    if x:\n        y()"


def test_empty_edit_body_deletes() -> None:
    parsed = extract_command("edit 2:3\nend_of_edit")
    assert isinstance(parsed, Command)
    assert parsed.body == ""


def test_open_args_are_shell_split() -> None:
    parsed = extract_command('open "dir with space/f.py" 7')
    assert isinstance(parsed, Command)
    assert parsed.args == ("dir with space/f.py", "7")


def test_extra_lines_after_special_command_are_noted() -> None:
    parsed = extract_command("```\nvalidate\nsubmit\n```")
    assert isinstance(parsed, Command)
    assert parsed.kind == "validate"
    assert parsed.note is not None and "one command" in parsed.note


def test_shell_then_special_is_noted() -> None:
    parsed = extract_command("```bash\nls\nopen x.py\n```")
    assert isinstance(parsed, Command) and parsed.text == "ls"
    assert parsed.note is not None and "open" in parsed.note
    # validate / submit are shell functions: they run with the shell lines, no note
    submitted = extract_command("```bash\nls\nsubmit\n```")
    assert isinstance(submitted, Command) and submitted.text == "ls\nsubmit"
    assert submitted.note is None


def test_blocklist() -> None:
    assert blocked_command("vim strategy.py") == "vim"
    assert blocked_command("git status") == "git"
    assert blocked_command("python3") == "python3"  # interactive when alone
    assert blocked_command("python3 train.py") is None
    assert blocked_command("nano") == "nano" and blocked_command("ls -la") is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>x</think>y", "y"),
        ("a<think>x</think>b<think>z</think>c", "abc"),
        ("pre</think>post", "post"),
        ("keep<think>unclosed", "keep"),
        ("no tags", "no tags"),
    ],
)
def test_strip_thinking(reply: str, expected: str) -> None:
    assert strip_thinking(reply) == expected


def test_crlf_replies_close_their_fences() -> None:
    reply = "Let me look.\r\n```bash\r\nls -la\r\n```\r\nThen I will edit.\r\n"
    command = extract_command(reply)
    assert isinstance(command, Command) and command.text == "ls -la" and command.kind == "shell"
    edit = extract_command("```\r\nedit 2:3\r\n    return 0\r\nend_of_edit\r\n```\r\n")
    assert isinstance(edit, Command) and edit.kind == "edit" and edit.body == "    return 0"
