"""What every team test shares: the team server's MCP and HTTP clients run on asyncio."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
