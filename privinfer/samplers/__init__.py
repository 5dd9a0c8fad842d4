"""Samplers: framework-free lattice kernels for the curator's noise, L-lag couplings and TV
bounds.  PyMC step methods built on the kernels live in their own modules here."""

from .coupling import (
    BurnInCertificate,
    certify_burn_in,
    coupled_sweep,
    iterations_to_threshold,
    maximal_coupling_double_geometric,
    sample_meeting_times,
    tv_upper_bound,
)
from .lattice_kernels import (
    GaussianTarget,
    L1Target,
    L2Target,
    LatticeMoves,
    LatticeState,
    PairMoves,
    SparseLatticeBasis,
    as_moves,
    free_cell_basis,
    SweepInfo,
    coordinate_step,
    default_jump_scale,
    double_geometric_jumps,
    gibbs_sweep,
    init_state,
    jump_logpmf,
    run_sweeps,
    sweep_order,
)

#: PyMC step methods, imported lazily so the curator's samplers do not load PyMC.
_STEP_METHODS = {"LatticeMetropolis": "lattice_metropolis", "LatticeGibbs": "lattice_metropolis"}


def __getattr__(name):
    if name in _STEP_METHODS:
        import importlib

        return getattr(importlib.import_module(f".{_STEP_METHODS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LatticeMetropolis",
    "LatticeGibbs",
    "BurnInCertificate",
    "certify_burn_in",
    "coupled_sweep",
    "iterations_to_threshold",
    "maximal_coupling_double_geometric",
    "sample_meeting_times",
    "tv_upper_bound",
    "GaussianTarget",
    "L1Target",
    "L2Target",
    "LatticeMoves",
    "LatticeState",
    "PairMoves",
    "SparseLatticeBasis",
    "as_moves",
    "free_cell_basis",
    "SweepInfo",
    "coordinate_step",
    "default_jump_scale",
    "double_geometric_jumps",
    "gibbs_sweep",
    "init_state",
    "jump_logpmf",
    "run_sweeps",
    "sweep_order",
]
