#!/usr/bin/env bash
# Builds a release: the static binaries for aarch64 (Raspberry Pi, 64-bit OS) and x86_64, the
# Debian packages for arm64 and amd64, and SHA256SUMS over all of them:
#
#   scripts/release.sh [--out DIR] [--version V]
#
#   DIR/clef-VERSION-aarch64-unknown-linux-gnu     static binary (scp path: README.md)
#   DIR/clef-VERSION-x86_64-unknown-linux-gnu      static binary
#   DIR/clef_VERSION_arm64.deb, clef_VERSION_amd64.deb
#   DIR/SHA256SUMS                                 check with: cd DIR && sha256sum -c SHA256SUMS
#
# The binaries come from scripts/build-aarch64.sh --x86_64 (which installs Debian's cross
# toolchain as root on first use), the packages from scripts/package.sh. --out defaults to
# target/release-dist; CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=target/release-dist VERSION=''
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift ;;
    --version) VERSION=$2; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$VERSION" ] || VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

bash scripts/build-aarch64.sh --x86_64
built=${CARGO_TARGET_DIR:-target}
mkdir -p "$OUT"
for pair in aarch64:arm64 x86_64:amd64; do
  triple=${pair%%:*}-unknown-linux-gnu arch=${pair##*:}
  install -m 0755 "$built/$triple/release/clef" "$OUT/clef-$VERSION-$triple"
  bash scripts/package.sh --arch "$arch" --bin "$OUT/clef-$VERSION-$triple" --out "$OUT" --version "$VERSION" >/dev/null
done
(cd "$OUT" && sha256sum "clef-$VERSION-"* "clef_${VERSION}_"*.deb > SHA256SUMS)
echo "release $VERSION in $OUT:"
(cd "$OUT" && ls -l "clef-$VERSION-"* "clef_${VERSION}_"*.deb SHA256SUMS | awk '{printf "  %-45s %10s bytes\n", $9, $5}')
