"""The HTTP door: the kit against a running `sbuf serve` and against servers it starts itself, and
`HttpClient` against a real server on a loopback port (one per module, on the contract store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.client import HttpClient, ProtocolFailure, parse_envelope, result_model
from stormbuffer.conformance import select
from stormbuffer.conformance.doors import Served
from stormbuffer.conformance.store import ThrowawayStore

from .conftest import BIN
from .test_client import ACTIVE_ID, EXAMPLES, MISSING_ID, to_microseconds
from .test_kit import conformance

READS = ("search", "context", "get")


SERVED_ENV: dict[str, str] = {}  # the environment of the user the served server runs as


@pytest.fixture(scope="module")
def served(caller_env: dict[str, str]) -> Iterator[Served]:
    """`sbuf --project serve` on a free port, in a fresh copy of the contract store."""
    with ThrowawayStore(caller_env) as store:
        place = store.place()
        server = Served([str(BIN / "sbuf")], place)
        SERVED_ENV.update(place.env)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(scope="module")
def client(served: Served) -> Iterator[HttpClient]:
    with HttpClient(served.url, env=SERVED_ENV) as http:  # that user's credential
        yield http


def failed(report: dict[str, object]) -> list[str]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return [f"{check['id']}: {check['reason']}" for check in checks if not check["passed"]]


def test_the_kit_passes_against_a_running_server(served: Served, caller_env: dict[str, str]) -> None:
    # the kit reads the credential of the user it runs as: here, the server's
    config = str(Path(SERVED_ENV["HOME"], ".config"))
    done = conformance("--http", served.url, "--json", env={**caller_env, "XDG_CONFIG_HOME": config})
    report = json.loads(done.stdout)
    assert failed(report) == [] and done.returncode == 0
    ids = [check["id"] for check in report["checks"]]
    assert ids == [check.id for check in select({"http"})]
    assert {"http.host", "http.origin", "http.sanitized", "http.transport", "http.behaviour.receipt"} <= set(ids)
    assert not any(i.startswith(("http.example.", "http.behaviour.secret-guard")) for i in ids)  # need the store


def test_the_kit_serves_its_own_store_and_compares_http_with_invoke(caller_env: dict[str, str]) -> None:
    sbuf = str(BIN / "sbuf")
    before = set(Path(caller_env["TMPDIR"]).iterdir())  # other fixtures of this module may hold stores
    done = conformance("--http-serve", sbuf, "--invoke", sbuf, "-k", "http.*", "-k", "equivalence.http.*", "--json",
                       env=caller_env)  # fmt: skip
    report = json.loads(done.stdout)
    assert failed(report) == [] and done.returncode == 0
    ids = {check["id"] for check in report["checks"]}
    assert len([i for i in ids if i.startswith("http.example.")]) == len(EXAMPLES)
    assert len([i for i in ids if i.startswith("equivalence.http.")]) == len(EXAMPLES)
    assert {"http.behaviour.secret-guard", "http.behaviour.scope-filter", "http.bounds.output-limit"} <= ids
    assert set(Path(caller_env["TMPDIR"]).iterdir()) == before  # the throwaway store and its servers are gone


def test_http_and_http_serve_are_exclusive(caller_env: dict[str, str]) -> None:
    done = conformance("--http", "http://127.0.0.1:1", "--http-serve", "sbuf", env=caller_env)
    assert done.returncode == 2 and "either --http or --http-serve" in done.stderr
    done = conformance("--http", "127.0.0.1:7342", env=caller_env)
    assert done.returncode == 2 and "URL" in done.stderr


def test_http_client_returns_models(client: HttpClient) -> None:
    """Before the examples below, which archive and supersede this record."""
    record = client.get(id=ACTIVE_ID).root  # type: ignore[attr-defined]
    assert record.id == ACTIVE_ID and record.title == "Release builds use the committed lockfile"
    hits = client.search(query="release lockfile", limit=1).root  # type: ignore[attr-defined]
    assert [hit.record_id for hit in hits] == [ACTIVE_ID]
    assert client.context(query="release lockfile", budget=64).receipt.retrieval_mode == "lexical"  # type: ignore[attr-defined]
    with pytest.raises(ProtocolFailure) as failure:
        client.get(id=MISSING_ID)
    assert (failure.value.operation, failure.value.code) == ("get", "not_found")
    assert failure.value.message == "record was not found"


# Reads first: the writes change the server's store, which a later read would see.
IN_ORDER = sorted(EXAMPLES, key=lambda path: (path.parent.name not in READS, path))


@pytest.mark.parametrize("path", IN_ORDER, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_http_client_round_trips_every_example(path: Path, client: HttpClient) -> None:
    operation, example = path.parent.name, json.loads(path.read_text(encoding="utf-8"))
    envelope = client.envelope(operation, example["request"])
    if operation in READS:
        assert envelope["ok"] is example["response"]["ok"]
    if not envelope["ok"]:
        with pytest.raises(ProtocolFailure) as failure:
            parse_envelope(operation, envelope)
        assert (failure.value.code, failure.value.message) == (envelope["error"]["code"], envelope["error"]["message"])
        if operation in READS:
            assert failure.value.code == example["response"]["error"]["code"]
        return
    result = parse_envelope(operation, envelope)
    assert isinstance(result, result_model(operation))
    assert result.model_dump(mode="json", exclude_unset=True, by_alias=True) == to_microseconds(envelope["result"])
