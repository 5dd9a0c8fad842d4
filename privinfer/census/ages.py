"""Positions of ordered age categories: the midpoints, in years, of Census age-group labels.

A smooth departure along the age groups (:func:`privinfer.census.hierarchy_model`'s
second-order walk) is smooth in *age*, not in the groups' index: the P12 groups are 1 to 5
years wide ("20", "21", "22 to 24", "25 to 29"), so a profile linear in age bends at every
change of width when read on the index.  :func:`category_midpoints` gives each group's
midpoint: ``"A to B"``, ``"A-B"`` and ``"A and B"`` span the years A..B (midpoint ``(A + B + 1) / 2``),
``"A"`` the year A (``A + 0.5``), ``"Under A"`` the years 0..A-1 (``A / 2``) and the open top
group ``"A and over"`` (or ``"A+"``) is placed :data:`OPEN_TOP_OFFSET` years above A (85 and over: 89, about
the mean age of people aged 85 and over in the United States).
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["category_midpoints", "OPEN_TOP_OFFSET"]

#: Years above its lower bound at which the open top age group ("85 and over") is placed.
OPEN_TOP_OFFSET = 4.0

_PATTERNS = (
    (re.compile(r"^under (\d+)$"), lambda a: a / 2.0),
    (re.compile(r"^(\d+)\s*(?:\+|and over|or over|and older|or older)$"), lambda a: a + OPEN_TOP_OFFSET),
    (re.compile(r"^(\d+)\s*(?:to|and|-)\s*(\d+)$"), lambda a, b: (a + b + 1) / 2.0),
    (re.compile(r"^(\d+)$"), lambda a: a + 0.5),
)


def _midpoint(label) -> float | None:
    text = " ".join(str(label).strip().lower().replace(" years", "").split())
    for pattern, mid in _PATTERNS:
        m = pattern.match(text)
        if m:
            return float(mid(*(int(g) for g in m.groups())))
    return None


def category_midpoints(labels) -> np.ndarray | None:
    """The midpoints (years) of age-group ``labels`` in their order (module docstring), or None
    when a label is not an age group or the midpoints are not strictly monotone (oldest first
    is fine)."""
    mids = [_midpoint(lab) for lab in labels]
    if not mids or any(m is None for m in mids):
        return None
    mids = np.asarray(mids, dtype=float)
    steps = np.diff(mids)
    return mids if np.all(steps > 0) or np.all(steps < 0) else None
