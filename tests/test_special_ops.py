"""The PyTensor log-gamma and digamma differences (privinfer.pymc.special_ops): values against
exact sums of logs and reciprocals, gradients against finite differences, and the same
numbers from every backend (Python/C ``perform`` and Numba)."""

import math
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.special import gammaln

from privinfer.pymc.special_ops import DigammaDiff, LgammaRatio, digamma_diff, lgamma_ratio

A = [0.4, 3.0, 9.9, 10.0, 55.5, 2.0e3, 7.0e6, 3.0e10]
X = [0, 1, 2, 9, 60, 400]
MODES = ["FAST_RUN", "NUMBA"]


def _grid():
    a, x = np.meshgrid(np.array(A), np.array(X, dtype=float), indexing="ij")
    return a, x


@pytest.mark.parametrize("mode", MODES)
def test_values_equal_exact_sums(mode):
    # integer x: log Gamma(a + x) - log Gamma(a) = sum_{j<x} log(a + j), psi(a + x) - psi(a) =
    # sum_{j<x} 1/(a + j) (fsum); the series' truncation error is below 1e-10 relative
    a, x = _grid()
    at, xt = pt.matrix("a"), pt.matrix("x")
    f = pytensor.function([at, xt], [lgamma_ratio(at, xt), digamma_diff(at, xt)], mode=mode)
    lr, dd = f(a, x)
    for i, av in enumerate(A):
        for j, xv in enumerate(X):
            exact = math.fsum(math.log(av + k) for k in range(xv))
            assert abs(lr[i, j] - exact) <= 1e-10 * max(1.0, abs(exact))
            exact_d = math.fsum(1.0 / (av + k) for k in range(xv))
            assert abs(dd[i, j] - exact_d) <= 1e-10 * max(exact_d, 1e-300) + 1e-300


@pytest.mark.parametrize("mode", MODES)
def test_gradient_is_the_digamma_difference(mode):
    # d/da of the sum of log Gamma(a + x) - log Gamma(a) against central differences (step
    # 1e-5 a: truncation O(h^2 psi''') below 1e-7 relative at these a); a 2-d input broadcast
    # against a row of x, as the Dirichlet-multinomial uses it
    a0 = np.array([[0.7, 2.5, 12.0], [40.0, 3.0e3, 0.9]])
    x0 = np.array([3.0, 0.0, 17.0])
    at = pt.matrix("a")
    out = lgamma_ratio(at, pt.as_tensor_variable(x0)).sum()
    g = pytensor.function([at], pytensor.grad(out, at), mode=mode)(a0)
    h = 1e-5 * a0
    fd = (gammaln(a0 + h + x0) - gammaln(a0 + h) - gammaln(a0 - h + x0) + gammaln(a0 - h)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_second_derivative_by_finite_differences():
    rng = np.random.default_rng(3)
    pytensor.gradient.verify_grad(lambda a: DigammaDiff()(a, pt.as_tensor_variable(np.array([2.0, 0.0, 9.0]))),
                                  [np.array([0.8, 4.0, 25.0])], rng=rng)
    pytensor.gradient.verify_grad(lambda a: LgammaRatio()(a, pt.as_tensor_variable(np.array([2.0, 0.0, 9.0]))),
                                  [np.array([0.8, 4.0, 25.0])], rng=rng)


def test_numba_backend_runs_natively_and_agrees_with_perform():
    rng = np.random.default_rng(1)
    a = rng.gamma(0.5, 20.0, size=(30, 7)) + 1e-3
    x = rng.poisson(5.0, size=(30, 7)).astype(float)
    at, xt = pt.matrix("a"), pt.matrix("x")
    expr = [lgamma_ratio(at, xt).sum(), pytensor.grad(lgamma_ratio(at, xt).sum(), at)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no object-mode fallback
        fn = pytensor.function([at, xt], expr, mode="NUMBA")
        v_numba = fn(a, x)
    v_py = pytensor.function([at, xt], expr, mode="FAST_RUN")(a, x)
    np.testing.assert_allclose(v_numba[0], v_py[0], rtol=1e-13)
    np.testing.assert_allclose(v_numba[1], v_py[1], rtol=1e-13)
    np.testing.assert_allclose(v_py[0], (gammaln(a + x) - gammaln(a)).sum(), rtol=1e-12)


def test_inputs_of_different_rank_need_the_broadcasting_helper():
    with pytest.raises(ValueError, match="one shape"):
        LgammaRatio()(pt.vector("a"), pt.matrix("x"))
    out = lgamma_ratio(pt.vector("a"), pt.matrix("x"))
    assert out.type.ndim == 2
