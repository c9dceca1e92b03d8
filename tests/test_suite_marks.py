"""The tiers' rule (tests/suite_marks.py), run on small suites of its own: a test that uses a tier fixture
without the tier's mark stops the collection by its module's name, and --quick leaves the tiers out."""

from __future__ import annotations

from pathlib import Path

import pytest

import suite_marks

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

CONFTEST = """
import pytest
from suite_marks import tier_fixture

pytest_plugins = ["suite_marks"]

@tier_fixture("venv", scope="session")
def a_venv():
    return "venv"

@pytest.fixture
def uses_a_venv(a_venv):  # the tier reaches a test through other fixtures too
    return a_venv
"""
INI = """
[pytest]
markers =
    slow: s
    real_size: r
    venv: v
    qemu: q
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.syspathinsert(TESTS)  # suite_marks, as tests/conftest.py loads it
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    return pytester


def test_unmarked_user_of_a_tier_fixture_stops_the_run_by_module(suite):
    suite.makepyfile(test_direct="def test_a(a_venv):\n    pass\n",
                     test_indirect="def test_b(uses_a_venv):\n    pass\n",
                     test_plain="def test_c():\n    pass\n")
    result = suite.runpytest("--quick")  # the check runs before -m deselects
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if "uses tier fixtures without their marks" in line]
    modules = [line.removeprefix("ERROR: ").split()[0] for line in errors]
    assert modules == ["test_direct.py", "test_indirect.py"], result.stderr.lines
    assert all("venv (fixture a_venv)" in line for line in errors)


def test_marked_users_run_in_full_and_leave_the_quick_loop(suite):
    suite.makepyfile(test_marked="import pytest\npytestmark = pytest.mark.venv\n"
                                 "def test_a(uses_a_venv):\n    assert uses_a_venv == 'venv'\n",
                     test_slow="import pytest\n@pytest.mark.slow\ndef test_s():\n    pass\n"
                               "def test_fast():\n    pass\n")
    suite.runpytest().assert_outcomes(passed=3)
    quick = suite.runpytest("--quick")
    quick.assert_outcomes(passed=1, deselected=2)
    assert suite.runpytest("--quick", "-m", "venv").ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_every_tier_is_registered_in_pyproject(pytestconfig):
    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    assert set(suite_marks.TIERS) <= registered


def test_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="unknown tier 'fast'"):
        suite_marks.tier_fixture("fast")
