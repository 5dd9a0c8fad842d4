"""Privacy mechanisms: every one offers ``release``, ``logp`` and ``guarantee``.

See :mod:`privinfer.mechanisms.base` for the protocol.
"""

from .base import AdditiveMechanism, Augmentation, Guarantee, Mechanism
from .topdown import NonTransparentMechanismError, TopDownBaseline
from .classic import Gaussian, Laplace
from .discrete import DiscreteGaussian, DoubleGeometric
from .integer_subspace import GeneralizedGaussian, GeneralizedLaplace
from .linear_gaussian import LinearGaussian
from .noisy_measurements import (
    MeasurementRelease,
    NoisyMeasurements,
    county_sex_age_measurements,
    l2_sensitivity,
    margin_query,
    table_measurements,
)
from .correlated import CorrelatedGaussian, base_decomposition, mvee_symmetric
from .distributed import local_release, release_distributed
from .semidp import (
    KNorm,
    SemiDPGaussian,
    one_way_margins_l2_sensitivity,
    one_way_margins_sensitivity_space,
)
from .subspace import (
    ExtendedGaussian,
    ExtendedLaplace,
    ProjectedGaussian,
    ProjectedLaplace,
    null_sensitivity,
    projected_laplace_row_marginal_logp,
)
from .registry import (
    REGISTRY,
    CliMechanism,
    MechanismOptionError,
    MechanismSpecError,
    build,
    cli_info,
    cli_names,
    from_spec,
)
from .tradeoff import TradeoffFunction, eps_delta_tradeoff, gaussian_tradeoff
from .tulap import Tulap, tulap_q
from .canonical_noise import (
    CanonicalNoise,
    CanonicalNoiseMechanism,
    GaussianCanonicalMechanism,
    GaussianCanonicalNoise,
    TulapMechanism,
    canonical_noise,
)
from .two_by_two import SemiPrivateTwoByTwo

__all__ = ["Mechanism", "AdditiveMechanism", "Guarantee", "Augmentation"]
__all__ += ["REGISTRY", "from_spec", "build", "cli_names", "cli_info", "CliMechanism",
            "MechanismOptionError", "MechanismSpecError"]
__all__ += ["TopDownBaseline", "NonTransparentMechanismError"]
__all__ += ["Gaussian", "Laplace"]
__all__ += ["DoubleGeometric", "DiscreteGaussian", "GeneralizedLaplace", "GeneralizedGaussian"]
__all__ += ["LinearGaussian"]
__all__ += ["NoisyMeasurements", "MeasurementRelease", "margin_query", "l2_sensitivity", "table_measurements",
            "county_sex_age_measurements"]
__all__ += ["CorrelatedGaussian", "mvee_symmetric", "base_decomposition", "release_distributed", "local_release"]
__all__ += ["SemiDPGaussian", "KNorm", "one_way_margins_sensitivity_space", "one_way_margins_l2_sensitivity"]
__all__ += ["ProjectedGaussian", "ExtendedGaussian", "ProjectedLaplace", "ExtendedLaplace",
            "null_sensitivity", "projected_laplace_row_marginal_logp"]
__all__ += [
    "Tulap",
    "TulapMechanism",
    "CanonicalNoise",
    "CanonicalNoiseMechanism",
    "GaussianCanonicalNoise",
    "GaussianCanonicalMechanism",
    "SemiPrivateTwoByTwo",
    "TradeoffFunction",
    "eps_delta_tradeoff",
    "gaussian_tradeoff",
    "canonical_noise",
    "tulap_q",
]
