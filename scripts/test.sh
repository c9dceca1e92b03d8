#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh --test) and runs the whole test suite on two workers
# (pytest-xdist; tests/suite_groups.py says how the suite splits). pytest's options pass through:
#   scripts/test.sh --quick      the development loop: all but the slow, real-size, venv and qemu tiers
#   scripts/test.sh tests/test_op.py -k nbits -n 0
# CI and the plain command run everything (docs/contributing.md, "The test suite").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"
