r"""Put a mechanism's exact likelihood for a released ``y`` into a PyMC model.

``observe(name, mechanism, x, observed=y)`` adds ``log p(y | x)`` from ``mechanism.logp``
(NumPy/PyTensor alike), as an observed ``CustomDist`` whose random generator is the
mechanism's own ``release`` -- so ``pm.sample_posterior_predictive`` draws releases with
exactly the curator's law.

Mechanisms without a closed-form density (projected Laplace, Subspace DP Cor. 17) declare an
``augmentation`` (:class:`~privinfer.mechanisms.Augmentation`: ``dim`` and ``logp(y, x, r)``,
the joint density of the release and the row-space part ``r``
of the raw Laplace noise (``e = (y - x) + R r``, ``R`` an orthonormal row-space basis,
``p(e) = prod_i Lap(e_i)``).  For those, ``observe`` adds the free latent ``f"{name}_r"``
(dimension ``rank C``) and the augmented density as a Potential; marginalizing ``r`` gives
the exact likelihood.  Posterior predictive draws of such a release are made with
:func:`posterior_predictive_releases`.

Pointwise log-likelihood (model comparison)
-------------------------------------------
The observed variable's log-density is the vector of the mechanism's pointwise terms
(:meth:`~privinfer.mechanisms.Mechanism.logp_terms`), whose sum is ``log p(y | x)``; so
``pm.sample(idata_kwargs={"log_likelihood": True})`` and ``pm.compute_log_likelihood`` store
one value per term, and ``az.loo`` / ``az.compare`` leave out one term at a time (PSIS-LOO,
Vehtari, Gelman and Gabry 2017, needs :math:`p(y\mid x) = \prod_k p(y_k \mid x)`).  The split
follows the noise (``mechanism.loglik_factorization``):

* ``"cell"`` -- noise independent across released entries (Gaussian and Laplace, Subspace DP
  full paper Lemma 13 / 16; double geometric and discrete Gaussian; the canonical noise
  mechanisms, Awan and Vadhan 2023; noisy measurements, one term per measurement, Abowd et
  al. 2022 Sec. 5; linear Gaussian releases with diagonal covariance):
  :math:`l_i = \log p(y_i \mid x)`, one per entry, on the release's dimension (``dims``);
* ``"group"`` -- a partition invariant (totals of disjoint groups :math:`S_g`) with noise on
  its null space, which is the product of the groups' sum-zero subspaces, so the noise is
  independent across groups but correlated within one (projected and extended Gaussian,
  Subspace DP full paper Cor. 14 / 15: :math:`l_g = -\|e_g - \bar e_g 1\|^2/(2s^2) -
  \tfrac{|S_g|-1}{2}\log(2\pi s^2)`, :math:`e = y - x`; projected Laplace, Cor. 17, whose
  integral over the row space factorizes by group; generalized Laplace (l1) and generalized
  Gaussian on the invariant's lattice, Dharangutte et al. 2023 Def. 9 / 13, whose lattice is
  the product of the groups' sum-zero lattices: :math:`l_g = -\epsilon\|e_g\|_1/\Delta` or
  :math:`-\|e_g\|^2/(2\sigma^2)`, normalizer dropped as in ``logp``): one term per group
  (dimension ``f"{name}_dim_0"``);
* ``"joint"`` -- anything else (correlated Gaussian, K-norm, extended Laplace, generalized
  Laplace with the l2 norm, invariants that are not partitions): the one term :math:`\log p(y\mid x)`; LOO then has one observation.

A release with an augmented likelihood (projected Laplace, Cor. 17) enters as a Potential of
the joint density of ``y`` and ``r``, which is not a density of ``y`` alone: it has no
observed variable, so PyMC's log-likelihood group holds nothing for it.
:func:`add_augmented_log_likelihood` adds its terms from the posterior draws of ``x`` with
the mechanism's NumPy ``logp_terms`` (exact per group for partition invariants, where the
integral over ``r`` factorizes by group).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from ..invariants import InfeasibleInvariantError
from ..mechanisms import Mechanism
from .registry import ObservedRelease, model_registry

__all__ = ["observe", "posterior_predictive_releases", "add_augmented_log_likelihood"]


def _check_release(mechanism, y, latent_info):
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a privinfer mechanism, not {type(mechanism).__name__}")
    m = mechanism.m
    y = np.asarray(y)
    if y.shape != (m,):
        raise ValueError(f"observed release must have shape ({m},), got {y.shape}")
    if not np.all(np.isfinite(y.astype(float))):
        raise ValueError("observed release contains non-finite entries")
    if mechanism.integer and np.any(y != np.round(y)):
        raise ValueError("observed release of an integer mechanism must hold integers")
    inv_m = mechanism.invariant
    # measurements of other queries (m != n, e.g. NoisyMeasurements) keep nothing: their
    # invariant's values are published beside them and enter through the latent's fibre
    if inv_m is not None and latent_info is not None and m == mechanism.n:
        # every x on the latent's fibre has the same C_m x when C_m's rows lie in the row
        # space of the latent's invariant; the release must reproduce it exactly
        x0 = np.asarray(latent_info.point, dtype=float)
        t_m = inv_m.of(x0)
        if not inv_m.satisfied_by(y.astype(float), t_m):
            raise InfeasibleInvariantError(
                "the release does not satisfy the mechanism's invariant at the published "
                "invariant values t (C y != t): t and the release are inconsistent"
            )
    return y


def observe(name: str, mechanism, x, observed, *, dims=None, model=None):
    r"""Condition the model on the released ``observed = y`` through ``mechanism``'s likelihood.

    ``x`` is the latent confidential vector (a tensor: from :func:`affine_latent`,
    :func:`lattice_latent`, or any model expression of length ``mechanism.n``).  Returns
    the observed variable (or, for augmented likelihoods, the auxiliary latent ``r``).
    ``dims`` names the release's dimension (its coordinates in the model's ``coords``).

    The observed variable's log-density is the vector of pointwise terms
    :math:`l_k(y, x)` with :math:`\sum_k l_k = \log p(y\mid x)` -- one per released entry,
    per invariant group, or one joint term (module docstring) -- so ``pm.compute_log_likelihood``
    gives what ``az.loo`` needs.
    """
    model = pm.modelcontext(model)
    reg = model_registry(model)
    xname = x.name if isinstance(x, pt.TensorVariable) else None
    info = reg["lattice"].get(xname) or reg["affine"].get(xname)
    y = _check_release(mechanism, observed, info)
    dtype = "int64" if mechanism.integer else "float64"
    y = y.astype(dtype)
    if info is not None:
        info.releases.append(ObservedRelease(name, mechanism, y))

    aug = mechanism.augmentation
    if aug is not None:
        r = pm.Flat(f"{name}_r", shape=(aug.dim,))
        pm.Potential(f"{name}_loglik", aug.logp(pt.as_tensor_variable(y), x, r))
        return r

    def logp(value, xx, *_):
        # the pointwise terms (module docstring): PyMC sums them for the model's density and
        # keeps them apart in the log-likelihood group
        return mechanism.logp_terms(value, xx)

    def random(xx, *_, rng=None, size=None):
        xx = np.asarray(xx)
        if size:
            xx = np.broadcast_to(xx, tuple(np.atleast_1d(size)) + xx.shape[-1:])
        return np.asarray(mechanism.release(np.array(xx), rng=rng)).astype(dtype)

    m = mechanism.m
    if m == mechanism.n:
        return pm.CustomDist(name, x, logp=logp, random=random, observed=y, signature="(n)->(n)", dtype=dtype,
                             dims=dims)
    # a release of another length (y = B x + noise): a second, shape-only parameter of
    # length m lets PyTensor infer the support shape from the signature
    return pm.CustomDist(name, x, pt.zeros(m), logp=logp, random=random, observed=y,
                         signature="(n),(m)->(m)", dtype=dtype, dims=dims)


def posterior_predictive_releases(mechanism, x_draws, rng=None) -> np.ndarray:
    """Releases ``mechanism.release(x)`` for each posterior draw of ``x`` (shape (..., n))."""
    from .._rng import as_generator

    rng = as_generator(rng)
    return np.asarray(mechanism.release(np.asarray(x_draws), rng=rng))


def add_augmented_log_likelihood(idata, model=None):
    r"""Add the pointwise log-likelihood of every release observed with an augmented likelihood
    to ``idata.log_likelihood`` (beside what ``pm.compute_log_likelihood`` stores); returns
    ``idata``.

    For each such release ``y`` of a latent ``x`` (made by :func:`affine_latent` or
    :func:`lattice_latent`), the terms :math:`l_k(y, x^{(s)})` of ``mechanism.logp_terms`` at
    every posterior draw :math:`x^{(s)}` -- the marginal :math:`\log\int p(y, r\mid x)\,dr`,
    split as the mechanism's ``loglik_factorization`` says (module docstring).  Raises
    ``NotImplementedError`` where the mechanism has no NumPy marginal (projected Laplace on a
    non-partition invariant of rank > 2).
    """
    import xarray as xr

    model = pm.modelcontext(model)
    reg = model_registry(model)
    found = {}
    for info in list(reg["lattice"].values()) + list(reg["affine"].values()):
        for rel in info.releases:
            if rel.mechanism.augmentation is None:
                continue
            draws = idata.posterior[info.name]
            x = draws.values.reshape((-1, draws.shape[-1]))
            terms = np.asarray(rel.mechanism.logp_terms(rel.y, x), dtype=float)
            terms = terms.reshape(draws.shape[:2] + terms.shape[-1:])
            found[rel.name] = xr.DataArray(terms, dims=("chain", "draw", f"{rel.name}_dim_0"),
                                           coords={"chain": draws["chain"], "draw": draws["draw"]})
    if not found:
        return idata
    if "log_likelihood" in idata.groups():
        idata.log_likelihood = idata.log_likelihood.assign(found)
    else:
        idata.add_groups({"log_likelihood": xr.Dataset(found)})
    return idata
