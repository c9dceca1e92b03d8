"""How a run with pytest-xdist workers (`scripts/test.sh` runs two: `-n 2 --dist loadgroup`) splits the suite.

The unit of work is a group: by default a test module, so a module's fixtures are built by one worker
only; the modules that use an expensive session fixture of SHARED_FIXTURE_GROUPS (the real Gemma3-270M
exports, the real-width models) form that fixture's group, so it is built once (a module may also name
its group: ``pytest.mark.xdist_group("<name>")``). Groups go out by their count of ``slow`` and
``real_size`` tests, most first, so the long ones overlap instead of ending the run alone (the scheduler
hands groups out in collection order once xdist's own reordering, by a group's number of tests, is
off). Without workers nothing changes.

PYTEST_DONT_REWRITE: conftest imports it before pytest loads it as a plugin (nothing here asserts).
"""

from __future__ import annotations

from collections import Counter

import pytest

# Session fixtures worth building once in a run (GBs of real-size models and exports, minutes to make):
# every module that uses one joins its group, so one worker builds it, and a worker holds at most one
# group's real-size models at a time (24 GB hold two such modules at once, not four).
SHARED_FIXTURE_GROUPS = {
    "gemma3_270m": "real-gemma3", "gemma3_270m_export": "real-gemma3",
    "real_width_model": "real-width", "real_width_layout_export": "real-width",
}


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def module_groups(items: list[pytest.Item]) -> dict[str, str]:
    """module -> its group: a given xdist_group mark, else the group of a shared fixture it uses, else itself."""
    groups: dict[str, str] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[_module(item)] = str(mark.args[0] if mark.args else mark.kwargs["name"])
        for name in item.fixturenames:
            if name in SHARED_FIXTURE_GROUPS:
                groups.setdefault(_module(item), SHARED_FIXTURE_GROUPS[name])
    return {_module(item): groups.get(_module(item), _module(item)) for item in items}


def pytest_configure(config: pytest.Config) -> None:
    # xdist sorts the groups by their number of tests, most first (--loadscope-reorder, its default), which
    # sent the two real-size groups (a few dozen tests, half the run's time) after four op modules of
    # 100-200 quick tests each: the order below is kept only with that sort off (the scheduler reads the
    # option on the controller, which has no workerinput).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # only a worker's collection feeds the scheduler
        return
    groups = module_groups(items)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[_module(item)]))
    # A group's count of slow and real-size tests stands for its time (the real-size groups hold the
    # most): the longest go first, so the short ones fill in at the end (longest-first scheduling).
    slow_tests = Counter(groups[_module(item)] for item in items
                         if item.get_closest_marker("slow") or item.get_closest_marker("real_size"))
    items.sort(key=lambda item: -slow_tests[groups[_module(item)]])  # stable: order inside a group stays
