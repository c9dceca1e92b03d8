#!/usr/bin/env bash
# Sets up a fresh machine for bitnet-onnx: system pieces, a venv in .venv, the package.
#   scripts/setup.sh          runtime + PyTorch reference (what `demo` uses)
#   scripts/setup.sh --test   also the test tools (pytest, aarch64 cross compiler, qemu-user, ccache)
# Safe to re-run: it installs only what is missing and rebuilds the op library incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

apt_missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || apt_missing+=("$2"); }
need_cmd g++ g++
need_cmd dpkg-deb dpkg          # scripts/fetch_ort_headers.sh unpacks ORT headers from a .deb
if [ "$want_test" = 1 ]; then
    need_cmd aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
    need_cmd qemu-aarch64 qemu-user
    need_cmd ccache ccache          # the tests' builds (tests/build_cache.py) and the op library's below
fi
if [ ${#apt_missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: please install these Debian packages first: ${apt_missing[*]}" >&2
        exit 1
    fi
    echo "setup: apt-get install ${apt_missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip >/dev/null
# pip compiles what it installs to bytecode one file at a time, most of the set-up's time: the installs
# skip it and compileall does it on every core, torch's files while the package installs. The venv
# needs the .pyc files: where PYTHONDONTWRITEBYTECODE is set (CI sets it), an import compiles a module
# it finds without one and keeps nothing, in every process. A file pip is still writing may compile
# from half its text; the last pass sees its size changed and compiles it again. compileall's status
# is not checked, as pip's own compile step does not check it: packages ship files that no Python 3
# compiles (test data, templates), and an import never reads those.
site_packages=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
compile_site_packages() { .venv/bin/python -m compileall -qq -j 0 "$site_packages" >/dev/null 2>&1 || true; }
# The CPU build of PyTorch (a plain `torch` requirement could pull a multi-GB CUDA build).
"${pip[@]}" install --no-compile torch==2.13.0
compile_site_packages &
compiling=$!
extras=reference
[ "$want_test" = 1 ] && extras=test
# The editable install compiles the op library into build/ of this checkout, so a fresh clone
# compiles it all again: through ccache where installed (CMake >= 3.17 reads the launchers from the
# environment), in the tests' cache (tests/build_cache.py: one place to wipe). CCACHE_BASEDIR: the
# compile commands name the sources by absolute path; relative to build/, they are the same in every clone.
if command -v ccache >/dev/null 2>&1; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$PWD
    export CCACHE_DIR=${BITNET_ONNX_TEST_CACHE:-$HOME/.cache/bitnet-onnx-tests}/ccache
fi
"${pip[@]}" install --no-compile -e ".[$extras]"
wait "$compiling"
compile_site_packages
echo "setup: ready (.venv/bin/bitnet-onnx)"
