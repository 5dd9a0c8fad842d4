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
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from ..invariants import InfeasibleInvariantError
from ..mechanisms import Mechanism
from .registry import ObservedRelease, model_registry

__all__ = ["observe", "posterior_predictive_releases"]


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
    """Condition the model on the released ``observed = y`` through ``mechanism``'s likelihood.

    ``x`` is the latent confidential vector (a tensor: from :func:`affine_latent`,
    :func:`lattice_latent`, or any model expression of length ``mechanism.n``).  Returns
    the observed variable (or, for augmented likelihoods, the auxiliary latent ``r``).
    ``dims`` names the release's dimension (its coordinates in the model's ``coords``).
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
        return mechanism.logp(value, xx)

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
