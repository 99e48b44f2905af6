"""Schemathesis fuzzes every operation of the served OpenAPI schema: no answer may be a 5xx.

Valid (positive) and invalid (negative) requests, with and without the token. The hypothesis
loop runs inside the test because schemathesis' own pytest fixture loader does not work with
this pytest version.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from .conftest import PROFILE_NAME, TOKEN, Api

FUZZ_EXAMPLES = 25


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_under_fuzzing(api: Api, mode: GenerationMode) -> None:
    # A run with logs exists, so some generated requests get past the 404s.
    with api.client() as client:
        assert client.post("/runs", json={"profile": PROFILE_NAME}).status_code == 201
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    seen: dict[str, set[int]] = {}

    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def no_5xx(case: schemathesis.Case) -> None:
            if case.operation.label == "POST /reap" and isinstance(case.body, dict):
                # Never reap for real: other developers' processes run on this machine.
                case.body = {**case.body, "dry_run": True}
            for headers in ({"Authorization": f"Bearer {TOKEN}"}, {}):
                try:
                    response = case.call(base_url=api.url, headers=headers, timeout=3)
                except requests.exceptions.ReadTimeout:
                    continue  # a follow=true stream of the live run: it does not end
                seen.setdefault(case.operation.label, set()).add(response.status_code)
                assert response.status_code < 500, (case.as_curl_command(), response.text)

        try:
            no_5xx()
        except Unsatisfiable:
            # No parameters or body to get wrong (GET /health): nothing negative to send.
            assert mode == GenerationMode.NEGATIVE
            continue
        assert operation.label in seen
    if mode == GenerationMode.POSITIVE:
        assert len(seen) == len(operations)
