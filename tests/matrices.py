"""Checks of a store's vector matrix files against the projection they describe."""

from __future__ import annotations

import sqlite3

import numpy as np

from stormbuffer.core.records import STATUSES
from stormbuffer.core.stores import StorePaths
from stormbuffer.index import projection as pj
from stormbuffer.index import vectors


def current_matrix(paths: StorePaths) -> vectors.Matrix:
    with sqlite3.connect(paths.index_path) as conn:
        layout = vectors.Layout.parse(pj.get_settings(conn)[pj.VECTOR_FILES])
    matrix = vectors.load(paths.index_path, layout)
    assert matrix is not None
    return matrix


def assert_matrix_matches_projection(paths: StorePaths) -> vectors.Matrix:
    """Every chunk has exactly one live row, in chunk order, holding its stored vector and its record's
    status; every other row is dead."""
    matrix = current_matrix(paths)
    with sqlite3.connect(paths.index_path) as conn:
        stored = conn.execute(
            "SELECT c.id, v.vector, r.status FROM chunks c JOIN vectors v ON v.embed_hash = c.embed_hash "
            "JOIN records r ON r.id = c.record_id ORDER BY c.id"
        ).fetchall()
    live = np.flatnonzero(matrix.rows["status"] != vectors.DEAD)
    assert list(matrix.rows["chunk"][live]) == [chunk for chunk, _, _ in stored]
    assert list(matrix.rows["status"][live]) == [STATUSES.index(status) for _, _, status in stored]
    dimension = matrix.segments[0].shape[1]
    expected = np.array([np.frombuffer(blob, dtype="<f4") for _, blob, _ in stored]).reshape(len(stored), dimension)
    assert np.array_equal(matrix.vectors(live), expected)
    assert list(matrix.rows["chunk"]) == sorted(matrix.rows["chunk"])
    return matrix
