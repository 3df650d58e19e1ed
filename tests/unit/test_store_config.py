"""`store.toml`'s engine: a directory store's file stays the reference's, a PostgreSQL store's names the
engine and the variable holding the database URL, and anything else is refused by name."""

from __future__ import annotations

import pytest

from stormbuffer.core.errors import StoreError
from stormbuffer.core.stores import DATABASE_URL_ENV, DIRECTORY, POSTGRESQL, StoreConfig, parse_config

PROJECT = 'format_version = 1\nscope = "project"\nvisibility = "shared"\nproject_id = "f6bfca9d-1ad3-4010-9569-52c214b5d0c9"\nproject_name = "agent-memory"\n'  # noqa: E501


def test_a_directory_store_renders_the_reference_keys_only() -> None:
    config = parse_config(PROJECT, "project")
    assert (config.engine, config.database_url_env) == (DIRECTORY, None)
    assert config.render() == PROJECT


def test_a_postgresql_store_names_the_engine_and_the_variable() -> None:
    text = PROJECT + f'engine = "postgresql"\ndatabase_url_env = "{DATABASE_URL_ENV}"\n'
    config = parse_config(text, "project")
    assert (config.engine, config.database_url_env) == (POSTGRESQL, DATABASE_URL_ENV)
    assert config.render() == text
    team = parse_config(PROJECT + 'engine = "postgresql"\ndatabase_url_env = "TEAM_MEMORY_DB"\n', "project")
    assert team.database_url_env == "TEAM_MEMORY_DB"
    global_store = StoreConfig("global", "private", engine=POSTGRESQL, database_url_env=DATABASE_URL_ENV)
    assert parse_config(global_store.render(), "global") == global_store


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('engine = "sqlite"\ndatabase_url_env = "X"\n', "engine must be `directory` or `postgresql`"),
        ('engine = "postgresql"\n', "database_url_env must name an environment variable"),
        ('engine = "postgresql"\ndatabase_url_env = "postgresql://u:pw@h/db"\n', "must name an environment variable"),
        ('engine = "postgresql"\ndatabase_url_env = "lower_case"\n', "must name an environment variable"),
        ('database_url_env = "STORMBUFFER_DATABASE_URL"\n', "belongs to a store with engine `postgresql`"),
        ('engine = "directory"\ndatabase_url_env = "X"\n', "belongs to a store with engine `postgresql`"),
    ],
)
def test_anything_else_is_refused_by_name(extra: str, message: str) -> None:
    with pytest.raises(StoreError, match=message) as caught:
        parse_config(PROJECT + extra, "project")
    assert "pw@" not in str(caught.value)
