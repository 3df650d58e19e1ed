"""A team server worker's document embeddings run on its one writer thread (`embedding/writer_thread.py`),
its queries' on the thread that asks: in a real process with the real model opened as a worker opens it,
writes from several threads at once give the vectors the model gives on the caller's thread, their
model passes take the CPU of one other thread, a query's its own; a forked child starts its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from stormbuffer.embedding import DEFAULT_VARIANT

WRITERS = 4
TIMEOUT_S = 300.0  # a guard against a hung process, never a speed assertion
CHILD = """
import json, os, sys, threading, time
from pathlib import Path
import numpy as np
from stormbuffer.embedding import load_embedder, sessions
from stormbuffer.embedding.writer_thread import THREAD_NAME

cache = Path(sys.argv[1])
words = "the release pipeline checks the magnetar before tuesday deploys. it rolls back on failure. ".split()
texts = [" ".join(words[(n + i) % len(words)] for i in range(150)) for n in range(16)]
spans = [[(0, 40), (41, 120)] for _ in texts]
alone = load_embedder(cache)  # on the caller's thread, with this process's own session
expected = alone.embed_spans(texts, spans)
query = "when does the release pipeline roll back"
expected_query = alone.embed([query])

sessions.for_team_server(forking=True)
worker = load_embedder(cache)

def same(got):
    return bool(np.array_equal(got[0], expected[0])
                and all(np.array_equal(a, b) for a, b in zip(got[1], expected[1], strict=True)))

writes = {}
def write(number):
    cpu = time.thread_time()
    got = worker.embed_spans(texts, spans)
    writes[number] = {"same": same(got), "own_cpu_s": time.thread_time() - cpu}
process_cpu = time.process_time()
threads = [threading.Thread(target=write, args=(n,)) for n in range(int(sys.argv[2]))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
process_cpu = time.process_time() - process_cpu

asked = {}
def ask():
    process, own = time.process_time(), time.thread_time()
    for _ in range(20):
        vector = worker.embed([query])
    asked.update(same=bool(np.array_equal(vector, expected_query)), own_cpu_s=time.thread_time() - own,
                 process_cpu_s=time.process_time() - process)
thread = threading.Thread(target=ask)
thread.start()
thread.join()

pid = os.fork()
if pid == 0:
    os._exit(0 if same(worker.embed_spans(texts, spans)) else 3)
forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps({"writes": list(writes.values()), "writes_cpu_s": process_cpu, "query": asked, "forked": forked,
                  "writer_threads": sum(t.name.startswith(THREAD_NAME) for t in threading.enumerate())}))
"""


def test_writes_embed_on_one_thread_and_queries_where_asked(model_cache: Callable[[str], Path]) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(model_cache(DEFAULT_VARIANT)),
                           str(WRITERS)], capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [write["same"] for write in found["writes"]] == [True] * WRITERS
    assert found["writer_threads"] == 1
    # the writing threads only waited: the passes took another thread's CPU
    assert sum(write["own_cpu_s"] for write in found["writes"]) < 0.1 * found["writes_cpu_s"]
    assert found["query"]["same"]
    assert found["query"]["own_cpu_s"] > 0.5 * found["query"]["process_cpu_s"]  # a query's pass ran where asked
    assert found["forked"] == 0  # the child embedded on a writer thread of its own


def test_a_call_on_the_writer_thread_sees_its_callers_context() -> None:
    """A call handed to the writer thread runs there, in a copy of its caller's context variables."""
    import contextvars
    import threading

    from stormbuffer.embedding.writer_thread import THREAD_NAME, WriterThread

    caller = contextvars.ContextVar("caller", default="unset")
    writer = WriterThread()

    def seen() -> tuple[str, str]:
        return threading.current_thread().name, caller.get()

    caller.set("the request's")
    name, value = writer.run(seen)
    assert name.startswith(THREAD_NAME)
    assert value == "the request's"
