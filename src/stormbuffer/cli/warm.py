"""`sbuf add` and `sbuf list` through a running daemon, when one serves this install.

The daemon's repository keeps a watcher on the store and its projection open, so it checks only
what changed since its last look; this process would stat every record file and load the tokenizer
and NumPy first. The daemon makes the same repository call and its failures come back as the same
errors, so the output is the same either way. No daemon is started for this: without one running
(or with `STORMBUFFER_NO_DAEMON`), the command runs here.
"""

from __future__ import annotations

import errno
import os

from ..core.codec import render_markdown
from ..core.errors import NotInitialized, StormbufferError
from ..core.records import Record, RecordSummary
from ..core.repository import Repository
from .context import current

STOPPED = "the memory daemon stopped before answering; check with `sbuf list` before adding it again"
INTERNAL = "the memory daemon could not answer; see `sbuf daemon status`"


def add(repository: Repository, record: Record) -> Record:
    """Store a human-authored record (`Repository.add`), through the daemon when one serves."""
    reply = _ask("add", render_markdown(record).encode("utf-8"))
    if reply is None:
        return repository.add(record)
    _raise_failure(reply)
    return record


def listing(repository: Repository) -> tuple[list[RecordSummary], list[tuple[str, str]]]:
    """Every record's summary and the invalid files (`Repository.listing`), through the daemon when one serves."""
    reply = _ask("list", b"")
    if reply is None or reply.get("failure") == "stopped":  # a read: safe to run again here
        return repository.listing()
    _raise_failure(reply)
    return [RecordSummary._make(row) for row in reply["summaries"]], [(path, why) for path, why in reply["invalid"]]


def _ask(operation: str, payload: bytes) -> dict | None:
    """The daemon's reply; None when no daemon took the command."""
    from ..daemon import relay

    cli = current()
    env = dict(cli.env)
    if cli.lock_wait is not None:
        env["STORMBUFFER_LOCK_WAIT"] = str(cli.lock_wait)
    try:
        return relay.human(operation, cli.view.value, payload, env)
    except relay.Unreachable:
        return None


def _raise_failure(reply: dict) -> None:
    """Raise the error the daemon reported, as the repository would have raised it here."""
    if reply.get("ok") is True:
        return
    failure = reply.get("failure")
    if failure == "not_initialized":
        raise NotInitialized()
    if failure == "no_space":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if failure == "error":
        raise StormbufferError(str(reply.get("message")))
    raise StormbufferError(STOPPED if failure == "stopped" else INTERNAL)
