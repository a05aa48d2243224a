"""How a batch's records are held to a lone run's: what holds on every machine.

A batch and a lone run draw the same tokens with the same uniform numbers through the same stages, but their
float32 numbers may differ in the last digits: a CPU's matrix kernels (torch's BLAS, MLX's) are chosen by the
number of rows, so a product over three rows rounds differently from one over one row (seen: 3.7e-6 on one
machine, 0 on another). So the records are held equal in everything discrete and within `RTOL`/`ATOL` in every
float; two candidates in a near tie (logits within the tolerance) may trade places.
"""

from __future__ import annotations

import numpy as np

from app.core.record.record import Sample

RTOL, ATOL = 1e-4, 1e-5  # float32 rounding of a 2-layer model's logits, with a wide margin


def assert_same_record(x: Sample, y: Sample, where: str = "") -> None:
    """`x` and `y` drew the same token the same way, and recorded the same numbers within the tolerance."""
    assert (x.token, x.u, x.stage_names) == (y.token, y.u, y.stage_names), where
    np.testing.assert_allclose(x.values, y.values, rtol=RTOL, atol=ATOL, err_msg=f"{where}: values")
    swapped = x.top_ids != y.top_ids  # only where the two candidates' logits tie within the tolerance
    np.testing.assert_allclose(x.top_logits[swapped], y.top_logits[swapped], rtol=RTOL, atol=ATOL,
                               err_msg=f"{where}: top_ids")
    n = x.kept.shape[-1]  # the stages' candidates: the first n of top_ids
    np.testing.assert_array_equal(x.kept[:, ~swapped[:n]], y.kept[:, ~swapped[:n]], err_msg=f"{where}: kept")
    assert x.rank == y.rank or swapped.any(), where
