"""``Rescaled``: a free coordinate divided by a constant leaves the variable's law unchanged.

Checked exactly: the density of the free coordinate ``u`` (PyMC's log density with its
Jacobian) integrates to 1 and gives the variable's known mean, by quadrature on a fine grid
(trapezoid error far below the 1e-6 tolerance for these smooth, fast-decaying densities); for
a zero-sum normal, the log density differs from the default transform's by exactly the
Jacobian ``(d - 1) log h`` at every point.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import integrate

from privinfer.pymc import Rescaled


def _density_of_u(model, name):
    value = model.rvs_to_values[model[name]]
    logp = model.compile_logp(jacobian=True)
    return lambda u: float(np.exp(logp({value.name: np.asarray(u)})))


@pytest.mark.parametrize("h", [0.02, 1.0, 7.0])
def test_log_rescaled_half_normal_keeps_its_law(h):
    sigma = 0.7
    with pm.Model() as m:
        pm.HalfNormal("s", sigma=sigma, transform=Rescaled(h))
    assert m.rvs_to_values[m["s"]].name == "s_chain__"
    p = _density_of_u(m, "s")
    # s = exp(h u): the mass sits where |log s| is a few units, i.e. |u| <= 40 / h
    grid = np.linspace(-40.0 / h, 5.0 / h, 4001)
    dens = np.array([p(v) for v in grid])
    assert integrate.trapezoid(dens, grid) == pytest.approx(1.0, abs=1e-6)
    assert integrate.trapezoid(dens * np.exp(h * grid), grid) == pytest.approx(sigma * np.sqrt(2 / np.pi), abs=1e-6)


def test_zero_sum_normal_differs_by_the_jacobian_only():
    d, h = 5, 0.01
    with pm.Model() as plain:
        pm.ZeroSumNormal("t", sigma=3.0, shape=(d,))
    with pm.Model() as scaled:
        pm.ZeroSumNormal("t", sigma=3.0, shape=(d,), transform=Rescaled(h))
    lp0, lp1 = plain.compile_logp(), scaled.compile_logp()
    n0, n1 = plain.rvs_to_values[plain["t"]].name, scaled.rvs_to_values[scaled["t"]].name
    rng = np.random.default_rng(0)
    for _ in range(5):
        u = rng.normal(size=d - 1) * 50
        assert lp1({n1: u}) == pytest.approx(lp0({n0: u * h}) + (d - 1) * np.log(h), abs=1e-9)
    # the same variable: the constrained value is the default transform's at u * h
    f0 = plain.compile_fn(plain.replace_rvs_by_values([plain["t"]])[0])
    f1 = scaled.compile_fn(scaled.replace_rvs_by_values([scaled["t"]])[0])
    u = rng.normal(size=d - 1)
    np.testing.assert_allclose(f1({n1: u}), f0({n0: u * h}), atol=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.inf, np.nan, [1.0, 0.0]])
def test_bad_scales_are_refused(bad):
    with pytest.raises(ValueError, match="Rescaled needs finite scales > 0"):
        Rescaled(bad)
