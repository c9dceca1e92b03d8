#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh) and runs `bitnet-onnx demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/bitnet-onnx demo "$@"
