"""The suite's tiers: which tests the quick loop (`scripts/test.sh --quick`) leaves out, and the rule that keeps
the marks true.

A tier is a pytest mark registered in pyproject.toml (``slow``, ``real_size``, ``venv``, ``qemu``). The costly
resources are fixtures that say their tier where they are defined::

    @tier_fixture("venv", scope="module")
    def optimum_venv(): ...

and a test that uses such a fixture, directly or through other fixtures, must carry the tier's mark (in
practice ``pytestmark = pytest.mark.venv`` at the top of its module). At collection, before ``-m`` deselects
anything, a test without the mark of a tier fixture it uses stops the run with one line per such module, so
the quick loop never starts a venv build, a real-size export or a qemu run by accident. ``slow`` has no
fixture: it marks tests measured over about 20 s (docs/contributing.md, "The test suite").

PYTEST_DONT_REWRITE: conftest imports it before pytest loads it as a plugin (nothing here asserts).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

TIERS = ("slow", "real_size", "venv", "qemu")
QUICK = "not (" + " or ".join(TIERS) + ")"  # what --quick adds to -m
_TIER_ATTRIBUTE = "bitnet_onnx_suite_tier"


def tier_fixture(tier: str, **fixture_options):
    """@pytest.fixture(**fixture_options) for a fixture whose users must carry ``pytest.mark.<tier>``."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}: one of {TIERS} (tests/suite_marks.py)")

    def define(function):
        setattr(function, _TIER_ATTRIBUTE, tier)
        return pytest.fixture(**fixture_options)(function)

    return define


def tiers_used(item: pytest.Item) -> dict[str, str]:
    """tier -> the name of a fixture of that tier in the item's closure (the fixtures it sets up)."""
    used = {}
    for name, definitions in getattr(item, "_fixtureinfo").name2fixturedefs.items():
        tier = getattr(definitions[-1].func, _TIER_ATTRIBUTE, None)  # [-1]: the definition the item sees
        if tier is not None:
            used.setdefault(tier, name)
    return used


def missing_marks(items: list[pytest.Item]) -> list[str]:
    """One line per module whose tests use a tier fixture without the tier's mark."""
    missing: dict[str, set[str]] = defaultdict(set)
    for item in items:
        if not hasattr(item, "_fixtureinfo"):
            continue
        for tier, fixture in tiers_used(item).items():
            if item.get_closest_marker(tier) is None:
                missing[item.nodeid.split("::")[0]].add(f"{tier} (fixture {fixture})")
    return [f"{module} uses tier fixtures without their marks: {', '.join(sorted(tiers))}; "
            f"add pytestmark = pytest.mark.<tier> (docs/contributing.md, The test suite)"
            for module, tiers in sorted(missing.items())]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help=f"the development loop: only tests outside the tiers (-m '{QUICK}')")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("quick"):
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and {QUICK}" if given else QUICK


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the quick loop checks the whole suite's marks too
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = missing_marks(items)
    if problems:
        raise pytest.UsageError("\n".join(problems))
