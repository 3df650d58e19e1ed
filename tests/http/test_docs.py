"""Every `curl` example of docs/http.md, run in order by bash and Debian's curl against a real server."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx2

from tests.helpers import SBUF
from tests.system import program

from .conftest import TIMEOUT, Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "http.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
DOCUMENTED_ADDRESS = "127.0.0.1:7342"


def curl_examples() -> list[str]:
    return [block for block in BLOCK.findall(DOC.read_text(encoding="utf-8")) if "curl " in block]


def json_values(text: str) -> list[dict[str, object]]:
    """The JSON objects printed one after the other (curl adds no newline)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def test_the_curl_examples_run(served: Server, client: httpx2.Client, tmp_path: Path) -> None:
    program("curl")  # the examples run `curl` from PATH
    examples = curl_examples()
    assert len(examples) >= 8
    script = "\n".join(f"printf '\\n--- example {index}\\n'\n{block}" for index, block in enumerate(examples))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(DOCUMENTED_ADDRESS, served.address)],
        cwd=tmp_path, env=served.box.env_with(PATH=f"{SBUF.parent}{os.pathsep}{os.environ['PATH']}"),
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    outputs = [part.strip() for part in re.split(r"^--- example \d+\n", done.stdout, flags=re.MULTILINE)[1:]]
    assert len(outputs) == len(examples)
    listed, created, edited, stale, lifecycle, approved, searched, recalled, _openapi = outputs
    assert isinstance(json.loads(listed), list)
    assert re.fullmatch(r"/v1/records/[0-9a-f-]{36}", created)
    assert json.loads(edited)["title"] == "Releases ship on Wednesdays"
    assert stale.endswith("\n412") and '"revision_conflict"' in stale
    assert [value["status"] for value in json_values(lifecycle)] == ["archived", "active"]
    assert (json.loads(approved)["outcome"], json.loads(approved)["status"]) == ("accepted", "active")
    assert "stormbuffer-retrieval-mode: hybrid" in searched.lower()
    assert json.loads(searched.split("\n\n", 1)[1])[0]["title"] == "Releases ship on Wednesdays"
    envelope = json.loads(recalled)
    assert envelope["ok"] and envelope["result"]["receipt"]["retrieval_mode"] == "hybrid"
    assert json.loads((tmp_path / "stormbuffer-openapi.json").read_text()) == client.get("/openapi.json").json()


def test_every_path_of_the_api_is_documented(client: httpx2.Client) -> None:
    text = DOC.read_text(encoding="utf-8")
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        for method in operations:
            assert re.search(rf"^\| {method.upper()} \| `{re.escape(path)}[`?]", text, re.MULTILINE), (method, path)
