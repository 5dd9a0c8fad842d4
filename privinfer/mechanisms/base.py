r"""The mechanism protocol shared by every privacy mechanism in privinfer.

A mechanism ``M`` is *transparent*: its noise law is public and does not depend on the
confidential data ``x``, so ``p(y | x)`` is a likelihood the analyst can write down.
Every mechanism object offers

``release(x, rng=None)``
    a privatized output.  If the mechanism has an ``invariant`` (``C x = t``), the output
    satisfies ``C y = C x`` exactly (to floating point for real-valued noise, exactly for
    integer noise).  ``x`` may be one vector of length ``n`` or a stack ``(..., n)``.
``logp(y, x)``
    the log-likelihood ``log p(y | x)``, for NumPy arrays (float/ndarray result) and for
    PyTensor tensors (symbolic result).  Additive constants that do not depend on ``x``
    may be dropped; each mechanism documents what it drops in its docstring and in
    ``logp_constant_dropped``.
``guarantee``
    a :class:`Guarantee`: which privacy definition, with which parameters and for which
    neighbouring relation / invariant subspace.
``invariant``
    the :class:`privinfer.invariants.Invariant` kept exactly, or ``None``.

Additive mechanisms (``y = x + e`` with ``e`` drawn independently of ``x``) derive from
:class:`AdditiveMechanism` and implement ``sample_noise`` and ``noise_logp`` only.

The declared protocol
---------------------
Callers ask a mechanism what it is instead of probing it; every attribute below has a
default on :class:`Mechanism`:

``n`` / ``m``
    input length (``x``) and output length (``y``; ``m = n`` unless the mechanism says
    otherwise, e.g. :class:`~privinfer.mechanisms.linear_gaussian.LinearGaussian`).
``integer``
    outputs (and inputs) are integer vectors.
``transparent``
    ``logp`` is the exact likelihood of the released law (``False`` only for comparison
    baselines whose law has no tractable likelihood).
``invariant``
    the :class:`~privinfer.invariants.Invariant` kept exactly, or ``None``.
``logp_constant_dropped``
    the additive constant ``logp`` omits (``""`` if exact).
``in_support(y, x)`` / ``noise_in_support(e)``
    the one support check: ``y - x`` integer (integer mechanisms), ``C (y - x) = 0``
    (mechanisms with an invariant; exact for integer mechanisms, relative tolerance
    :data:`SUPPORT_RTOL` times :func:`support_scale` for real-valued noise), and the
    mechanism's extra noise-support condition (:meth:`Mechanism.extra_noise_support`).
``loglik_factorization`` / ``loglik_codes()`` / ``logp_terms(y, x)``
    the pointwise log-likelihood (model comparison, leave-one-out): ``logp_terms`` returns
    terms ``l_k(y, x)`` on a last axis of length ``K`` with :math:`\sum_k l_k = \log p(y\mid x)`
    (the same constants dropped as ``logp``).  ``"cell"``: ``K = m``, one term per released
    entry, for noise independent across entries (:math:`p(y\mid x) = \prod_i p(y_i\mid x)`);
    ``"group"``: one term per group of a partition invariant, for noise independent across
    groups but correlated within one (:math:`\prod_g p(y_g\mid x)`); ``"joint"``: ``K = 1``,
    the default.  ``loglik_codes()[i]`` is the term of released entry ``i``.
``augmentation``
    ``None`` if ``logp`` is available in closed form for a PyMC model; otherwise an
    :class:`Augmentation`: the joint density of the release and an auxiliary latent
    ``r`` whose integral over ``r`` is ``p(y | x)``.
``spec()`` and :func:`privinfer.mechanisms.from_spec`
    a JSON-serializable description that rebuilds an equivalent mechanism (same ``logp``).

Spec format
-----------
``spec()`` records the arguments the mechanism was constructed with (captured in
:meth:`Mechanism.__new__`, before ``__init__`` runs) and returns::

    {"mechanism": "<registry name>",
     "parameters": {"<constructor argument>": <value>, ...},
     "invariant": <Invariant.spec() of the kept invariant, or null>}

The invariant travels inside the spec: the constructor argument that *is* the kept
invariant is written as ``{"$ref": "invariant"}`` and restored from the top-level
``"invariant"`` entry (with its values ``t`` when set); any other invariant argument is
written inline as ``{"$invariant": ...}``.  Other values: numbers, strings, booleans and
``None`` as themselves; lists and tuples as lists; NumPy arrays as
``{"$array": nested list, "dtype": ...}``; SciPy sparse matrices as COO triplets
``{"$sparse": {"shape", "row", "col", "data"}}``; exact rationals as
``{"$fraction": [numerator, denominator]}``; the noise laws of the canonical-noise
mechanisms by their parameters.  Anything else (a custom ``moves=`` object, a callable)
raises a ``TypeError`` naming the argument.  Only the constructor arguments are stored:
the spec of a mechanism never holds confidential data nor random state.
"""

from __future__ import annotations

import abc
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_integer_array, check_vector_length
from ..guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP
from ..invariants import Invariant

__all__ = [
    "Guarantee",
    "PureDP",
    "ApproxDP",
    "ZCDP",
    "GDP",
    "Mechanism",
    "AdditiveMechanism",
    "Augmentation",
    "support_scale",
    "integer_mask",
    "check_invariant",
    "group_sums",
    "LOGLIK_FACTORIZATIONS",
    "SUPPORT_RTOL",
]

#: The ways a log-likelihood splits into pointwise terms (:meth:`Mechanism.logp_terms`).
LOGLIK_FACTORIZATIONS = ("cell", "group", "joint")

#: Relative tolerance of the support check ``C (y - x) = 0`` for real-valued noise: the
#: off-subspace residual must be at most ``SUPPORT_RTOL * support_scale(y, x, e)``.
SUPPORT_RTOL = 1e-8


def support_scale(y, x, e) -> np.ndarray:
    """``max(1, |y|_inf, |x|_inf)`` for each vector of the stack ``e = y - x``.

    Floating-point residuals of a projected release are relative to the magnitudes that were
    added; mechanisms whose noise lives on a subspace compare ``e``'s off-subspace residual
    with a tolerance times this scale.
    """
    return np.maximum(1.0, np.maximum(np.max(np.abs(np.broadcast_to(y, e.shape)), axis=-1),
                                      np.max(np.abs(np.broadcast_to(x, e.shape)), axis=-1)))


def integer_mask(e, xp=None):
    """True for each vector of the stack ``e`` whose entries are all integers (NumPy or PyTensor).

    PyTensor integer tensors are integral by type (``round`` needs floats).
    """
    xp = xp or namespace(e)
    if xp is np:
        e = np.asarray(e)
        return np.all(e == np.round(e), axis=-1)
    if str(e.dtype).startswith(("int", "uint")):
        return xp.all(xp.eq(e, e), axis=-1)
    return xp.all(xp.eq(e, xp.round(e)), axis=-1)


def group_sums(v, codes: np.ndarray, n_groups: int, xp=None):
    r"""Sums of ``v`` over the cells of each group: :math:`s_g = \sum_{i: c_i = g} v_i` over the
    last axis (``codes[i]`` = group of cell ``i``); shape ``(..., n_groups)``.  NumPy or PyTensor
    (a sparse product: nothing of size n x n_groups is dense)."""
    xp = xp or namespace(v)
    codes = np.asarray(codes)
    G = sp.csr_matrix((np.ones(codes.size), (np.arange(codes.size), codes)), shape=(codes.size, n_groups))
    if xp is np:
        v = np.asarray(v, dtype=float)
        flat = v.reshape(-1, codes.size)
        return np.asarray(G.T @ flat.T).T.reshape(v.shape[:-1] + (n_groups,))
    import pytensor.sparse as ps

    vv = xp.cast(xp.as_tensor_variable(v), "float64")
    Gt = ps.as_sparse_variable(sp.csr_matrix(G.T))
    if vv.ndim == 1:
        return ps.structured_dot(Gt, vv[:, None])[:, 0]
    flat = vv.reshape((-1, codes.size))
    out = ps.structured_dot(Gt, flat.T).T
    return out.reshape(xp.concatenate([vv.shape[:-1], [n_groups]]), ndim=vv.ndim)


def check_invariant(invariant):
    """The invariant of a subspace mechanism: an :class:`~privinfer.invariants.Invariant` that
    leaves room for noise (``rank C < n``); raises ``TypeError`` / ``ValueError`` otherwise."""
    if not isinstance(invariant, Invariant):
        raise TypeError(f"invariant must be a privinfer.invariants.Invariant, not {type(invariant).__name__}")
    if invariant.null_dim == 0:
        raise ValueError("the invariant has full rank: C x = t determines x and no privacy is possible")
    return invariant


@dataclass(frozen=True)
class Augmentation:
    r"""A likelihood by data augmentation, for mechanisms without a closed-form density.

    ``logp(y, x, r)`` is the joint log density of the release ``y`` and an auxiliary latent
    ``r`` (last axis of length ``dim``) such that

    .. math:: p(y \mid x) = \int_{\mathbb{R}^{\mathrm{dim}}} \exp(\mathrm{logp}(y, x, r))\,dr .

    A PyMC model adds ``r`` as a latent with a flat prior and ``logp(y, x, r)`` as a
    potential; the marginal posterior of ``x`` is then the exact one.  ``logp`` accepts NumPy
    arrays and PyTensor tensors.  Example: the projected Laplace mechanism (Subspace DP full
    paper, Cor. 17), with ``r`` the row-space coordinates of the Laplace draw.
    """

    dim: int
    logp: Callable[..., Any]
    description: str = ""


def _kebab(name: str) -> str:
    """Registry name from a class name: ``SemiDPGaussian -> semi-dp-gaussian``,
    ``KNorm -> k-norm``, ``TulapMechanism -> tulap``."""
    if name.endswith("Mechanism") and name != "Mechanism":
        name = name[: -len("Mechanism")]
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", name)
    return "-".join(w.lower() for w in words)


class Mechanism(abc.ABC):
    """Abstract base of all mechanisms (see module docstring for the protocol)."""

    #: The invariant kept exactly by ``release`` (``None`` for classic mechanisms).
    invariant = None
    #: Whether outputs are integer vectors.
    integer: bool = False
    #: Whether ``logp`` is the exact likelihood of the released law.
    transparent: bool = True
    #: Human-readable description of the additive constant dropped by ``logp`` ("" if exact).
    logp_constant_dropped: str = ""
    #: Name in the mechanism registry (:func:`privinfer.mechanisms.from_spec`); each class
    #: gets the kebab-case form of its name unless it declares one.
    spec_name: str = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "spec_name" not in cls.__dict__:
            cls.spec_name = _kebab(cls.__name__)

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        # Record the constructor arguments for spec() (see module docstring).  Copies made
        # without arguments (copy, pickle) keep the recorded arguments of their __dict__.
        if args or kwargs:
            try:
                bound = inspect.signature(cls.__init__).bind(self, *args, **kwargs)
            except TypeError:
                return self  # __init__ raises the informative error
            arguments = dict(bound.arguments)
            arguments.pop(next(iter(arguments)))  # self
            # arrays are copied so that later changes by the caller do not alter the spec
            arguments = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arguments.items()}
            self._spec_arguments = (cls, arguments)
        else:
            self._spec_arguments = (cls, {})
        return self

    @property
    def m(self) -> int:
        """Length of the released vector (``n`` unless the mechanism changes the length)."""
        return self.n

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """Length of the released vector."""

    @property
    @abc.abstractmethod
    def guarantee(self) -> Guarantee:
        """The privacy guarantee of this mechanism."""

    @abc.abstractmethod
    def release(self, x, rng=None):
        """Privatize ``x`` (shape ``(n,)`` or ``(..., n)``)."""

    @abc.abstractmethod
    def logp(self, y, x):
        """Log-likelihood ``log p(y | x)`` (NumPy or PyTensor)."""

    def sampler_description(self) -> dict | None:
        """How ``release`` draws the noise, when there is more to say than "exactly, by a
        textbook sampler" (e.g. the lattice mechanisms: exact method, or MCMC sweeps and the
        coupling estimate behind its delta); ``None`` otherwise.  Public: written to release
        metadata."""
        return None

    def local_logp(self):
        r"""The noise log-density as a :class:`~privinfer.lattice.LocalLogDensity` in
        :math:`e = y - x` (up to a constant, on the support), so lattice samplers can score a
        move from the cells it touches; ``None`` when the likelihood has no such form."""
        return None

    # -- pointwise log-likelihood -----------------------------------------------------------
    @property
    def loglik_factorization(self) -> str:
        """How :meth:`logp_terms` splits the log-likelihood: ``"cell"`` (one term per released
        entry), ``"group"`` (one per group of the invariant's partition) or ``"joint"`` (one
        term; the default, for noise correlated across all entries)."""
        return "joint"

    def loglik_codes(self) -> np.ndarray:
        """The term of :meth:`logp_terms` each released entry belongs to (length ``m``)."""
        kind = self.loglik_factorization
        if kind == "cell":
            return np.arange(self.m)
        if kind == "group":
            return np.asarray(self.invariant.partition.codes)
        return np.zeros(self.m, dtype=np.int64)

    @property
    def n_loglik_terms(self) -> int:
        """Number of pointwise terms: ``m``, the number of groups, or 1."""
        kind = self.loglik_factorization
        if kind == "cell":
            return self.m
        if kind == "group":
            return self.invariant.partition.n_groups
        return 1

    def logp_terms(self, y, x):
        r"""Pointwise log-likelihood terms :math:`l_k(y, x)`, last axis of length
        :attr:`n_loglik_terms`, with :math:`\sum_k l_k = ` :meth:`logp` ``(y, x)`` (module
        docstring); NumPy or PyTensor.  The default is the one joint term."""
        xp = namespace(y, x)
        lp = self.logp(y, x)
        if xp is np:
            return np.asarray(lp, dtype=float)[..., None]
        return xp.shape_padright(lp)

    # -- augmentation ---------------------------------------------------------------------
    @property
    def augmentation(self) -> Augmentation | None:
        """``None`` (closed-form ``logp``) or the :class:`Augmentation` to use in a model."""
        return None

    @property
    def requires_augmentation(self) -> bool:
        """Read-only alias: ``augmentation is not None``."""
        return self.augmentation is not None

    @property
    def augmentation_dim(self) -> int:
        """Read-only alias: ``augmentation.dim`` (0 without augmentation)."""
        aug = self.augmentation
        return 0 if aug is None else aug.dim

    # -- support --------------------------------------------------------------------------
    def checked_pair(self, y, x):
        """``(y, x)`` as float arrays whose last axes are ``m`` and ``n`` (else ``ValueError``)."""
        y = np.asarray(y, dtype=float)
        x = np.asarray(x, dtype=float)
        if y.ndim == 0 or y.shape[-1] != self.m:
            raise ValueError(f"y must have shape (..., {self.m}), got {y.shape}")
        if x.ndim == 0 or x.shape[-1] != self.n:
            raise ValueError(f"x must have shape (..., {self.n}), got {x.shape}")
        return y, x

    def in_support(self, y, x):
        """Whether ``y`` is a possible release of ``x``: one bool per vector of the stack.

        Shapes: the last axis of ``y`` is ``m``, that of ``x`` is ``n`` (a mismatch raises
        ``ValueError``).  Then :meth:`noise_in_support` of ``e = y - x``, with the tolerance of
        real-valued invariants relative to :func:`support_scale` ``(y, x, e)``.  Non-finite
        values are never in the support.  NumPy arrays give a bool or bool array, PyTensor
        tensors a symbolic bool.
        """
        xp = namespace(y, x)
        if xp is np:
            y, x = self.checked_pair(y, x)
            batch = np.broadcast_shapes(y.shape[:-1], x.shape[:-1])
            if not self._has_noise_support_conditions():
                ok = np.all(np.isfinite(y), axis=-1) & np.all(np.isfinite(x), axis=-1)
                ok = np.broadcast_to(ok, batch)
                return bool(ok) if ok.ndim == 0 else ok.copy()
            if self.m != self.n:
                raise NotImplementedError(f"{type(self).__name__}: support conditions on y - x need m == n")
            e = y - x
            fin = np.isfinite(e)
            scale = support_scale(np.where(fin, y, 0.0), np.where(fin, x, 0.0), np.where(fin, e, 0.0))
            return self.noise_in_support(e, scale)
        if not self._has_noise_support_conditions():
            return xp.all(xp.eq(y, y), axis=-1)
        e = y - x
        scale = xp.maximum(1.0, xp.maximum(xp.max(xp.abs(y + xp.zeros_like(e)), axis=-1),
                                           xp.max(xp.abs(x + xp.zeros_like(e)), axis=-1)))
        return self.noise_in_support(e, scale)

    def noise_in_support(self, e, scale=None):
        """Whether the noise ``e = y - x`` (a vector or a stack) lies in the noise support.

        The conditions (all that apply): every entry finite; integer entries if
        :attr:`integer`; ``C e = 0`` if the mechanism keeps an :attr:`invariant` -- exactly for
        integer mechanisms (integer C; float arithmetic is exact below 2^53), and for
        real-valued noise ``max_i |(P_R e)_i| <= SUPPORT_RTOL * scale`` with ``P_R`` the
        projection onto the row space of C and ``scale`` (one per vector) defaulting to
        ``max(1, |e|_inf)``; and :meth:`extra_noise_support`.
        """
        xp = namespace(e)
        if xp is np:
            e = np.asarray(e, dtype=float)
            fin = np.all(np.isfinite(e), axis=-1)
            e = np.where(np.isfinite(e), e, 0.0)
            if scale is None:
                scale = np.maximum(1.0, np.max(np.abs(e), axis=-1))
            ok = fin
        else:
            if scale is None:
                scale = xp.maximum(1.0, xp.max(xp.abs(e), axis=-1))
            ok = xp.all(xp.eq(e, e), axis=-1)
        if self.integer:
            ok = ok & integer_mask(e, xp) if xp is np else xp.and_(ok, integer_mask(e, xp))
        inv = self.invariant
        if inv is not None:
            ok = ok & self._invariant_mask(inv, e, scale, xp) if xp is np else xp.and_(
                ok, self._invariant_mask(inv, e, scale, xp))
        extra = self.extra_noise_support(e, scale, xp)
        if extra is not None:
            ok = ok & extra if xp is np else xp.and_(ok, extra)
        if xp is np:
            return bool(ok) if np.ndim(ok) == 0 else ok
        return ok

    def extra_noise_support(self, e, scale, xp):
        """Hook: a mechanism-specific noise-support condition beyond integrality and the
        invariant (e.g. noise confined to the range of a query), as a bool per vector, or
        ``None`` for no further condition (the default)."""
        return None

    def _has_noise_support_conditions(self) -> bool:
        return (self.integer or self.invariant is not None
                or type(self).extra_noise_support is not Mechanism.extra_noise_support)

    def _invariant_mask(self, inv, e, scale, xp):
        """``C e = 0``: exact for integer mechanisms, relative tolerance for real noise."""
        if self.integer:
            if xp is np:
                return np.all(inv.of(e) == 0, axis=-1)
            Cd = inv.integer_matrix().astype(float)
            Ce = xp.dot(xp.cast(e, "float64"), xp.as_tensor_variable(Cd.T))
            return xp.all(xp.eq(Ce, 0), axis=-1)
        if xp is np:
            r = inv.project_row(e)
            return np.max(np.abs(r), axis=-1) <= SUPPORT_RTOL * scale
        R = inv.row_basis()
        r = xp.dot(xp.dot(e, R), R.T)
        return xp.le(xp.max(xp.abs(r), axis=-1), SUPPORT_RTOL * scale)

    def where_in_support(self, ok, val):
        """``val`` where ``ok``, ``-inf`` elsewhere (NumPy: a float for a single vector)."""
        xp = namespace(ok, val)
        if xp is np:
            out = np.where(ok, val, -np.inf)
            return float(out) if np.ndim(out) == 0 else out
        return xp.switch(ok, val, -np.inf)

    # -- spec -----------------------------------------------------------------------------
    def spec(self) -> dict:
        """JSON-serializable description that :func:`privinfer.mechanisms.from_spec` turns back
        into an equivalent mechanism (format in the module docstring)."""
        from .spec import mechanism_spec

        return mechanism_spec(self)

    # -- helpers shared by subclasses ---------------------------------------------------
    def _check_x(self, x, name: str = "x") -> np.ndarray:
        """Validate confidential input: finite, last axis of length n, integer if needed."""
        arr = check_vector_length(x, self.n, name)
        if self.integer:
            arr = check_integer_array(arr, name)
        return arr

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"{type(self).__name__}(n={self.n}, guarantee={self.guarantee})"


class AdditiveMechanism(Mechanism):
    """``y = x + e`` with noise ``e`` independent of ``x``.

    Subclasses implement :meth:`sample_noise` (shape ``size + (n,)``) and
    :meth:`noise_logp` (log density/pmf of ``e`` over its last axis, NumPy or PyTensor).
    ``logp(y, x) = noise_logp(y - x)``.
    """

    @abc.abstractmethod
    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        """Draw noise vectors of shape ``size + (n,)``."""

    @abc.abstractmethod
    def noise_logp(self, e):
        """Log density (or pmf) of the noise ``e``; sums over the last axis."""

    def release(self, x, rng=None):
        x = self._check_x(x)
        rng = as_generator(rng)
        e = self.sample_noise(x.shape[:-1], rng=rng)
        return x + e

    def noise_logp_terms(self, e):
        """Pointwise terms of :meth:`noise_logp` (last axis :attr:`n_loglik_terms`); mechanisms
        whose :attr:`loglik_factorization` is ``"cell"`` or ``"group"`` override it."""
        xp = namespace(e)
        lp = self.noise_logp(e)
        return np.asarray(lp, dtype=float)[..., None] if xp is np else xp.shape_padright(lp)

    @staticmethod
    def _noise(y, x):
        """The noise ``y - x`` (as float arrays in NumPy; PyTensor as given)."""
        if namespace(y, x) is np:
            return np.asarray(y, dtype=float) - np.asarray(x, dtype=float)
        return y - x

    def logp(self, y, x):
        return self.noise_logp(self._noise(y, x))

    def logp_terms(self, y, x):
        """``noise_logp_terms(y - x)`` (the pointwise form of :meth:`logp`)."""
        if self.loglik_factorization == "joint":
            return super().logp_terms(y, x)
        return self.noise_logp_terms(self._noise(y, x))
