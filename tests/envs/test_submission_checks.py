"""The submission checks of metrics.toml (README "Submission checks"), table-tested: what the
task's description rules out is refused before scoring, whatever its own evaluator accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from air_mlgym._reward import protection_table
from air_mlgym._session import evaluation_imports
from air_mlgym.container_admin import check_csv_submission, check_return

TABLE = protection_table()
BLOTTO = dict(TABLE["blotto"].returns["row_strategy"])
CHOICE = dict(TABLE["battleOfSexes"].returns["row_strategy"])


@pytest.mark.parametrize(
    ("rule", "value", "refused"),
    [
        (BLOTTO, [30, 30, 30, 30, 0, 0], False),
        (BLOTTO, [20] * 6, False),
        (BLOTTO, [10] * 6, False),  # fewer than 120 soldiers is allowed (MLGym's rule)
        (BLOTTO, [40, 40, 40], True),  # MLGym's evaluator scores it (+5 over the baseline)
        (BLOTTO, [20] * 7, True),
        (BLOTTO, [60, 60, 60, 0, 0, 0], True),  # over the budget
        (BLOTTO, [30, 30, 30, 30, -1, 1], True),
        (BLOTTO, [30.0, 30, 30, 30, 0, 0], True),
        (BLOTTO, [True, 30, 30, 30, 0, 0], True),
        (BLOTTO, "120", True),
        (CHOICE, 0, False),
        (CHOICE, 1, False),
        (CHOICE, 2, True),
        (CHOICE, True, True),
        (CHOICE, 1.0, True),
        (CHOICE, [1], True),
    ],
)
def test_strategy_returns(rule: dict[str, Any], value: Any, refused: bool) -> None:
    assert (check_return(rule, value) is not None) is refused


TITANIC = dict(TABLE["titanicSurvival"].submission)


@pytest.mark.parametrize(
    ("submission", "refused"),
    [
        ("PassengerId,Survived\n1,0\n2,1\n3,0\n", False),
        ("Survived,PassengerId\n0,3\n1,2\n0,1\n", False),  # column order is free
        ("PassengerId,Survived\n1,0\n1,0\n1,0\n", True),  # one sure passenger three times
        ("PassengerId,Survived\n1,0\n2,1\n", True),  # a passenger missing
        ("PassengerId,Survived\n1,0\n2,1\n4,0\n", True),  # not a test passenger
        ("PassengerId,Survived,Extra\n1,0,x\n2,1,x\n3,0,x\n", True),
        ("PassengerId,Survived\n1,0\n2,2\n3,0\n", True),
        ("PassengerId,Survived\n1,0\n2\n3,0\n", True),
        ("", True),
    ],
)
def test_csv_submission(tmp_path: Path, submission: str, refused: bool) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.csv").write_text("PassengerId,Pclass\n1,3\n2,1\n3,2\n")
    path = tmp_path / "submission.csv"
    path.write_text(submission)
    assert (check_csv_submission(str(path), TITANIC, str(tmp_path)) is not None) is refused


def test_evaluation_imports_are_the_module_level_ones(tmp_path: Path) -> None:
    script = tmp_path / "evaluate.py"
    script.write_text(
        "import json, os.path\nimport numpy as np\nfrom sklearn.metrics import f1\n"
        "from . import sibling\nfrom target import t\n"
        "def f():\n    import torch\n"
    )
    (tmp_path / "broken.py").write_text("def (:\n")
    found = evaluation_imports([script, tmp_path / "broken.py"])
    assert found == {"json", "os", "numpy", "sklearn", "target"}
