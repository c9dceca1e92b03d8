"""How the workers split the suite (tests/suite_groups.py), run on a small suite of its own with two
xdist workers, as scripts/test.sh runs: every module is one unit of work, the modules sharing an expensive
session fixture are one unit, and xdist really sends each unit to one worker. That last part broke
silently once: pytest 9.2's structured node ids ignore the group suffix pytest-xdist 3.8 writes
(pytest-dev/pytest-xdist#1386), so every test went its own way and each worker built the shared
fixtures again; pyproject.toml keeps pytest below 9.2 until xdist carries the group another way."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

CONFTEST = """
import pytest

pytest_plugins = ["suite_groups"]

@pytest.fixture(scope="session")
def real_width_model():  # a name SHARED_FIXTURE_GROUPS knows: its users form one group
    return "model"
"""
# four tests per module, so a split of a unit would show
SHARED_USER = "".join(f"def test_{i}(real_width_model):\n    pass\n" for i in range(4))
PLAIN = "".join(f"def test_{i}():\n    pass\n" for i in range(4))


def _workers_by_unit(lines: list[str]) -> dict[str, set[str]]:
    """unit (the @group suffix of the node id) -> the workers that ran its tests, from -v output."""
    units: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        found = re.match(r"\[(gw\d+)\] .*PASSED (\S+)", line)
        if found:
            worker, nodeid = found.groups()
            units[nodeid.rsplit("@", 1)[1] if "@" in nodeid else nodeid].add(worker)
    return units


def test_each_unit_of_work_runs_on_one_worker(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # suite_groups, as tests/conftest.py loads it
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_shared_a=SHARED_USER, test_shared_b=SHARED_USER, test_plain_a=PLAIN, test_plain_b=PLAIN)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=16)
    units = _workers_by_unit(result.outlines)
    # the node ids carry their unit: a module, or the shared fixture's group for its users
    assert set(units) == {"real-width", "test_plain_a.py", "test_plain_b.py"}, result.outlines
    assert all(len(workers) == 1 for workers in units.values()), units


def test_the_groups_with_the_most_slow_tests_go_first(pytester: pytest.Pytester, monkeypatch):
    """One worker runs the units in the order the scheduler hands them out: by their count of slow and
    real-size tests, most first, not xdist's default (most tests first), which put the real-size groups
    behind the op modules' hundreds of quick tests."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    real_size: real size\n")
    ran = pytester.path / "ran.txt"
    record = f"def _record(name):\n    with open({str(ran)!r}, 'a') as f:\n        f.write(name + '\\n')\n"
    many_quick = record + "".join(f"def test_{i}():\n    _record('many_quick')\n" for i in range(6))
    one_slow = record + "import pytest\n@pytest.mark.slow\ndef test_0():\n    _record('one_slow')\n"
    two_slow = record + ("import pytest\npytestmark = pytest.mark.real_size\n"
                         + "".join(f"def test_{i}():\n    _record('two_slow')\n" for i in range(2)))
    pytester.makepyfile(test_a_many_quick=many_quick, test_b_one_slow=one_slow, test_c_two_slow=two_slow)
    result = pytester.runpytest_subprocess("-n", "1", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=9)
    order = list(dict.fromkeys(ran.read_text().split()))
    assert order == ["two_slow", "one_slow", "many_quick"], order
