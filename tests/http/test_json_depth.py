"""Bodies nested past the JSON nesting bound, sent to the real `sbuf serve`: answered 400
`invalid_json` like any other body that is not JSON, and the server goes on serving."""

from __future__ import annotations

import httpx2
import pytest

from stormbuffer.protocol.jsontext import MAX_DEPTH

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])  # 200 KB at most: within the body bound
@pytest.mark.parametrize("path", ["/v1/records", "/v1/invoke/search"])
def test_a_body_nested_past_the_bound_is_invalid_json(client: httpx2.Client, path: str, depth: int) -> None:
    body = '{"version": 1, "query": ' + "[" * depth + "]" * depth + "}"
    answer = client.post(path, content=body.encode(), headers=JSON)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_json"
    assert client.get("/v1/records").status_code == 200
