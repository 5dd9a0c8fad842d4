"""The lattice engine: framework-free (NumPy/SciPy only) sampling on integer lattices.

``{e in Z^n : C e = 0}`` is where the curator's integer noise lives (Integer subspace DP) and
``{x in Z^n : C x = t}`` where the analyst's latent counts live.  One engine serves both:

``laws``
    exact integer samplers (CKS 2020) and the double geometric jump law
``moves``
    move sets: pair transfers within groups, a short lattice basis, free cells
``density``
    the one encoding of a target's local log-density change (cell sums, sparse
    linear queries with a running statistic, whole-vector terms)
``kernels``
    Metropolis / heat-bath kernels ``kernel(rng, state) -> (state, info)``
``coupling``
    L-lag couplings of the kernels and total-variation certificates
``exact``
    exact samplers of product laws restricted to the lattice (no Markov chain)
``block``
    block updates of independent cells given their group sums (tree FFBS + MH)
``nested``
    block updates under nested sum constraints with potentials on the intermediate sums
``measured``
    pair moves for cells measured by noisy sums, with a Dirichlet-multinomial prior
    (compiled with Numba)

Nothing here imports PyMC (``measured`` is NumPy code compiled by Numba); the PyMC step methods built on these kernels live in
:mod:`privinfer.pymc`.
"""

from .block import (
    LOG_DROP,
    BlockInfo,
    GroupSumSampler,
    GroupTree,
    SeparableCells,
    block_kernel,
    separable_cell_logp,
    unimodal_windows,
)
from .coupling import (
    BurnInCertificate,
    certify_burn_in,
    coupled_sweep,
    iterations_to_threshold,
    maximal_coupling_double_geometric,
    sample_meeting_times,
    tv_upper_bound,
)
from .density import CellSum, GaussianTarget, L1Target, L2Target, LinearQueries, LocalLogDensity, WholeVector
from .exact import (
    DiscreteGaussianLaw,
    DoubleGeometricLaw,
    ExactSampler,
    FreeCellRejection,
    exact_sampler,
    sample_partition_double_geometric,
    sample_partition_rejection,
)
from .kernels import (
    LatticeState,
    SweepInfo,
    coordinate_step,
    default_jump_scale,
    direction_gibbs,
    direction_range,
    gibbs_sweep,
    init_state,
    metropolis_kernel,
    multi_direction_jump,
    run_sweeps,
    sweep,
)
from .laws import (
    double_geometric_jumps,
    jump_logpmf,
    nonzero_double_geometric,
    sample_discrete_gaussian,
    sample_discrete_laplace,
    sample_geometric,
    sparse_double_geometric,
)
from .moves import (
    LatticeMoves,
    MoveCycle,
    PairMoves,
    RectangleMoves,
    SparseLatticeBasis,
    as_moves,
    free_cell_basis,
    moves_for,
    sweep_order,
)
from .measured import SPREAD, MeasuredPairs, MeasurementRows, SweepCounts, measured_pair_sweeps, rounded_normal_logmass
from .nested import NestedSumSampler, NestedTree, nested_block_kernel

__all__ = [
    "LOG_DROP", "GroupTree", "GroupSumSampler", "BlockInfo", "block_kernel", "separable_cell_logp", "SeparableCells", "unimodal_windows",
    "NestedTree", "NestedSumSampler", "nested_block_kernel",
    "MeasuredPairs", "MeasurementRows", "SweepCounts", "measured_pair_sweeps", "rounded_normal_logmass", "SPREAD",
    "BurnInCertificate", "certify_burn_in", "coupled_sweep", "iterations_to_threshold",
    "maximal_coupling_double_geometric", "sample_meeting_times", "tv_upper_bound",
    "CellSum", "WholeVector", "LinearQueries", "LocalLogDensity", "L1Target", "L2Target", "GaussianTarget",
    "DoubleGeometricLaw", "DiscreteGaussianLaw", "ExactSampler", "FreeCellRejection", "exact_sampler",
    "sample_partition_double_geometric", "sample_partition_rejection",
    "LatticeState", "SweepInfo", "init_state", "sweep", "gibbs_sweep", "coordinate_step", "run_sweeps",
    "metropolis_kernel", "multi_direction_jump", "direction_range", "direction_gibbs", "default_jump_scale",
    "double_geometric_jumps", "jump_logpmf", "nonzero_double_geometric", "sparse_double_geometric",
    "sample_geometric", "sample_discrete_laplace", "sample_discrete_gaussian",
    "LatticeMoves", "PairMoves", "RectangleMoves", "MoveCycle", "SparseLatticeBasis", "as_moves", "free_cell_basis", "moves_for", "sweep_order",
]
