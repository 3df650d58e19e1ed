"""The test session's PostgreSQL server: pgvector present, a fresh database per test, passwords enforced."""

from __future__ import annotations

import psycopg
import pytest

from tests.postgres import PostgresServer


def test_each_database_is_fresh_and_has_pgvector(postgres_server: PostgresServer, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        (version,) = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone() or ("",)
        assert tuple(int(part) for part in version.split(".")) >= (0, 8, 0)
        conn.execute("CREATE TABLE items (embedding vector(3))")
        conn.execute("INSERT INTO items VALUES ('[1,0,0]'), ('[0,1,0]')")
        (nearest,) = conn.execute("SELECT embedding::text FROM items ORDER BY embedding <=> '[0.9,0.1,0]' LIMIT 1")
        assert nearest == ("[1,0,0]",)
    other = postgres_server.create_database()
    assert other != postgres_url
    with psycopg.connect(other) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'items'").fetchone() == (0,)


def test_the_loopback_port_wants_the_password(postgres_server: PostgresServer, postgres_url: str) -> None:
    database = postgres_url.split("@/", 1)[1].split("?", 1)[0]
    with psycopg.connect(postgres_server.tcp_url(database)) as conn:
        assert conn.execute("SELECT inet_server_addr()::text").fetchone() == ("127.0.0.1/32",)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(postgres_server.tcp_url(database, password="wrong"), connect_timeout=10)
