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
extras=reference
[ "$want_test" = 1 ] && extras=test
cache=${BITNET_ONNX_TEST_CACHE:-$HOME/.cache/bitnet-onnx-tests}  # the tests' cache: one folder to wipe

# The editable install compiles the op library into build/ of this checkout, so a fresh clone
# compiles it all again: through ccache where installed (CMake >= 3.17 reads the launchers from the
# environment), in the tests' cache (tests/build_cache.py). CCACHE_BASEDIR: the compile commands name
# the sources by absolute path; relative to build/, they are the same in every clone.
if command -v ccache >/dev/null 2>&1; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$PWD
    export CCACHE_DIR=$cache/ccache
fi

# install_into VENV: the venv (made if missing) with pip, PyTorch's CPU build and this package with
# $extras, editable. pip compiles what it installs to bytecode one file at a time, most of the set-up's
# time: the installs skip it and compileall does it on every core, torch's files while the package
# installs when torch is new (a venv that had it, set up before or linked, is compiled already: the
# last pass alone finds what pip wrote). The venv needs the .pyc files: where PYTHONDONTWRITEBYTECODE
# is set (CI sets it), an import compiles a module it finds without one and keeps nothing, in every
# process. A file pip is still writing may compile from half its text; the last pass sees its size
# changed and compiles it again.
# compileall's status is not checked, as pip's own compile step does not check it: packages ship files
# that no Python 3 compiles (test data, templates), and an import never reads those.
install_into() {
    local venv=$1 site_packages compiling=
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
    "${pip[@]}" install --upgrade pip >/dev/null
    site_packages=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    local new_torch=1
    if [ -d "$site_packages/torch" ]; then new_torch=0; fi
    # The CPU build of PyTorch (a plain `torch` requirement could pull a multi-GB CUDA build).
    "${pip[@]}" install --no-compile torch==2.13.0
    if [ "$new_torch" = 1 ]; then
        "$venv/bin/python" -m compileall -qq -j 0 "$site_packages" >/dev/null 2>&1 &
        compiling=$!
    fi
    "${pip[@]}" install --no-compile -e ".[$extras]"
    if [ -n "$compiling" ]; then
        wait "$compiling" || true
    fi
    "$venv/bin/python" -m compileall -qq -j 0 "$site_packages" >/dev/null 2>&1 || true
}

# link_template: a new .venv (--test) as hard links to a venv of every dependency kept in the cache,
# made once per pyproject.toml, this script and Python (the key), so a fresh clone on a machine that
# set up before (CI) installs the package alone, not its 3 GB of dependencies. Links, not copies: a
# clone costs no disk and no copying; pip and compileall replace a file (a new one renamed over it),
# never write into one, so nothing done in .venv reaches the template. The files naming the template's
# path (bin/'s scripts, pyvenv.cfg) are written anew with .venv's. A lock serializes the set-ups of
# several clones; a template without its marker (a build cut short) is made again; the three used last
# are kept, older ones removed (a clone's links outlive its template). Where links cannot be made (the
# cache on another file system) it leaves no .venv, and the plain install follows.
link_template() {
    local templates=$cache/venvs/setup key template linking
    key=$({ "$python" -c 'import sys, platform; print(sys.executable, sys.version, platform.machine())'
            cat pyproject.toml scripts/setup.sh; } | sha256sum | cut -c1-16)
    template=$templates/$key
    mkdir -p "$templates"
    exec 9>"$template.lock"  # held until the links are made (not in a subshell: `set -e` holds here)
    flock 9
    if [ ! -f "$template/.complete" ]; then
        rm -rf "$template"
        echo "setup: installing the dependencies once into $template"
        install_into "$template"
        "$template/bin/python" -m pip --disable-pip-version-check -q uninstall -y bitnet-onnx
        touch "$template/.complete"
    fi
    touch "$template"
    if ! linking=$(cp -al "$template" .venv 2>&1); then
        exec 9>&-
        echo "setup: cannot link .venv to $template (${linking%%$'\n'*}); installing into .venv" >&2
        rm -rf .venv
        return 0
    fi
    exec 9>&-
    rm .venv/.complete
    { grep -rlF "$template" .venv/bin .venv/pyvenv.cfg || true; } | while IFS= read -r file; do
        sed "s#$template#$PWD/.venv#g" "$file" > "$file.new"
        chmod --reference="$file" "$file.new"
        mv "$file.new" "$file"
    done
    ls -1dt "$templates"/*/ | tail -n +4 | while IFS= read -r old; do
        ( flock -n 9 && rm -rf "$old" ) 9>"${old%/}.lock" || true  # in use: left for now
    done
}

if [ "$want_test" = 1 ] && [ ! -e .venv ]; then
    link_template  # called plainly: `set -e` is off in a function called as `f || ...`
fi
install_into .venv
echo "setup: ready (.venv/bin/bitnet-onnx)"
