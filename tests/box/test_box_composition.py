"""The box backend's composition (issue 29 item 2): RunSupervisor is one mixin per concern over
BoxSupervisorBase, which declares what one concern calls of another. Each declaration must be
provided by a concern (a declaration left to itself raises on the run's main loop), and the
concerns must not provide the same method twice (which one wins would be the MRO's accident)."""

from __future__ import annotations

import inspect

from airvisor.box._base import BoxSupervisorBase
from airvisor.box._supervisor import RunSupervisor

CONCERNS = [base for base in RunSupervisor.__mro__
            if base is not BoxSupervisorBase and issubclass(base, BoxSupervisorBase)]


def own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if inspect.isfunction(value) or isinstance(value, property)}


def declarations() -> set[str]:
    """The base's methods that only declare (their body raises NotImplementedError)."""
    found = set()
    for name, value in vars(BoxSupervisorBase).items():
        function = value.fget if isinstance(value, property) else value
        if inspect.isfunction(function) \
                and "raise NotImplementedError" in inspect.getsource(function):
            found.add(name)
    return found


def test_every_declaration_of_the_base_is_provided_by_a_concern() -> None:
    declared = declarations()
    assert declared, "the base declares nothing: the test checks nothing"
    for name in sorted(declared):
        owners = [c.__name__ for c in CONCERNS if name in vars(c)]
        assert owners, f"{name} is declared by BoxSupervisorBase but no concern provides it"
        resolved = next(c for c in RunSupervisor.__mro__ if name in vars(c))
        assert resolved is not BoxSupervisorBase, name


def test_no_two_concerns_provide_the_same_method() -> None:
    seen: dict[str, str] = {}
    for concern in CONCERNS:
        for name in own_methods(concern):
            assert name not in seen, f"{name}: both {seen[name]} and {concern.__name__}"
            seen[name] = concern.__name__
    assert len(CONCERNS) == 6  # RunSupervisor and its five concerns
