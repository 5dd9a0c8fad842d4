"""Reproducible case studies (jupytext percent-format sources, installed as
``privinfer.case_studies``).

Each module runs top to bottom as a notebook (open the ``.py`` file in Jupyter with jupytext,
or ``privinfer case-study NAME --notebook`` for an executed ``.ipynb`` with its figures
inline), as a script (``python -m privinfer.case_studies.NAME``), or through
``privinfer case-study NAME``.
Settings: small (default, used by CI) or full (environment ``PRIVINFER_FULL=1`` or the
``--full`` flag of the command).  Figures and tables go to ``PRIVINFER_OUTPUT`` (default
``./privinfer-output/NAME``).  Headline numbers go to ``results.json``; the tests check them.
"""
