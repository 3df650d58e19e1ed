"""Process-wide thread settings that must be made before NumPy is first imported."""

from __future__ import annotations

import os


def limit_math_threads() -> None:
    """One BLAS thread unless the user chose otherwise (`OPENBLAS_NUM_THREADS`).

    Nothing here multiplies matrices through BLAS (vector search uses single-threaded dot
    products), and starting BLAS's thread pool costs tens of milliseconds when NumPy is imported.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
