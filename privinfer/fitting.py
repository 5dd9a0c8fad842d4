"""Fitting a reference model to a release (kept under this name; it lives in
:mod:`privinfer.workflow.fitting`)."""

from .workflow.fitting import FitResult, build_model, fit, fit_release, label_cells, start_near_release  # noqa: F401

__all__ = ["FitResult", "fit", "fit_release", "build_model", "start_near_release", "label_cells"]
