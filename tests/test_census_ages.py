import numpy as np
import pytest

from privinfer.census import AGE_GROUPS
from privinfer.census.ages import OPEN_TOP_OFFSET, category_midpoints


def test_p12_midpoints_follow_the_labels():
    # "A to B" and "A and B" span the years A..B, "A" one year, "Under 5" the years 0..4; the open
    # top group sits OPEN_TOP_OFFSET years above its lower bound
    mids = dict(zip(AGE_GROUPS, category_midpoints(AGE_GROUPS)))
    assert mids["Under 5"] == 2.5
    assert mids["15 to 17"] == 16.5
    assert mids["18 and 19"] == 19.0
    assert mids["20"] == 20.5
    assert mids["22 to 24"] == 23.5
    assert mids["85 and over"] == 85 + OPEN_TOP_OFFSET


@pytest.mark.parametrize("labels, expected", [
    (["0-4", "5 - 9", "10+"], [2.5, 7.5, 10 + OPEN_TOP_OFFSET]),
    (["65 years and over", "18 to 64 years", "Under 18 years"], [65 + OPEN_TOP_OFFSET, 41.5, 9.0]),
])
def test_other_spellings_and_oldest_first(labels, expected):
    np.testing.assert_allclose(category_midpoints(labels), expected)


@pytest.mark.parametrize("labels", [["male", "female"], ["0-4", "10-14", "5-9"], [], ["0-4", "0-4"]])
def test_labels_that_are_not_ordered_age_groups_give_none(labels):
    assert category_midpoints(labels) is None
