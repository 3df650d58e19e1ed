"""The online source, against a loopback HTTP server: verification, resume, failures, a working model."""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from blake3 import blake3

from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, ModelUnavailable, load_embedder, verify_model
from stormbuffer.embedding.cache import DOWNLOAD_DIR, MODELS_DIR, acquire, built_dir_name
from stormbuffer.embedding.download import DEFAULT_BASE_URL, Artifact, artifact_url, download_artifacts

from .loopback import Loopback

MIB = 1 << 20


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def artifacts_for(files: dict[str, bytes]) -> list[Artifact]:
    return [Artifact(name, blake3(data).hexdigest()) for name, data in files.items()]


FILES = {"model.onnx": payload(3 * MIB, 1), "config.json": b'{"hidden_size": 384}'}


def test_the_default_location_is_the_pinned_reference_revision() -> None:
    assert artifact_url(DEFAULT_BASE_URL, "model.onnx") == (
        "https://huggingface.co/Qdrant/all-MiniLM-L6-v2-onnx/resolve/"
        "5f1b8cd78bc4fb444dd171e59b18f3a3af89a079/model.onnx?download=true"
    )


def test_downloads_and_verifies_every_artifact(tmp_path: Path) -> None:
    messages: list[str] = []
    with Loopback(dict(FILES)) as site:
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url, progress=messages.append)
        assert [(r.path, r.query, r.range) for r in site.requests] == [
            ("model.onnx", "download=true", None),
            ("config.json", "download=true", None),
        ]
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)  # already present and verified
        assert len(site.requests) == 2
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == FILES
    assert messages == ["downloading model.onnx", "downloading config.json"]


def test_a_corrupted_download_is_refused_and_discarded(tmp_path: Path) -> None:
    served = dict(FILES, **{"model.onnx": FILES["model.onnx"][:-1] + b"!"})
    with Loopback(served) as site, pytest.raises(ModelUnavailable) as failure:
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    assert str(failure.value) == (
        "downloaded `model.onnx` does not match its pinned blake3 hash; the download was discarded"
    )
    assert list(tmp_path.iterdir()) == []  # neither the artifact nor its .part


def test_a_partial_download_is_resumed_with_a_range_request(tmp_path: Path) -> None:
    data = FILES["model.onnx"]
    (tmp_path / "model.onnx.part").write_bytes(data[: 3 * MIB // 2])
    with Loopback(dict(FILES)) as site:
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    first = site.requests[0]
    assert (first.range, first.bytes_sent) == (f"bytes={3 * MIB // 2}-", len(data) - 3 * MIB // 2)
    assert (tmp_path / "model.onnx").read_bytes() == data
    assert not (tmp_path / "model.onnx.part").exists()


def test_a_server_that_ignores_range_restarts_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.onnx.part").write_bytes(b"stale bytes from another attempt")
    with Loopback(dict(FILES), honour_range=False) as site:
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    assert site.requests[0].bytes_sent == len(FILES["model.onnx"])
    assert (tmp_path / "model.onnx").read_bytes() == FILES["model.onnx"]


def test_an_interrupted_transfer_keeps_its_part_and_the_next_attempt_resumes(tmp_path: Path) -> None:
    cut = 3 * MIB // 2
    with Loopback(dict(FILES), cut_after={"model.onnx": cut}) as site:
        with pytest.raises(ModelUnavailable, match=r"downloading `model.onnx` failed \(the transfer ended early\)"):
            download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
        assert (tmp_path / "model.onnx.part").read_bytes() == FILES["model.onnx"][:cut]
        site.cut_after.clear()
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    assert site.requests[-2].range == f"bytes={cut}-"
    assert (tmp_path / "model.onnx").read_bytes() == FILES["model.onnx"]


def test_a_complete_part_answered_with_416_is_verified_and_kept(tmp_path: Path) -> None:
    (tmp_path / "model.onnx.part").write_bytes(FILES["model.onnx"])
    with Loopback(dict(FILES)) as site:
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    assert site.requests[0].range == f"bytes={len(FILES['model.onnx'])}-"
    assert (tmp_path / "model.onnx").read_bytes() == FILES["model.onnx"]


def test_http_and_network_errors_are_reported(tmp_path: Path) -> None:
    with Loopback({}) as site, pytest.raises(ModelUnavailable, match=r"`model.onnx` failed \(HTTP 404\)"):
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=site.url)
    with socket.socket() as probe:  # a loopback port that nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ModelUnavailable, match=r"failed \(network error: .*refused"):
        download_artifacts(tmp_path, artifacts_for(FILES), base_url=f"http://127.0.0.1:{port}/x")


def test_online_acquisition_yields_a_working_embedder(
    token_state_model: bytes,
    offline_source,
    wq8: Embedder,
    model_cache: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """No package installed: the prebuilt export (token states only) is downloaded and pooled in NumPy."""
    files = {"model.onnx": token_state_model}
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
        files[name] = (offline_source.directory / name).read_bytes()
    with Loopback(files) as site:
        manifest = acquire(tmp_path, DEFAULT_VARIANT, offline_sources=[], artifacts=artifacts_for(files),
                           base_url=site.url)  # fmt: skip
    assert not (tmp_path / MODELS_DIR / built_dir_name(DEFAULT_VARIANT)).exists()
    assert set(manifest.files) == set(files)
    assert manifest.variant == "qdrant" and manifest.model_version.startswith("onnx-qdrant/sha256:")
    assert manifest.source_hashes["model.onnx"] == f"blake3:{blake3(token_state_model).hexdigest()}"
    assert not [p for p in (tmp_path / MODELS_DIR / DOWNLOAD_DIR).iterdir() if p.suffix == ".part"]

    embedder = load_embedder(tmp_path)
    texts = ["A cat sits on the mat.", "Pooling happens outside the graph for this model.", "ok"]
    assert np.abs(embedder.embed(texts) - wq8.embed(texts)).max() < 1e-5
    assert embedder.model_version == manifest.model_version
    assert verify_model(tmp_path) == []
