r"""Log-gamma and digamma differences as PyTensor operations, one compiled pass per element.

:math:`\log\Gamma(a + x) - \log\Gamma(a)` is the cell term of the Dirichlet-multinomial
(:class:`~privinfer.pymc.DirichletMultinomialCells`), evaluated with its gradient
:math:`\partial_a = \psi(a + x) - \psi(a)` at every NUTS leapfrog step of a model with tens of
thousands of cells.  Written with ``pt.switch`` between Stirling's series (needed as
:math:`a \to \infty`, :mod:`privinfer._special`) and the direct difference, the graph evaluates
both branches and both branches' gradients for every element.  :class:`LgammaRatio` and
:class:`DigammaDiff` compute, per element, only the branch that applies, with the compiled scalar
kernels of :mod:`privinfer._special`, in the Python and C backends (``perform``) and natively in
PyTensor's Numba backend.  Where a sampler's trial point overflows (a share at 0 or at infinity)
the values are non-finite, without floating-point warnings, and the sampler rejects the point, as
with PyTensor's own operations.  On Kentucky's 49,818 tract cells the model's log density and gradient
take 4.6 ms instead of 6.6 ms.

Gradients: :math:`\partial_a \log\Gamma(a + x) - \log\Gamma(a) = \psi(a + x) - \psi(a)`
(:class:`DigammaDiff`), :math:`\partial_x = \psi(a + x)`; the second derivative in ``a`` is
:math:`\psi'(a + x) - \psi'(a)` by PyTensor's ``polygamma`` (plain difference: for Hessians, not
needed by NUTS).
"""

from __future__ import annotations

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch import numba_funcify

from .._special import digamma_diff as _digamma_diff_np
from .._special import digamma_diff_scalar
from .._special import lgamma_ratio as _lgamma_ratio_np
from .._special import lgamma_ratio_scalar

__all__ = ["LgammaRatio", "DigammaDiff", "lgamma_ratio", "digamma_diff"]


@numba.njit(cache=True)
def _pairwise_array(a, x, digamma):
    """:func:`lgamma_ratio_scalar` (or, with ``digamma``, :func:`digamma_diff_scalar`) of every
    pair of elements of two arrays of one shape."""
    af = np.ascontiguousarray(a).reshape(a.size)
    xf = np.ascontiguousarray(x).reshape(x.size)
    out = np.empty(af.size)
    for i in range(af.size):
        out[i] = digamma_diff_scalar(af[i], xf[i]) if digamma else lgamma_ratio_scalar(af[i], xf[i])
    return out.reshape(a.shape)


class _Pairwise(Op):
    """An elementwise function of two float64 tensors of one shape (the helpers broadcast):
    ``_numpy`` in ``perform``, the compiled loop (``_digamma`` picks the kernel) under Numba."""

    __props__ = ()
    _digamma = False

    @staticmethod
    def _numpy(a, x):
        raise NotImplementedError

    def make_node(self, a, x):
        a = pt.as_tensor_variable(a)
        x = pt.as_tensor_variable(x)
        if a.type.ndim != x.type.ndim:
            raise ValueError(f"{type(self).__name__} needs inputs of one shape (got {a.type.ndim}-d and "
                             f"{x.type.ndim}-d); use the module's functions, which broadcast")
        a = pt.cast(a, "float64")
        x = pt.cast(x, "float64")
        return Apply(self, [a, x], [a.type()])

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def perform(self, node, inputs, output_storage):
        with np.errstate(all="ignore"):     # non-finite values pass on (as in the C backend)
            output_storage[0][0] = np.asarray(self._numpy(*inputs))


class LgammaRatio(_Pairwise):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` elementwise (``a > 0``, ``a + x > 0``)."""

    _numpy = staticmethod(_lgamma_ratio_np)

    def grad(self, inputs, output_grads):
        a, x = inputs
        (g,) = output_grads
        return [g * DigammaDiff()(a, x), g * pt.digamma(a + x)]


class DigammaDiff(_Pairwise):
    r""":math:`\psi(a + x) - \psi(a)` elementwise (``a > 0``, ``x >= 0``)."""

    _numpy = staticmethod(_digamma_diff_np)
    _digamma = True

    def grad(self, inputs, output_grads):
        a, x = inputs
        (g,) = output_grads
        upper = pt.polygamma(1, a + x)
        return [g * (upper - pt.polygamma(1, a)), g * upper]


@numba_funcify.register(_Pairwise)
def _numba_pairwise(op, node=None, **kwargs):
    digamma = bool(op._digamma)

    @numba.njit
    def pairwise_op(a, x):
        return _pairwise_array(a, x, digamma)

    return pairwise_op


def lgamma_ratio(a, x):
    r""":math:`\log\Gamma(a + x) - \log\Gamma(a)` of two tensors (broadcast), one branch per element."""
    a, x = pt.broadcast_arrays(pt.as_tensor_variable(a), pt.as_tensor_variable(x))
    return LgammaRatio()(a, x)


def digamma_diff(a, x):
    r""":math:`\psi(a + x) - \psi(a)` of two tensors (broadcast), one branch per element."""
    a, x = pt.broadcast_arrays(pt.as_tensor_variable(a), pt.as_tensor_variable(x))
    return DigammaDiff()(a, x)
