"""What an argv runs, once a Python interpreter and its options are peeled off: the one argv
parser, for the process facts (proc/) and the reaper's verdicts (reaper/)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?[a-z]?$")
# Interpreter options that take a separate argument.
_PYTHON_OPTS_WITH_ARG = {"-W", "-X", "--check-hash-based-pycs"}
# prime-rl's console scripts ([project.scripts] of prime-rl main: rl, sft, inference, trainer,
# orchestrator, evals, env-server; of v0.4.0 also eval and synthesize). They count only when a
# Python interpreter runs them and the script imports its `main` from prime_rl.
PRIME_RL_SCRIPTS = frozenset({"rl", "sft", "inference", "trainer", "orchestrator", "evals",
                              "eval", "env-server", "synthesize"})

@dataclass(frozen=True)
class Program:
    """What an argv runs once a Python interpreter (and its options) is peeled off."""

    interpreter: bool  # argv[0] was a Python interpreter
    name: str  # basename of the program or script ("" for -c and bare interpreters)
    module: str | None  # for `python -m MODULE`
    code: str | None  # for `python -c CODE`
    args: tuple[str, ...]  # the arguments after the program
    path: str = ""  # the program or script as given (argv[0], or the interpreter's script)


def parse_program(argv: tuple[str, ...]) -> Program:
    if not argv:
        return Program(False, "", None, None, ())
    first = os.path.basename(argv[0])
    if not _PYTHON.match(first):
        return Program(False, first, None, None, tuple(argv[1:]), argv[0])
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return Program(True, "", argv[i + 1], None, tuple(argv[i + 2:]))
        if arg.startswith("-m") and len(arg) > 2:
            return Program(True, "", arg[2:], None, tuple(argv[i + 1:]))
        if arg == "-c" and i + 1 < len(argv):
            return Program(True, "", None, argv[i + 1], tuple(argv[i + 2:]))
        if arg in _PYTHON_OPTS_WITH_ARG:
            i += 2
            continue
        if arg == "--" or not arg.startswith("-") or arg == "-":
            if arg == "--":
                i += 1
            break
        i += 1
    if i >= len(argv):
        return Program(True, "", None, None, ())
    return Program(True, os.path.basename(argv[i]), None, None, tuple(argv[i + 1:]), argv[i])
