#!/bin/sh
# Fetch the ONNX Runtime C/C++ headers (the onnxruntime wheel ships none) from Debian trixie's
# libonnxruntime-dev .deb, using a private apt state so the system's apt sources stay untouched.
# Only the headers are kept: DEST/onnxruntime_c_api.h, ... (MIT licensed, never committed).
#
# usage: scripts/fetch_ort_headers.sh DEST_DIR
# needs: apt-get, dpkg-deb (Debian/Ubuntu), network access to deb.debian.org, and
#        /usr/share/keyrings/debian-archive-keyring.gpg (package debian-archive-keyring).
set -eu

DEST=${1:?usage: fetch_ort_headers.sh DEST_DIR}
MIRROR=${BITNET_ONNX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

if [ -f "$DEST/onnxruntime_c_api.h" ]; then
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_ort_headers: '$tool' not found (needs a Debian/Ubuntu system)" >&2; exit 1; }
done
[ -f "$KEYRING" ] || { echo "fetch_ort_headers: $KEYRING missing (apt-get install debian-archive-keyring)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ort-apt.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache" "$WORK/archives/partial" "$WORK/debs" "$WORK/x"
echo "deb [signed-by=$KEYRING] $MIRROR trixie main" > "$WORK/sources.list"

# Private state: our own source list, lists and cache; the host architecture's package.
APT_OPTS="-o Dir::Etc::SourceList=$WORK/sources.list -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists=$WORK/lists -o Dir::Cache=$WORK/cache -o Dir::Cache::Archives=$WORK/archives
  -o Dir::State::Status=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get -q $APT_OPTS update >&2
# shellcheck disable=SC2086
(cd "$WORK/debs" && apt-get -q $APT_OPTS download libonnxruntime-dev >&2)

deb=$(ls "$WORK"/debs/libonnxruntime-dev_*.deb)
dpkg-deb -x "$deb" "$WORK/x"
src="$WORK/x/usr/include/onnxruntime"
[ -f "$src/onnxruntime_c_api.h" ] || { echo "fetch_ort_headers: $deb has no onnxruntime_c_api.h" >&2; exit 1; }

# Copy into a temp dir next to DEST, then rename, so a failed run leaves no half-filled DEST.
mkdir -p "$(dirname "$DEST")"
tmp="$DEST.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$src"/*.h "$tmp"/
rm -rf "$DEST"
mv "$tmp" "$DEST"
echo "fetch_ort_headers: $(basename "$deb") headers -> $DEST" >&2
