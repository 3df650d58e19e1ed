"""Focused context on a store of everyday team notes: blocks given to off-topic and on-topic queries.

Thirteen short notes of the kind a team keeps (a cache's TTL, the on-call rotation, the logging
format, how releases go out, …) are written to a fresh store; each query then runs through the
real `context` core (hybrid, real model, budget 256 as `sbuf context --budget 256` would) twice:
with the focus rule (`retrieval.focus`) and without it (every ranked hit offered to the budget, as
before the rule). Off-topic queries are about nothing the notes hold; on-topic queries each name
the note that answers them. The notes and queries were written once, before any threshold was
looked at, and are not tuned to it.

Reports, per query set, the blocks given before and after and, for on-topic queries, whether the
answering note is still the first block and still given. Prints a table; writes
bench/results/focus.json.

Usage: python bench/focus.py [--work DIR] [--budget 256]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from machine import save  # noqa: E402
from quality import CREATED, new_store, record, write_records  # noqa: E402

from stormbuffer.core.records import Source
from stormbuffer.core.stores import record_scope
from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import ContextOptions, context
from stormbuffer.retrieval.focus import Focus

RESULTS = Path(__file__).parent / "results" / "focus.json"
CONTEXT_MODULE = importlib.import_module("stormbuffer.retrieval.context")  # the package exports `context` the function

NOTES = {
    "redis": (
        "Redis session cache TTL",
        "Session keys in Redis expire after 24 hours. The TTL is set in "
        "config/cache.yaml; raise it only together with the cookie lifetime.",
    ),
    "oncall": (
        "On-call rotation",
        "On-call rotates every Monday at 10:00. The schedule lives in PagerDuty; swap "
        "shifts by asking in #ops and updating the calendar yourself.",
    ),
    "logging": (
        "Logging format",
        "Services log one JSON object per line with ts, level, msg and request_id. "
        "Never log tokens or passwords; the shipper drops lines over 16 KB.",
    ),
    "release": (
        "Release process",
        "We deploy from main with the release workflow: tag vX.Y.Z, wait for the "
        "canary for 30 minutes, then promote to all regions. Roll back by re-deploying the previous tag.",
    ),
    "postgres": (
        "Postgres migrations",
        "Migrations run with alembic upgrade head before the new version starts. "
        "Every migration must be backwards compatible with the running release.",
    ),
    "reviews": (
        "Code review rule",
        "Every pull request needs one approving review; changes to auth or billing "
        "need two. Keep pull requests under 400 lines where possible.",
    ),
    "flags": (
        "Feature flags",
        "Flags live in LaunchDarkly. Remove a flag within two sprints of its full rollout "
        "and delete the dead branch of code with it.",
    ),
    "standup": (
        "Standup time",
        "Daily standup is at 9:30 in the small meeting room or on the team call. Keep "
        "updates to what changed and what blocks you.",
    ),
    "secrets": (
        "Secrets handling",
        "Secrets come from Vault at start-up. Never commit .env files; the pre-commit "
        "hook rejects anything that looks like a key.",
    ),
    "pytest": (
        "Running the tests",
        "Run the unit tests with pytest -q; the integration tests need docker compose "
        "up first and take about six minutes.",
    ),
    "timezone": (
        "Timestamps",
        "Store every timestamp in UTC and convert to the user's time zone only when "
        "rendering. The API accepts RFC 3339 only.",
    ),
    "laptop": (
        "New laptop setup",
        "Install the VPN client, request GitHub access from IT, then clone the monorepo and run make bootstrap.",
    ),
    "incident": (
        "Incident reviews",
        "Write an incident review within five working days of any customer-facing "
        "outage; the template is in the wiki under Operations.",
    ),
}

OFF_TOPIC = [
    "best pizza places in Naples",
    "how long should I boil an egg",
    "what is the capital of Mongolia",
    "marathon training plan for beginners",
    "explain quantum entanglement simply",
    "knitting pattern for a wool scarf",
    "who won the 1998 football world cup",
    "how do I repot an orchid",
    "recommend a science fiction novel",
    "symptoms of a cold versus the flu",
]

ON_TOPIC = {
    "how do we deploy": "release",
    "how long do sessions stay in the cache": "redis",
    "who is on call this week and how do I swap a shift": "oncall",
    "what fields does a log line have": "logging",
    "how many approvals does a pull request need": "reviews",
    "where do secrets come from": "secrets",
    "how do I run the integration tests": "pytest",
    "what time zone should timestamps be stored in": "timezone",
}


def blocks(paths: Any, query: str, embedder: Any, budget: int, focused: bool) -> list[str]:
    """The note keys of the blocks `context` gives, with or without the focus rule."""
    rule = CONTEXT_MODULE.focus
    if not focused:
        CONTEXT_MODULE.focus = lambda hits, mode: Focus(hits, 0)
    try:
        result = context([paths], query, ContextOptions(budget=budget), embedder=embedder)
    finally:
        CONTEXT_MODULE.focus = rule
    return [block.hit.title for block in result.blocks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, help="directory for the model cache and the store")
    parser.add_argument("--budget", type=int, default=256)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-focus-"))
    acquire_model(work / "model-cache")
    embedder = load_embedder(work / "model-cache")
    paths = new_store(work / f"store-{time.time_ns()}")
    scope = record_scope(paths)
    write_records(paths, [record(f"note:{key}", scope, title, body + "\n", Source("document", f"team:{key}", "team"),
                                 CREATED) for key, (title, body) in NOTES.items()])  # fmt: skip
    sync_store(paths, embedder)
    title_of = {title: key for key, (title, _body) in NOTES.items()}
    rows: dict[str, list[dict[str, Any]]] = {"off_topic": [], "on_topic": []}
    for query in OFF_TOPIC:
        before, after = (blocks(paths, query, embedder, args.budget, focused) for focused in (False, True))
        rows["off_topic"].append({"query": query, "before": len(before), "after": len(after),
                                  "kept": [title_of[title] for title in after]})  # fmt: skip
    for query, key in ON_TOPIC.items():
        before, after = (blocks(paths, query, embedder, args.budget, focused) for focused in (False, True))
        kept = [title_of[title] for title in after]
        row = {"query": query, "answer": key, "before": len(before), "after": len(after)}
        rows["on_topic"].append(row | {"answer_given": key in kept, "answer_first": kept[:1] == [key], "kept": kept})
    summary = {
        name: {
            "queries": len(found),
            "blocks_before_mean": round(sum(row["before"] for row in found) / len(found), 2),
            "blocks_after_mean": round(sum(row["after"] for row in found) / len(found), 2),
            "blocks_after_max": max(row["after"] for row in found),
            **(
                {
                    "answer_given": sum(row["answer_given"] for row in found),
                    "answer_first": sum(row["answer_first"] for row in found),
                }
                if name == "on_topic"
                else {}
            ),  # fmt: skip
        }
        for name, found in rows.items()
    }
    for name, found in rows.items():
        print(f"{name}:")
        for row in found:
            print(f"  {row['before']:>2} -> {row['after']:>2}  {row['query']}  {row['kept']}")
        print(f"  {summary[name]}")
    save(RESULTS, {"notes": len(NOTES), "budget": args.budget, "model": embedder.model_version, "summary": summary,
                   "queries": rows})  # fmt: skip


if __name__ == "__main__":
    main()
