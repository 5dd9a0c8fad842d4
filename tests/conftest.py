"""Test-session setup.

The longest test files run first: the test command distributes whole files over two workers
(``pytest tests -n 2 --dist loadfile``), each worker taking files in collection order, so a long
file collected late runs alone on one worker after the other has finished.  First in the
collection, it runs beside the rest.  pytest-xdist would otherwise order the files by their
number of tests (its ``--loadscope-reorder``, on by default), which puts the calibrations, one
test each, last of all.
"""

#: Test files, longest first: the simulation-based calibrations (the hierarchy model's alone takes
#: about a third of the suite's time on two cores), one for each worker.
LONGEST = ("test_census_sbc.py", "test_sbc.py")


def pytest_configure(config):
    """The files in collection order (pytest-xdist's ``--no-loadscope-reorder``)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """The files of :data:`LONGEST` first, in that order; the rest in collection order."""
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))    # a stable sort
