"""Reference Bayesian models (installed as ``privinfer.models``).

Each model is a plain function returning a ``pymc.Model`` whose docstring states the
generative story and the invariants and mechanism it conditions on:

* :func:`county_population_model` -- counties within states, state totals invariant;
* :func:`contingency_table_model` -- two-way table with fixed one-way margins, log odds ratios;
* :func:`spatiotemporal_model` -- groups x hours x buildings, Poisson log-linear, margins;
* :func:`nested_histogram_model` -- histograms observed through linear Gaussian releases;
* :func:`noisy_measurements_model` -- a histogram observed through Census-style noisy
  measurements (discrete Gaussian queries), invariant totals exact.

Models with an integer latent are sampled with
``pm.sample(step=privinfer.pymc.lattice_steps(model))``; the others with plain ``pm.sample()``.
"""

from .contingency import contingency_table_model
from .counties import county_population_model
from .nested_histograms import nested_histogram_model
from .noisy_measurements import grid_moves, noisy_measurements_model
from .spatiotemporal import spatiotemporal_model

__all__ = [
    "county_population_model",
    "contingency_table_model",
    "spatiotemporal_model",
    "nested_histogram_model",
    "noisy_measurements_model",
    "grid_moves",
]
