#!/usr/bin/env bash
# Builds what `pip install` needs no compiler for: the sdist and the manylinux_2_28 wheels
#   dist/bitnet_onnx-<version>.tar.gz
#   dist/bitnet_onnx-<version>-py3-none-manylinux_2_28_x86_64.whl    (AVX2/AVX-VNNI/AVX-512 VNNI/AMX)
#   dist/bitnet_onnx-<version>-py3-none-manylinux_2_28_aarch64.whl   (NEON, dotprod, i8mm)
# on any x86-64 or aarch64 Linux, without Docker: the op library is compiled by Zig's clang from
# PyPI (`ziglang`, scripts/toolchain-zig-<arch>.cmake), which links against glibc 2.28 symbol
# versions and carries its own libc++, so no host glibc or libstdc++ leaks into the wheel.
# Each wheel is built from the sdist (so the sdist is known to build) and checked with
# `auditwheel show`; the script fails if auditwheel does not accept manylinux_2_28 or older.
#
#   scripts/build_wheels.sh [--arch x86_64|aarch64]... [--out DIR] [--check-reproducible]
#
#   --arch                 build only these wheels (default: both); the sdist is always built
#   --out DIR              where the sdist and wheels go (default: dist/)
#   --check-reproducible   build each wheel a second time in a fresh build folder with an empty
#                          Zig cache and fail unless the library and the wheel are byte-identical
#                          (more than doubles the build time)
#
# Environment: BITNET_WHEEL_WORK (default build/wheel): the build tools' venv, the ORT headers
# and one CMake build folder per architecture, kept between runs (incremental rebuilds; the first
# build per architecture also compiles Zig's libc++ into ~/.cache/zig, about a minute each).
# ONNXRUNTIME_INCLUDE_DIR: ORT C headers to use instead of fetching Debian's (scripts/fetch_ort_headers.sh).
# SOURCE_DATE_EPOCH: archive timestamps (default: the last commit's time, else scikit-build-core's fixed one).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

archs=()
out=dist
check_reproducible=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) archs+=("${2:?--arch needs x86_64 or aarch64}"); shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --check-reproducible) check_reproducible=1; shift ;;
    *) echo "build_wheels: unknown argument '$1' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
[ ${#archs[@]} -gt 0 ] || archs=(x86_64 aarch64)
for arch in "${archs[@]}"; do
  case "$arch" in x86_64|aarch64) ;; *) echo "build_wheels: --arch $arch: not x86_64 or aarch64" >&2; exit 2 ;; esac
done

work=${BITNET_WHEEL_WORK:-$repo/build/wheel}
mkdir -p "$work" "$out"
work=$(cd "$work" && pwd)
out=$(cd "$out" && pwd)
say() { echo "build_wheels: $*" >&2; }
seconds() { date +%s; }

# -- build tools: a venv of their own, pinned where the bytes depend on them ----------------------
# ziglang is pinned exactly: another compiler version gives other library bytes.
tools=$work/tools
tool_reqs=("ziglang==0.17.0" "scikit-build-core>=1.0,<2" "build>=1.2" "auditwheel>=6.1" "cmake>=3.18" "ninja")
if [ ! -f "$tools/.ready" ] || [ "$(cat "$tools/.ready")" != "${tool_reqs[*]}" ]; then
  say "installing the build tools into $tools: ${tool_reqs[*]}"
  "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/python" -m pip --disable-pip-version-check -q install "${tool_reqs[@]}"
  echo "${tool_reqs[*]}" > "$tools/.ready"
fi
python=$tools/bin/python
export PATH="$tools/bin:$PATH"       # cmake, ninja and auditwheel of the venv
export BITNET_ZIG_PYTHON=$python     # scripts/zig/*-c++ run `$BITNET_ZIG_PYTHON -m ziglang c++`

# -- ORT headers, fetched once for both architectures (the C API headers do not depend on it) ------
if [ -n "${ONNXRUNTIME_INCLUDE_DIR:-}" ]; then
  headers=$ONNXRUNTIME_INCLUDE_DIR
else
  headers=$work/ort-headers/include
  sh scripts/fetch_ort_headers.sh "$headers"
fi
[ -f "$headers/onnxruntime_c_api.h" ] || { say "$headers has no onnxruntime_c_api.h"; exit 1; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi

# -- the sdist, then the wheels from it ------------------------------------------------------------
start=$(seconds)
"$python" -m build --sdist --no-isolation --outdir "$out" . >"$work/sdist.log" 2>&1 \
  || { tail -30 "$work/sdist.log" >&2; say "sdist failed (log: $work/sdist.log)"; exit 1; }
sdist=$(ls -t "$out"/bitnet_onnx-*.tar.gz | head -1)
say "sdist: $sdist ($(($(seconds) - start)) s)"
# Unpacked always at the same path (the wheels' bytes must not depend on where the sdist was),
# and synced by content: the sdist's mtimes are all SOURCE_DATE_EPOCH, so only a file whose bytes
# changed may get a new mtime, and the CMake build folders rebuild exactly what changed.
src=$work/src
rm -rf "$work/src-new" && mkdir -p "$work/src-new" "$src"
tar -xzf "$sdist" -C "$work/src-new" --strip-components=1
"$python" - "$work/src-new" "$src" <<'PY'
import filecmp, os, shutil, sys
new, src = sys.argv[1:]
for root, dirs, files in os.walk(src, topdown=False):  # drop what the sdist no longer has
    for name in files + dirs:
        path = os.path.join(root, name)
        if not os.path.lexists(os.path.join(new, os.path.relpath(path, src))):
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
for root, dirs, files in os.walk(new):
    os.makedirs(os.path.join(src, os.path.relpath(root, new)), exist_ok=True)
    for name in files:
        fresh = os.path.join(root, name)
        kept = os.path.join(src, os.path.relpath(fresh, new))
        if not (os.path.isfile(kept) and filecmp.cmp(fresh, kept, shallow=False)):
            shutil.copyfile(fresh, kept)  # a new mtime: newer than the objects built from the old bytes
            shutil.copymode(fresh, kept)
PY
rm -rf "$work/src-new"

# One wheel per architecture, tagged py3-none-manylinux_2_28_<arch>. Python-version-free (py3,
# pyproject's wheel.py-api): the op library is a plain shared library that ONNX Runtime dlopens
# and the package itself is pure Python, so nothing in the wheel depends on CPython's ABI and one
# wheel serves every Python >= 3.10. The platform tag is explicit (_PYTHON_HOST_PLATFORM, which
# scikit-build-core takes as the tag) because the toolchain, not the host, sets the glibc floor,
# and aarch64 is cross-compiled; auditwheel below checks the tag against the library.
build_wheel() {  # arch build_dir wheel_dir
  local arch=$1 build_dir=$2 wheel_dir=$3
  rm -rf "$wheel_dir" && mkdir -p "$wheel_dir"
  _PYTHON_HOST_PLATFORM=manylinux_2_28_$arch "$python" -m build --wheel --no-isolation --outdir "$wheel_dir" \
    -C build-dir="$build_dir" \
    -C cmake.define.CMAKE_TOOLCHAIN_FILE="$src/scripts/toolchain-zig-$arch.cmake" \
    -C cmake.define.ONNXRUNTIME_INCLUDE_DIR="$headers" \
    -C wheel.reproducible=true -C install.strip=false \
    "$src" >"$build_dir.log" 2>&1 \
    || { tail -40 "$build_dir.log" >&2; say "$arch wheel failed (log: $build_dir.log)"; exit 1; }
}

library_sha() {  # wheel -> sha256 of its op library
  "$python" - "$1" <<'EOF'
import hashlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    print(hashlib.sha256(z.read("bitnet_onnx/libbitnet_onnx_ops.so")).hexdigest())
EOF
}

for arch in "${archs[@]}"; do
  start=$(seconds)
  build_wheel "$arch" "$work/$arch" "$work/wheel-$arch"
  wheel=$(ls "$work/wheel-$arch"/bitnet_onnx-*-py3-none-manylinux_2_28_"$arch".whl)
  say "$arch wheel built in $(($(seconds) - start)) s: $(basename "$wheel")"

  # auditwheel: the library's needs (glibc symbol versions, libraries) fit manylinux_2_28 or older.
  report=$(auditwheel show "$wheel" 2>&1) || { echo "$report" >&2; say "auditwheel show failed"; exit 1; }
  echo "$report" >&2
  # "... is consistent with the following platform tag: "manylinux_2_NN_<arch>"" (lines wrapped)
  verdict=$(echo "$report" | tr '\n' ' ' | grep -Eo "following platform tag: +\"manylinux_2_[0-9]+_$arch\"" | grep -Eo "manylinux_2_[0-9]+") \
    || { say "auditwheel named no manylinux tag for $(basename "$wheel")"; exit 1; }
  [ "${verdict#manylinux_2_}" -le 28 ] || { say "auditwheel: $verdict, newer than manylinux_2_28"; exit 1; }

  if [ "$check_reproducible" = 1 ]; then
    start=$(seconds)
    rm -rf "$work/$arch-again" "$work/zig-cache-again"
    # Its own Zig cache too: Zig caches compiled objects and its libc++ by their inputs, and a
    # second build served from that cache would prove nothing about the compiler's output.
    ZIG_GLOBAL_CACHE_DIR=$work/zig-cache-again ZIG_LOCAL_CACHE_DIR=$work/zig-cache-again \
      build_wheel "$arch" "$work/$arch-again" "$work/wheel-$arch-again"
    first=$(library_sha "$wheel")
    again=$(library_sha "$work/wheel-$arch-again/$(basename "$wheel")")
    [ "$first" = "$again" ] || { say "$arch: two builds gave different libraries ($first, $again)"; exit 1; }
    cmp -s "$wheel" "$work/wheel-$arch-again/$(basename "$wheel")" \
      || { say "$arch: the same library, but the two wheels' bytes differ"; exit 1; }
    say "$arch: reproducible: a second build from scratch ($(($(seconds) - start)) s) gave the same library (sha256 $first) and wheel"
    rm -rf "$work/$arch-again" "$work/$arch-again.log" "$work/wheel-$arch-again" "$work/zig-cache-again"
  fi
  cp "$wheel" "$out/"
  say "$out/$(basename "$wheel") (library sha256 $(library_sha "$wheel"))"
done
