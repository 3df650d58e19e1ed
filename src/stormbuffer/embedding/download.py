"""Online model source: the prebuilt ONNX export pinned by the reference implementation.

Each artifact streams to `<name>.part` (resumed with an HTTP Range request when a partial file
exists), is verified against its pinned blake3 hash and only then renamed into place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from stormbuffer.core.atomic import fsync_directory

from .errors import ModelUnavailable
from .files import CHUNK_BYTES, blake3_file

REPOSITORY = "Qdrant/all-MiniLM-L6-v2-onnx"
REVISION = "5f1b8cd78bc4fb444dd171e59b18f3a3af89a079"
DEFAULT_BASE_URL = f"https://huggingface.co/{REPOSITORY}/resolve/{REVISION}"
MAX_ARTIFACT_BYTES = 512 << 20
TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Artifact:
    """A file to download and the blake3 hash it must have."""

    name: str
    blake3: str


PINNED_ARTIFACTS = (
    Artifact("model.onnx", "e07600e571df4aa8bd2397774731baf10c97574e8ccc128ed2c58113d739bda6"),
    Artifact("tokenizer.json", "43e7f76ab347da19c09233073ccddd0e4d07eb8070ced05f89569bc43a1bad9e"),
    Artifact("config.json", "a5da27b3980f2ccd664d65b98b4de6e72d34134ca1a29218bf5c8c67ee10d121"),
    Artifact("special_tokens_map.json", "eaff0d8331fbe475d3ba22934ad574aa0f23b5b7a9e547f0105a82d050ab31fc"),
    Artifact("tokenizer_config.json", "b2b8a921b78c685752ca02cd84eb526057c5ea435eb07ef91538d442c32912a7"),
)


def artifact_url(base_url: str, name: str) -> str:
    return f"{base_url.rstrip('/')}/{quote(name)}?download=true"


def download_artifacts(
    dest: Path,
    artifacts: Sequence[Artifact] = PINNED_ARTIFACTS,
    *,
    base_url: str = DEFAULT_BASE_URL,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Make every artifact present and verified in `dest`; raises ModelUnavailable on any failure.

    Artifacts already present with the right hash are kept. A `.part` file survives an interrupted
    transfer (so the next call resumes it) but is deleted when the finished file fails verification.
    """
    import http.client  # the HTTP modules load only when something is downloaded

    dest.mkdir(parents=True, exist_ok=True)
    for artifact in artifacts:
        final = dest / artifact.name
        if final.is_file() and blake3_file(final) == artifact.blake3:
            continue
        if progress:
            progress(f"downloading {artifact.name}")
        part = dest / (artifact.name + ".part")
        try:
            _fetch(artifact_url(base_url, artifact.name), part)
        except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
            raise ModelUnavailable(
                f"downloading `{artifact.name}` failed ({_describe(exc)}); run `sbuf init` again to resume"
            ) from exc
        if blake3_file(part) != artifact.blake3:
            part.unlink()
            raise ModelUnavailable(
                f"downloaded `{artifact.name}` does not match its pinned blake3 hash; the download was discarded"
            )
        os.replace(part, final)
        fsync_directory(dest)


def _fetch(url: str, part: Path) -> None:
    """Stream `url` into `part`, continuing an existing partial file when the server allows it."""
    import urllib.error
    import urllib.request

    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "stormbuffer"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            return  # the partial file is already complete; verification decides
        raise
    with response:
        if response.status == 206:
            if _range_start(response.headers.get("Content-Range")) != offset:
                part.unlink()
                raise ValueError("the server answered with an unexpected byte range")
            mode, written = "ab", offset
        elif response.status == 200:
            mode, written = "wb", 0
        else:
            raise ValueError(f"unexpected HTTP status {response.status}")
        length = response.headers.get("Content-Length")
        expected = written + int(length) if length and length.isdigit() else None
        with part.open(mode) as out:
            while chunk := response.read(CHUNK_BYTES):
                written += len(chunk)
                if written > MAX_ARTIFACT_BYTES:
                    part.unlink()
                    raise ValueError("the file is larger than any model artifact")
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    if expected is not None and written != expected:
        raise ValueError("the transfer ended early")


def _range_start(content_range: str | None) -> int | None:
    match = re.fullmatch(r"bytes (\d+)-\d+/(?:\d+|\*)", (content_range or "").strip())
    return int(match.group(1)) if match else None


def _describe(exc: BaseException) -> str:
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"network error: {exc.reason}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # never the file name: it is a host path
    return str(exc) or type(exc).__name__
