"""Step methods for every integer latent of a model.

``pm.sample(step=lattice_steps(model))`` samples each latent made by
:func:`privinfer.pymc.lattice_latent` with its own
:class:`~privinfer.samplers.LatticeMetropolis` (lattice moves keep ``C x = t`` exactly) and
lets PyMC assign NUTS to the continuous variables.
"""

from __future__ import annotations

import pymc as pm

from ._registry import model_registry

__all__ = ["lattice_steps"]


def lattice_steps(model=None, step_class=None, **kwargs) -> list:
    """One lattice step method per lattice latent of ``model`` (the context model if None).

    Parameters
    ----------
    model : the ``pm.Model`` (default: the model on the context stack).
    step_class : :class:`~privinfer.samplers.LatticeMetropolis` (default) or
        :class:`~privinfer.samplers.LatticeGibbs`.
    **kwargs : passed to every step (``scale``, ``n_multi``, ``order``, ...).

    Returns an empty list for a model without lattice latents, so the call is always safe.
    """
    from ..samplers.lattice_metropolis import LatticeMetropolis

    model = pm.modelcontext(model)
    step_class = LatticeMetropolis if step_class is None else step_class
    names = list(model_registry(model)["lattice"])
    return [step_class([model[name]], model=model, **kwargs) for name in names]
