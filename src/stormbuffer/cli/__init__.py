"""The human `sbuf` command line."""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point. `sbuf --version` answers before the command machinery is imported."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .. import __version__

        print(f"sbuf {__version__}")
        raise SystemExit(0)
    from ..threads import limit_math_threads
    from .main import main as run

    limit_math_threads()
    run()
