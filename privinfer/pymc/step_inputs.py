"""The inputs a registered step method reads from the rest of the model.

A Gibbs step built on registered metadata (:class:`~privinfer.pymc.WalkGibbs`,
:class:`~privinfer.pymc.CellEffectsGibbs`) updates its own value variables and reads, at every
iteration, tensors of the rest of the model (a base log profile, the Dirichlet concentration)
and the lattice latent's current cells.  :func:`registered_inputs` builds, once, PyMC's shared
replacements of everything the step does not update and one compiled function returning those
tensors and the cells at the sampler's current point.
"""

from __future__ import annotations

import pymc as pm
import pytensor
from pytensor.graph.replace import graph_replace

__all__ = ["registered_inputs"]


def registered_inputs(model, names, tensors, latent: str, initial_point=None, compile_kwargs=None, checked=()):
    """``names``: the step's own variables; ``tensors``: graphs in the model's random variables;
    ``latent``: the lattice latent's name; ``checked``: more graphs the step only inspects when
    it is built.  Returns the step's value variables (in the order of ``names``), the shared
    replacements (``pm.make_shared_replacements``), the ``checked`` graphs written in those
    shared values and a function of no argument returning the tensors' values followed by the
    latent's current value."""
    if initial_point is None:
        initial_point = model.initial_point()
    vars = [model.rvs_to_values[model[n]] for n in names]
    shared = pm.make_shared_replacements(initial_point, vars, model)
    latent_v = model.rvs_to_values[model[latent]]
    graphs = graph_replace(model.replace_rvs_by_values(list(tensors) + list(checked)), shared, strict=False)
    fn = pytensor.function([], list(graphs[:len(tensors)]) + [shared[latent_v]], on_unused_input="ignore",
                           **(compile_kwargs or {}))
    return vars, shared, list(graphs[len(tensors):]), fn
