"""The editor round trip shared by `add`, `propose`, `edit` and `supersede`.

The record is written to a new private temp file, `$VISUAL` (else `$EDITOR`) runs on it (the
command split into words as a shell would, so `code --wait` works; the file is its last argument),
the result is parsed as a canonical record and saved. The temp file is removed in every case; text
the user typed that could not be saved is kept as a draft (`drafts_dir`)."""

from __future__ import annotations

import itertools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import click

from ..core.codec import parse_markdown, render_markdown
from ..core.dirs import PRIVATE_FILE_MODE, claim_private, make_private
from ..core.errors import RecordError, StoreError, StormbufferError
from ..core.records import Record, validate
from .text import one_line

T = TypeVar("T")
NO_EDITOR = "set $VISUAL or $EDITOR to edit records"


class EditorFailed(StormbufferError):
    """The editor could not run, failed, or left text that is not a valid record."""


def configured_editor(env: Mapping[str, str]) -> str | None:
    """The editor command: `$VISUAL`, else `$EDITOR`, else None."""
    return env.get("VISUAL") or env.get("EDITOR") or None


def editor_words(editor: str) -> list[str]:
    """The editor command split into words as a shell splits them."""
    try:
        words = shlex.split(editor)
    except ValueError as exc:
        raise EditorFailed(f"could not read $VISUAL or $EDITOR as a command: {exc}") from None
    if not words:
        raise EditorFailed(NO_EDITOR)
    return words


def shown_editor(words: list[str]) -> str:
    """The editor command as errors name it: the program's file name (no directory) and its arguments."""
    return one_line(shlex.join([Path(words[0]).name, *words[1:]]))


def edit_text(data: bytes, env: Mapping[str, str], save: Callable[[Record], T]) -> T:
    """Let the user edit canonical Markdown, then `save` the record it holds and return what it returns.

    Typed text is never thrown away: when it is not a valid record, or `save` fails, it is kept as a
    draft file (its path printed on stderr) before the error is raised. On a terminal, invalid text
    can be reopened in the editor instead.
    """
    editor = configured_editor(env)
    if editor is None:
        raise EditorFailed(NO_EDITOR)
    words = editor_words(editor)
    path = _write_temp(data)
    try:
        while True:
            edited = _run_editor(words, path, env, data)
            try:
                record = parse_markdown(edited)
            except RecordError as exc:
                problem = f"editor output is not a valid record: {exc.detail}"
                try:
                    again = _reopen(problem)
                except KeyboardInterrupt:  # Ctrl-C at the question: exit 130, the text kept
                    _keep(edited, env)
                    raise
                if again:
                    continue
                _keep(edited, env)
                raise EditorFailed(problem) from None
            try:
                return save(record)
            except (StormbufferError, OSError):
                _keep(edited, env)
                raise
    finally:
        path.unlink(missing_ok=True)


def review_draft(draft: Record, env: Mapping[str, str], save: Callable[[Record], T], *, complete: bool) -> T:
    """Open a new record's draft in the editor, then `save` it (see `edit_text`).

    A draft whose options already gave it its content (`complete`) is saved as it is when no editor is
    configured, so that scripts can write records without one; without either, the error says so.
    """
    if configured_editor(env) is None:
        if not complete:
            raise EditorFailed(f"{NO_EDITOR}, or give the memory's text with --body (and --title)")
        validate(draft)
        return save(draft)
    return edit_text(render_markdown(draft).encode(), env, save)


def drafts_dir(env: Mapping[str, str]) -> Path:
    """Where kept drafts go: `$XDG_STATE_HOME/stormbuffer/drafts` (default `~/.local/state/...`);
    without a home, `stormbuffer-<uid>/drafts` in the temp directory."""
    state = env.get("XDG_STATE_HOME") or (str(Path(env["HOME"], ".local", "state")) if env.get("HOME") else None)
    if state:
        return Path(state, "stormbuffer", "drafts")
    return Path(tempfile.gettempdir(), f"stormbuffer-{os.geteuid()}", "drafts")


def _private_drafts_dir(env: Mapping[str, str]) -> Path:
    """`drafts_dir`, created private; in the temp directory, where anyone could have made it first,
    its parent must be this user's private directory (StoreError otherwise)."""
    directory = drafts_dir(env)
    if env.get("XDG_STATE_HOME") or env.get("HOME"):
        make_private(directory.parent)
    else:
        claim_private(directory.parent, "temporary drafts directory", "HOME or XDG_STATE_HOME")
    return make_private(directory)


def _run_editor(words: list[str], path: Path, env: Mapping[str, str], original: bytes) -> bytes:
    """Run the editor on `path`; the text it left. A failed editor keeps any text it changed."""
    try:
        completed = subprocess.run([*words, str(path)], env=dict(env), check=False)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EditorFailed(f"could not start the record editor `{shown_editor(words)}`: {reason}") from None
    edited = path.read_bytes()
    if completed.returncode != 0:
        if edited != original:
            _keep(edited, env)
        shown = shown_editor(words)
        raise EditorFailed(f"record editor `{shown}` exited unsuccessfully: {_describe_exit(completed.returncode)}")
    return edited


def _reopen(problem: str) -> bool:
    """On a terminal, whether the user wants the editor again on the same text after `problem`."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    click.echo(problem, err=True)
    try:
        return click.confirm("Reopen the editor on the same text?", default=True, err=True)
    except click.Abort as exc:  # end of input declines; Ctrl-C interrupts (the text is kept as a draft)
        click.echo(err=True)
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        return False


def _keep(data: bytes, env: Mapping[str, str]) -> Path | None:
    """Save typed text as a new private draft file and say where it is (or why it could not be kept)."""
    try:
        directory = _private_drafts_dir(env)
        stem = f"draft-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for attempt in itertools.count():
            path = directory / (f"{stem}.md" if attempt == 0 else f"{stem}-{attempt}.md")
            try:  # a new file only: never one that exists, nor a link
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
            except FileExistsError:
                continue
            break
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except (StoreError, OSError) as exc:
        reason = str(exc) if isinstance(exc, StoreError) else exc.strerror or type(exc).__name__
        click.echo(f"Your text could not be kept as a draft: {reason}", err=True)
        return None
    click.echo(f"Your text was kept in {path}", err=True)
    return path


def _write_temp(data: bytes) -> Path:
    """A new private file `stormbuffer-edit-<pid>-<nanoseconds>.md` in the temp directory holding `data`
    (never a file or link someone made first: another name is tried)."""
    while True:
        path = Path(tempfile.gettempdir()) / f"stormbuffer-edit-{os.getpid()}-{time.time_ns()}.md"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        except FileExistsError:
            continue
        break
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
