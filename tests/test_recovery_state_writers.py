"""No backend writes recovery state or stops processes itself (issue 29 item 1).

The run machine (`policy.RunMachine`) is held by the supervisor core and replaced only by what
`policy.transition` returns (`SupervisorCore._decide`, the one executor of its effects). The
backends (airvisor/box/, airvisor/slurm/) turn the world into typed events and carry out the
effects they are given: read over their AST, none of them assigns an attribute named after a
field of the machine (with or without a leading underscore, the machine itself included), and
none calls a stop (`_stop_processes`, `_stop_rest`, `_processes_down`): the executor does.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import airvisor
from airvisor.policy import RunMachine

PACKAGE = Path(airvisor.__file__).resolve().parent
BACKENDS = ("box", "slurm")
STOPS = frozenset({"_stop_processes", "_stop_rest", "_processes_down"})


def recovery_names() -> frozenset[str]:
    """The attribute names of recovery state: the machine's fields, as attributes (`phase`,
    `_phase`, `_failure`, ...), and the machine itself."""
    fields = [f.name for f in dataclasses.fields(RunMachine)]
    return frozenset({*fields, *(f"_{name}" for name in fields), "_machine", "machine"})


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found.extend(_flatten(target))
        return found
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return _flatten(node.target)
    if isinstance(node, ast.NamedExpr):
        return [node.target]
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for element in target.elts for t in _flatten(element)]
    if isinstance(target, ast.Starred):
        return _flatten(target.value)
    return [target]


def violations(source: str, where: str) -> list[str]:
    """Each recovery field assigned and each stop called in `source`, as `where:line: what`."""
    names = recovery_names()
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and target.attr in names:
                found.append((target.lineno, f"assigns {target.attr}"))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else (
                func.id if isinstance(func, ast.Name) else None)
            if name in STOPS:
                found.append((node.lineno, f"calls {name}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
            found.append((node.lineno, f"setattr {node.args[1].value}"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_the_list_is_taken_from_the_machine() -> None:
    names = recovery_names()
    assert {"_failure", "_scope", "_backoff_until", "_scope_pending", "_down_held",
            "_keep_next", "_keeping", "_stacks_taken", "_machine_reason",
            "_stop_began_at", "phase"} <= names


def test_no_backend_writes_recovery_state_or_stops_outside_the_executor() -> None:
    found = []
    for backend in BACKENDS:
        for path in sorted((PACKAGE / backend).rglob("*.py")):
            found += violations(path.read_text(), str(path.relative_to(PACKAGE)))
    assert found == []


def test_a_planted_violation_is_found() -> None:
    planted = '''
class Backend:
    def _after_stop(self, event):
        self._keeping = False
        self._failure, other = None, 1
        self._backoff_until += 1.0
        self.phase = "running"
        setattr(self, "_scope", None)
        self._processes_down()
        self._stop_rest(stacks=True)

    def _on_exit(self):
        self._stop_processes()
'''
    assert violations(planted, "planted.py") == [
        "planted.py:4: assigns _keeping", "planted.py:5: assigns _failure",
        "planted.py:6: assigns _backoff_until", "planted.py:7: assigns phase",
        "planted.py:8: setattr _scope", "planted.py:9: calls _processes_down",
        "planted.py:10: calls _stop_rest", "planted.py:13: calls _stop_processes"]


def test_reading_the_machine_and_reporting_events_is_allowed() -> None:
    allowed = '''
class Backend:
    def _stop_processes(self, *, keep_inference=False, stacks=False):
        keep = self.machine.keeping
        failure = self.machine.failure
        self._decide(self._down_event())
        return keep
'''
    assert violations(allowed, "allowed.py") == []


def test_the_core_replaces_the_machine_only_in_its_executor() -> None:
    """The core holds one machine: set at its start (core/_base.py), replaced only by
    `_decide` (core/_executor.py, with what `transition` returned), in whichever file of the
    core the classes that make up `SupervisorCore` sit (other classes of core/, e.g. LogView,
    may have attributes of their own named like a field)."""
    classes = {"CoreBase", "DecisionExecutor", "SupervisorCore"}
    writers, seen = set(), set()
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef) or cls.name not in classes:
                continue
            seen.add(cls.name)
            for function in ast.walk(cls):
                if isinstance(function, ast.FunctionDef):
                    for node in ast.walk(function):
                        if any(isinstance(t, ast.Attribute) and t.attr in recovery_names()
                               for t in _targets(node)):
                            writers.add(f"{path.name}:{function.name}")
    assert seen == classes
    assert writers == {"_base.py:__init__", "_executor.py:_decide"}
