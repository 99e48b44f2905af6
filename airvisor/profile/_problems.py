"""Problems found in a profile, and the error that carries them.

A problem says where (``file:line:col`` or another place a person can find), what is wrong and,
where we know it, how to fix it. Every problem found is reported at once, never only the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    where: str
    message: str
    fix: str | None = None
    # A condition of this machine, not of the run's config (a full or read-only disk): it may
    # heal, so a relaunch waits for it instead of counting it as a crash of the run.
    machine: bool = False

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class ProfileError(Exception):
    """A profile that cannot be used; `problems` lists every reason."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
