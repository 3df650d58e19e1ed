"""How many candidates a search through the HNSW index considers, as a real PostgreSQL with pgvector
applies the reader's settings."""

from __future__ import annotations

import psycopg
import pytest

from stormbuffer.engines.postgresql.projection import hnsw_settings


@pytest.mark.parametrize(("take", "ef_search"), [(1, "100"), (40, "100"), (100, "100"), (200, "200"), (4000, "1000")])
def test_a_search_considers_at_least_100_candidates_and_at_most_pgvectors_bound(
    postgres_url: str, take: int, ef_search: str
) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("LOAD 'vector'")  # pgvector's settings are known, so a wrong value would be refused
        for statement in hnsw_settings(take).split("; "):
            conn.execute(statement)
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == (ef_search,)
        assert conn.execute("SHOW hnsw.iterative_scan").fetchone() == ("relaxed_order",)
        conn.rollback()
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("40",)  # SET LOCAL: the transaction's own
