"""Reference Bayesian models (installed as ``privinfer.models``).

Each model is a plain function returning a ``pymc.Model`` whose docstring states the
generative story and the invariants and mechanism it conditions on.
"""

__all__: list[str] = []
