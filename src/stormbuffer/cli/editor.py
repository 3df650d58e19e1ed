"""The editor round trip shared by `add`, `propose`, `edit` and `supersede`.

The record is written to a new private temp file, `$VISUAL` (else `$EDITOR`) runs on it as a single
program name with the file as its only argument, and the result is parsed as a canonical record.
The temp file is removed in every case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ..core.codec import parse_markdown, render_markdown
from ..core.errors import RecordError, StormbufferError
from ..core.records import Record, validate

EDITOR_CONTEXT = "<editor>"
DRAFT_CONTEXT = "<draft>"


class EditorFailed(StormbufferError):
    """The editor could not run, failed, or left text that is not a valid record."""


def configured_editor(env: Mapping[str, str]) -> str | None:
    return env.get("VISUAL") or env.get("EDITOR") or None


def edit_text(data: bytes, env: Mapping[str, str]) -> Record:
    """Let the user edit canonical Markdown and return the record it now holds."""
    editor = configured_editor(env)
    if editor is None:
        raise EditorFailed("set $VISUAL or $EDITOR to edit records")
    path = _write_temp(data)
    try:
        try:
            completed = subprocess.run([editor, str(path)], env=dict(env), check=False)
        except OSError as exc:
            raise EditorFailed(f"could not start the record editor: {exc.strerror or type(exc).__name__}") from None
        if completed.returncode != 0:
            raise EditorFailed(f"record editor exited unsuccessfully: {_describe_exit(completed.returncode)}")
        edited = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    try:
        return parse_markdown(edited, EDITOR_CONTEXT)
    except RecordError as exc:
        raise EditorFailed(f"editor output is not a valid record: {exc}") from None


def review_draft(draft: Record, env: Mapping[str, str], *, complete: bool) -> Record:
    """Open a new record's draft in the editor.

    A draft whose options already gave it its content (`complete`) is used as it is when no editor is
    configured, so that scripts can write records without one.
    """
    if complete and configured_editor(env) is None:
        validate(draft, DRAFT_CONTEXT)
        return draft
    return edit_text(render_markdown(draft, DRAFT_CONTEXT).encode(), env)


def _write_temp(data: bytes) -> Path:
    path = Path(tempfile.gettempdir()) / f"stormbuffer-edit-{os.getpid()}-{time.time_ns()}.md"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        number = -returncode
        try:
            return f"signal: {number} ({signal.Signals(number).name})"
        except ValueError:
            return f"signal: {number}"
    return f"exit status: {returncode}"
