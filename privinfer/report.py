"""The demo of ``privinfer demo`` (kept under this name; it lives in :mod:`privinfer.workflow.demo`)."""

from .workflow.demo import (  # noqa: F401
    DEFAULT_DRAWS,
    DEFAULT_EPSILON,
    DEFAULT_TUNE,
    INTERVAL,
    DemoReport,
    coverage_tail_probability,
    equal_tailed_interval,
    run_demo,
)

__all__ = ["DemoReport", "run_demo", "DEFAULT_EPSILON", "DEFAULT_DRAWS", "DEFAULT_TUNE", "INTERVAL",
           "coverage_tail_probability", "equal_tailed_interval"]
