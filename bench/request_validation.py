"""Cost of validating one request against its `schema/v1` request schema in a fresh process.

`sbuf invoke` validates exactly one request per process, so what counts is the first check: the
imports it triggers, reading and compiling the schema files, and the check itself. Each run is a
new interpreter that has already imported what `sbuf invoke` has by then (`pathlib`,
`stormbuffer.protocol.schemas`) and times, on a valid request:

- `predicate`: importing `stormbuffer.protocol.predicates` and `predicates.accepts` (what
  `requests.check_schema` runs for `sbuf invoke` and the MCP adapter);
- `jsonschema`: `schemas.validator(name).is_valid` (the Draft 2020-12 validator, which
  `check_schema` uses only to explain an invalid request).

A second, warm check in the same process is reported beside the first. Results print as a table
and are saved to bench/results/request_validation.json with the machine's load average.

Usage: python bench/request_validation.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "request_validation.json"
REQUESTS = {
    "context": {"version": 1, "query": "database migration", "budget": 512},
    "propose": {
        "version": 1,
        "record": {
            "title": "Reindex after changing the embedding model",
            "kind": "procedure",
            "body": "Run `sbuf reindex` after switching the embedding model.",
            "created_at": "2026-03-14T09:30:00-05:00",
            "sources": [{"kind": "document", "reference": "docs/embedding.md#reindex", "actor": "agent"}],
        },
    },
}
CHECKS = {
    "predicate": "from stormbuffer.protocol import predicates; assert predicates.accepts(NAME, REQUEST)",
    "jsonschema": "assert schemas.validator(NAME).is_valid(REQUEST)",
}
PROGRAM = """
import json, pathlib, sys, time
from stormbuffer.protocol import schemas
NAME, REQUEST = sys.argv[1] + ".request", json.loads(sys.argv[2])
start = time.perf_counter()
{check}
first = time.perf_counter()
{check}
warm = time.perf_counter()
print(json.dumps({{"first_ms": (first - start) * 1000, "warm_ms": (warm - first) * 1000,
                  "jsonschema_imported": "jsonschema" in sys.modules}}))
"""


def measure(check: str, operation: str, runs: int) -> dict[str, object]:
    samples = []
    for _ in range(runs):
        command = [sys.executable, "-c", PROGRAM.format(check=check), operation, json.dumps(REQUESTS[operation])]
        samples.append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))
    first = [sample["first_ms"] for sample in samples]
    return {
        "first_ms_median": round(statistics.median(first), 2),
        "first_ms_min": round(min(first), 2),
        "warm_ms_median": round(statistics.median(sample["warm_ms"] for sample in samples), 3),
        "jsonschema_imported": samples[0]["jsonschema_imported"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per measurement")
    runs = parser.parse_args().runs
    results = {
        f"{name}/{operation}": measure(check, operation, runs)
        for name, check in CHECKS.items()
        for operation in REQUESTS
    }
    print(f"{'check/operation':<22} {'first median':>13} {'first min':>10} {'warm median':>12}  jsonschema imported")
    for key, row in results.items():
        print(
            f"{key:<22} {row['first_ms_median']:>10.2f} ms {row['first_ms_min']:>7.2f} ms "
            f"{row['warm_ms_median']:>9.3f} ms  {row['jsonschema_imported']}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    document = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "runs": runs,
        "results": results,
    }
    RESULTS.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
