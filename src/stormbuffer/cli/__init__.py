"""The human `sbuf` command line."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Console entry point. `sbuf --version` answers before the command machinery is imported, and
    `sbuf [view] invoke <operation>` (what agent hooks run on every prompt) without click."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .. import __version__

        print(f"sbuf {__version__}")
        raise SystemExit(0)
    from ..threads import limit_math_threads

    limit_math_threads()
    from .oneshot import direct_invocation, run_invoke

    direct = direct_invocation(sys.argv[1:])
    if direct is not None:
        view, operation = direct
        try:
            status = run_invoke(operation, view, os.environ)
        except KeyboardInterrupt:
            status = 130
        except BrokenPipeError:  # the reader went away; there is no one left to tell
            status = 1
        raise SystemExit(status)
    try:
        from .main import main as run

        run()
    except KeyboardInterrupt:  # Ctrl-C before the command machinery could report it
        raise SystemExit(130) from None
