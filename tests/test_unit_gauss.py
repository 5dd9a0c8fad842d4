"""The compiled per-unit Gaussian maps (privinfer.pymc.unit_gauss) against NumPy's dense
Cholesky factorization and solves of the same systems."""

import numpy as np
import pytest

from privinfer.pymc.unit_gauss import transport, transport_coordinates


def _systems(U=7, k=5, seed=0, rank=None, per_unit=False):
    """``per_unit``: one row of precisions per unit ``(U, k)`` (a walk's mixed prior variances)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((U, k, k if rank is None else rank))
    Q = A @ np.swapaxes(A, 1, 2)                  # rank < k: singular information, as for a unit of few people
    p = np.exp(rng.standard_normal((U, k) if per_unit else k))
    return Q, rng.standard_normal((U, k)), rng.standard_normal((U, k)), p


@pytest.mark.parametrize("rank, per_unit", [(None, False), (2, False), (0, False), (2, True)])
def test_transport_equals_the_dense_solves(rank, per_unit):
    # per_unit: unit u's P_u = Q_u + diag(p_u)
    Q, b, xi, p = _systems(rank=rank, per_unit=per_unit)
    P = Q + np.eye(b.shape[1])[None] * np.broadcast_to(p, b.shape)[:, None, :]
    R = np.linalg.cholesky(P)
    want = np.linalg.solve(P, b[..., None])[..., 0] + np.einsum("uk,ukl->ul", xi, np.linalg.inv(R))
    got, logdet = transport(Q, b, xi, p)
    # 5 x 5 well-conditioned systems (precisions e^N(0,1) added to the diagonal): the two
    # orders of operations agree to a few ulps of the entries' size
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert logdet == pytest.approx(0.5 * np.linalg.slogdet(P)[1].sum(), rel=1e-12)
    assert np.allclose(transport_coordinates(Q, b, got, p), xi, rtol=1e-12, atol=1e-12)


def test_a_matrix_that_is_not_positive_definite_is_an_error():
    Q, b, xi, p = _systems(rank=0)
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        transport(Q, b, xi, np.r_[p[:-1], 0.0])                   # a zero precision on a zero information
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        transport_coordinates(Q, b, xi, np.r_[p[:-1], np.nan])
    with pytest.raises(ValueError, match="transport needs"):
        transport(Q, b[:, :-1], xi, p)
