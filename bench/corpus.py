"""Deterministic, realistic record stores for the scale benchmark.

Records look like an engineering team's memory: four kinds, lengths from one sentence to several
sections, tags and aliases from a shared vocabulary, Markdown headings, lists and code fences.
Everything derives from a seed, so a size always produces the same files.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from stormbuffer.core.codec import render_markdown
from stormbuffer.core.records import KINDS, Record, Source
from stormbuffer.core.timestamps import Timestamp

SEED = 702
SETTLED_NS = 3600 * 1_000_000_000  # files are backdated an hour: nobody is editing them

SYSTEMS = [
    "billing service",
    "auth gateway",
    "search cluster",
    "payments queue",
    "mobile app",
    "web frontend",
    "data warehouse",
    "CI pipeline",
    "deploy tooling",
    "feature flags",
    "notification worker",
    "cache layer",
    "image resizer",
    "analytics export",
    "admin console",
    "rate limiter",
    "email relay",
    "backup job",
    "ledger database",
    "session store",
    "config service",
    "metrics agent",
    "log shipper",
    "sso bridge",
]
ACTIONS = [
    "times out",
    "leaks memory",
    "retries forever",
    "drops events",
    "double charges",
    "returns stale data",
    "blocks the event loop",
    "fails health checks",
    "exhausts connections",
    "misses its SLO",
    "rejects valid tokens",
    "corrupts the cursor",
    "floods the pager",
    "skips migrations",
]
CAUSES = [
    "a missing index",
    "an unbounded retry loop",
    "clock skew between hosts",
    "a race in the lock handling",
    "an expired certificate",
    "a full disk on the replica",
    "a misconfigured load balancer",
    "a stale DNS entry",
    "a schema change without a backfill",
    "a dependency upgrade",
    "too small a pool size",
    "a regional network partition",
    "a cache stampede after deploys",
    "an unhandled null in the payload",
]
FIXES = [
    "add a composite index",
    "cap retries with jitter",
    "sync clocks with chrony",
    "take the lock earlier",
    "rotate the certificate monthly",
    "alert at eighty percent disk",
    "pin the health check path",
    "lower the DNS TTL",
    "backfill before flipping the flag",
    "pin the dependency version",
    "raise the pool to fifty connections",
    "fail over to the secondary region",
    "warm the cache before traffic",
    "validate payloads at the edge",
]
PEOPLE = ["Ana", "Bilal", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kemal", "Lucia"]
TAGS = [
    "ops",
    "incident",
    "security",
    "performance",
    "frontend",
    "backend",
    "data",
    "release",
    "oncall",
    "infra",
    "testing",
    "docs",
    "cost",
    "compliance",
    "mobile",
    "api",
]
CODE = ["```bash\nkubectl rollout restart deploy/{slug}\nkubectl rollout status deploy/{slug}\n```",
        "```sql\nCREATE INDEX CONCURRENTLY idx_{slug}_created ON {slug} (account_id, created_at);\n```",
        "```python\nfor attempt in range(5):\n    if try_once():\n        break\n    sleep(2 ** attempt)\n```",
        "```yaml\n{slug}:\n  replicas: 3\n  timeout_seconds: 30\n```"]  # fmt: skip


def _slug(system: str) -> str:
    return system.replace(" ", "_")


SIZES = ("short", "medium", "long")


def make_record(index: int, scope: str, size: str | None = None) -> Record:
    """Record number `index` of the benchmark corpus (pure function of the index and the seed).

    `size` ("short": one chunk of a few sentences; "long": sections, lists and code, several chunks)
    overrides the mix of sizes the corpus draws from.
    """
    rng = random.Random(SEED * 1_000_003 + index)
    kind = KINDS[index % len(KINDS)]
    system, action, cause, fix = rng.choice(SYSTEMS), rng.choice(ACTIONS), rng.choice(CAUSES), rng.choice(FIXES)
    person = rng.choice(PEOPLE)
    title = {
        "fact": f"The {system} {action} under load",
        "decision": f"Decision: {fix} for the {system}",
        "procedure": f"How to recover the {system} when it {action}",
        "checkpoint": f"Checkpoint: {system} work by {person}",
    }[kind] + f" ({index})"
    sentences = [
        f"The {system} {action} because of {cause}.",
        f"{person} confirmed the root cause during the review.",
        f"The agreed fix is to {fix}.",
        f"Until then, watch the dashboards of the {rng.choice(SYSTEMS)} as well.",
        f"Related: the {rng.choice(SYSTEMS)} sometimes {rng.choice(ACTIONS)} for the same reason.",
        f"Owners should {rng.choice(FIXES)} when traffic doubles.",
    ]
    drawn = rng.choices(SIZES, weights=[5, 4, 1])[0]
    size = size or drawn
    parts = [" ".join(sentences[: rng.randint(1, 3)])]
    if size != "short":
        parts.append(" ".join(rng.sample(sentences, len(sentences))))
        parts.append("\n".join(f"- {rng.choice(sentences)}" for _ in range(rng.randint(2, 5))))
    if size == "long":
        for heading in ("## Context", "## Steps", "## Follow-up"):
            parts.append(heading)
            parts.append(" ".join(rng.choice(sentences) for _ in range(rng.randint(6, 14))))
        parts.append(rng.choice(CODE).format(slug=_slug(system)))
    now = Timestamp.parse(f"2026-0{1 + index % 9}-{10 + index % 18}T0{index % 10}:00:00Z")
    return Record(
        id=str(uuid.UUID(int=(0x0190_0000_0000_7000_8000_0000_0000_0000 | index))),
        title=title, kind=kind, scope=scope, status="active" if index % 17 else "archived", access="agent",
        created_at=now, updated_at=now, tags=tuple(sorted(set(rng.sample(TAGS, rng.randint(1, 3))))),
        aliases=(f"{_slug(system)}-{index}",) if index % 5 == 0 else (),
        sources=(Source("conversation", f"session-{index // 50}", "human"),), body="\n\n".join(parts) + "\n",
    )  # fmt: skip


def write_store(
    records_dir: Path, scope: str, count: int, progress: Callable[[int], None] | None = None, size: str | None = None
) -> None:
    """Write records 0..count-1 (of one `size`, else the corpus mix) as canonical Markdown with settled
    (backdated) mtimes."""
    records_dir.mkdir(parents=True, exist_ok=True)
    settled = time.time_ns() - SETTLED_NS
    for index in range(count):
        record = make_record(index, scope, size)
        path = records_dir / f"{record.id}.md"
        path.write_text(render_markdown(record), encoding="utf-8")
        os.utime(path, ns=(settled, settled))
        if progress is not None and (index + 1) % 500 == 0:
            progress(index + 1)


QUERIES = [
    "billing service double charges",
    "why does the auth gateway reject valid tokens",
    "expired certificate",
    "how to recover the search cluster",
    "cap retries with jitter",
    "connection pool exhausted on the ledger database",
    "who found the root cause of the cache stampede",
    "kubectl rollout restart",
    "decision about DNS TTL",
    "stale data after deploys",
    "backup job fails health checks because the disk is full",
    "payments queue drops events during network partition",
    "what should owners do when traffic doubles",
    "mobile app blocks the event loop",
    "schema change without a backfill broke the data warehouse",
    "rate limiter misses its SLO",
]
