"""Inference on private releases: the semi-private UMPU odds-ratio test and its Bayesian
counterpart; generalized least squares on noisy measurements (:mod:`privinfer.inference.gls`).

See :mod:`privinfer.inference.odds_ratio` (Cho and Awan, Semi-DP paper, Sec. 5.3, Thm 37) and
:mod:`privinfer.inference.bayes_odds_ratio`.  The PyMC model is imported lazily.
"""

from .calibration import IntervalCoverage, interval_coverage
from .estimates import GLSEstimate
from .gls import gls, gls_estimate, topdown_style_estimate
from .hierarchical_gls import HierarchicalGLS, HierarchicalGLSEstimate, hierarchical_gls
from .odds_ratio import (
    OddsRatioTestResult,
    naive_group_privacy_noise,
    naive_group_privacy_test,
    p_value_function,
    power,
    semi_private_odds_ratio_interval,
    semi_private_odds_ratio_test,
    semi_private_p_value,
    umpu_test_function,
    umpu_threshold,
)
from .bayes_odds_ratio import (
    log_odds_ratio_log_likelihood,
    log_odds_ratio_posterior_grid,
    semi_private_odds_ratio_model,
)

__all__ = [
    "IntervalCoverage",
    "interval_coverage",
    "GLSEstimate",
    "HierarchicalGLS",
    "HierarchicalGLSEstimate",
    "hierarchical_gls",
    "gls",
    "gls_estimate",
    "topdown_style_estimate",
    "OddsRatioTestResult",
    "semi_private_odds_ratio_test",
    "semi_private_odds_ratio_interval",
    "semi_private_p_value",
    "p_value_function",
    "umpu_threshold",
    "umpu_test_function",
    "naive_group_privacy_noise",
    "naive_group_privacy_test",
    "power",
    "log_odds_ratio_log_likelihood",
    "log_odds_ratio_posterior_grid",
    "semi_private_odds_ratio_model",
]
