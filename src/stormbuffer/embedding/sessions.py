"""onnxruntime sessions over a cached model, and the optimized graph that makes opening one cheap.

Most of the time spent creating a session from `model.onnx` goes into optimising the graph (folding
the int8-stored weights into float32, fusing layers) and copying the weights onto the heap.
Acquisition does that once and saves the result beside the model: `optimized.onnx`, with its
weights in `optimized.onnx.data`, which onnxruntime maps from disk instead of copying. A process
then opens the saved graph with optimisation switched off; the vectors are the same.

The saved graph is derived data: it is used only by the onnxruntime build that wrote it, and when
it is missing, changed or unreadable the session is made from `model.onnx`, only more slowly.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from stormbuffer.core.atomic import fsync_directory, fsync_path

from .errors import EmbedderInitError
from .manifest import FileRecord, ModelManifest, OptimizedGraph, stat_problems

if TYPE_CHECKING:
    import onnxruntime

MODEL_FILE = "model.onnx"
OPTIMIZED_FILE = "optimized.onnx"
OPTIMIZED_DATA = "optimized.onnx.data"
OPTIMIZED_NAMES = (OPTIMIZED_FILE, OPTIMIZED_DATA)
# Weights from this size up go to OPTIMIZED_DATA (mapped); smaller ones stay in the graph file.
EXTERNAL_MIN_BYTES = 1024
# Fusions left out when optimising: onnxruntime's fused SkipLayerNormalization took 8-10 % of a
# pass on this model, its Add and LayerNormalization apart about 2 % (bench/graph_speed.py).
SKIPPED_FUSIONS = ["SkipLayerNormFusion"]
_team_server = False  # set by `for_team_server`
_forking = False  # set by `for_team_server(forking=True)`


def runtime() -> ModuleType:
    """onnxruntime, imported with its telemetry off unless the user chose otherwise
    (`ORT_DISABLE_TELEMETRY`): on import it would write a session file into the temp directory of
    every machine that runs us, and queue events to send."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    return onnxruntime


def runtime_tag() -> str:
    """The onnxruntime build (version and machine) a saved graph belongs to: its fused operators are theirs."""
    onnxruntime = runtime()
    return f"onnxruntime {onnxruntime.__version__} {os.uname().machine}"


def open_session(directory: Path, manifest: ModelManifest) -> tuple[onnxruntime.InferenceSession, str]:
    """A session over the saved optimized graph when the manifest vouches for it, else over `model.onnx`.

    Returns the session and the name of the graph file it was made from. The caller holds the
    shared lock. Raises EmbedderInitError when not even `model.onnx` loads.
    """
    if _optimized_usable(directory, manifest):
        try:
            return _session(directory / OPTIMIZED_FILE, optimize=False), OPTIMIZED_FILE
        except Exception:  # onnxruntime's own exception types: the model file still works
            pass
    try:
        return _session(directory / MODEL_FILE, optimize=True), MODEL_FILE
    except Exception as exc:
        raise EmbedderInitError("the cached embedding model cannot be loaded; run `sbuf init` to repair it") from exc


def write_optimized_graph(directory: Path) -> OptimizedGraph:
    """Optimise `model.onnx` in `directory` and save the result beside it; the caller holds the
    exclusive lock. Each file is written in a temporary folder, synced and renamed into place."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=directory, prefix=".optimize-") as temp:
        graph = Path(temp) / OPTIMIZED_FILE
        options = _options(optimize=True)
        options.optimized_model_filepath = str(graph)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", OPTIMIZED_DATA)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", str(EXTERNAL_MIN_BYTES)
        )
        _create(directory / MODEL_FILE, options, optimize=True)
        for name in (OPTIMIZED_DATA, OPTIMIZED_FILE):  # the graph last: it names the data file
            fsync_path(Path(temp) / name)
            os.replace(Path(temp) / name, directory / name)
    fsync_directory(directory)
    return OptimizedGraph(runtime_tag(), {name: FileRecord.of(directory / name) for name in OPTIMIZED_NAMES})


def _optimized_usable(directory: Path, manifest: ModelManifest) -> bool:
    optimized = manifest.optimized
    return (
        optimized is not None and optimized.runtime == runtime_tag() and not stat_problems(optimized.files, directory)
    )


def _session(graph: Path, *, optimize: bool) -> onnxruntime.InferenceSession:
    return _create(graph, _options(optimize=optimize), optimize=optimize)


def _create(graph: Path, options: onnxruntime.SessionOptions, *, optimize: bool) -> onnxruntime.InferenceSession:
    onnxruntime = runtime()
    return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"],
                                        disabled_optimizers=SKIPPED_FUSIONS if optimize else None)  # fmt: skip


def _options(*, optimize: bool) -> onnxruntime.SessionOptions:
    """Options for short queries and sync batches alike. Extended optimisation is the level whose
    result can be saved: the level above adds only layout changes for convolutions, none here."""
    onnxruntime = runtime()

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = (
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if optimize
        else onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.intra_op_num_threads = _threads()
    options.inter_op_num_threads = 1
    # With more than one thread, idle threads block instead of spinning between operators: on a
    # shared machine spinning took both more CPU and more wall time per query (two threads, two cores).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only
    options.enable_cpu_mem_arena = not _team_server
    return options


def for_team_server(*, forking: bool) -> None:
    """Open this process's later sessions for a team server (its one process, or the main process of
    several workers before they fork): without onnxruntime's memory arena, which would keep the
    largest batch the process ever embedded (bench/embedding_arena.py: a write of 16 long chunks left
    276 MB with it, 209 MB without, at the same CPU a query). `forking`: the session is opened before
    worker processes fork, so with one intra-op thread, and onnxruntime starts no thread of its own (a
    forked child would lack it; the workers are the parallelism); and each worker's embedders run every
    document embedding on its writer thread (`writer_thread`), one batch at a time. One process keeps
    them on the asking thread: there the writer thread cost writes (queued behind the reads' batches)
    and saved no memory (docs/team.md, "Memory of one process")."""
    global _team_server, _forking
    _team_server = True
    _forking = _forking or forking


def documents_on_writer() -> bool:
    """Whether this process's embedders run document embeddings on the writer thread (a team server's
    workers, `for_team_server(forking=True)`)."""
    return _forking


def described() -> str:
    """This process's model settings, for a server's log."""
    arena = "off" if _team_server else "on"
    documents = "writer" if _forking else "caller"
    return f"model_arena={arena} model_threads={_threads()} document_embeddings={documents}"


def _threads() -> int:
    """Half the cores, at most 4: a store is used alongside editors, agents and builds, and on a busy
    machine extra intra-op threads make onnxruntime slower, not faster (one core of two here). One
    before worker processes fork (`for_team_server`)."""
    return 1 if _forking else max(1, min(4, (os.cpu_count() or 2) // 2))


def bulk_workers() -> int:
    """Model calls a bulk embedding runs at once: enough sessions' threads to use every core, at most 4
    (one query is one call and uses the session's threads alone)."""
    return max(1, min(4, (os.cpu_count() or 2) // _threads()))
