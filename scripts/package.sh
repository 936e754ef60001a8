#!/usr/bin/env bash
# Builds clef's Debian package for one architecture from a static binary, with Debian's own
# dpkg-deb (package dpkg, on every Debian and Ubuntu):
#
#   scripts/package.sh --arch arm64|amd64 --bin PATH/TO/clef [--out DIR] [--version V]
#
# The package holds the binary in /usr/bin, the unit (systemd/clef.service with ExecStart=/usr/bin/clef)
# and its credentials drop-in in /lib/systemd/system, and /etc/clef/config.yaml and the example
# tables as conffiles (an upgrade keeps a user's edits). Its maintainer scripts (scripts/debian/)
# write a server token at install, start the service, restart it on upgrade, stop it on remove
# and remove config and state on purge. Prints the path of the .deb it wrote.
#
# --version defaults to Cargo.toml's version; --out to target/debian.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCH='' BIN='' OUT=target/debian VERSION=''
while [ $# -gt 0 ]; do
  case $1 in
    --arch) ARCH=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --out) OUT=$2; shift ;;
    --version) VERSION=$2; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
die() { echo "package.sh: $*" >&2; exit 1; }
case $ARCH in
  arm64) want="ARM aarch64" ;;
  amd64) want="x86-64" ;;
  *) die "--arch must be arm64 or amd64" ;;
esac
[ -f "$BIN" ] || die "--bin: no such file: ${BIN:-(not given)}"
command -v dpkg-deb >/dev/null || die "dpkg-deb is required (Debian's dpkg package)"
desc=$(file -b "$BIN" 2>/dev/null || true)
case $desc in *"$want"*) ;; *) die "$BIN is not an $want executable: $desc" ;; esac
case $desc in *"statically linked"* | *"static-pie linked"*) ;; *) die "$BIN is not statically linked: $desc" ;; esac
[ -n "$VERSION" ] || VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
[ -n "$VERSION" ] || die "no version in Cargo.toml; pass --version"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -D -m 0755 "$BIN" "$root/usr/bin/clef"
# the unit as the repository has it, with the packaged binary's path
install -d "$root/lib/systemd/system/clef.service.d"
sed -e 's|/usr/local/bin/clef|/usr/bin/clef|g' \
    -e 's|^# clef on a Raspberry Pi (README.md "Deploy to a Raspberry Pi").*|# clef, installed by its Debian package (docs/deploy.md in the source).|' \
    systemd/clef.service > "$root/lib/systemd/system/clef.service"
grep -q '^ExecStart=/usr/bin/clef ' "$root/lib/systemd/system/clef.service" || die "systemd/clef.service has no ExecStart=/usr/local/bin/clef to point at /usr/bin/clef"
install -m 0644 systemd/clef.service.d/credentials.conf "$root/lib/systemd/system/clef.service.d/"
install -D -m 0644 config.yaml "$root/etc/clef/config.yaml"
install -d "$root/etc/clef/tables/samples"
find tables -maxdepth 1 -type f -exec install -m 0644 {} "$root/etc/clef/tables/" \;
find tables/samples -maxdepth 1 -type f -exec install -m 0644 {} "$root/etc/clef/tables/samples/" \;
install -d "$root/usr/share/doc/clef"
install -m 0644 README.md "$root/usr/share/doc/clef/README.md"
install -m 0644 docs/*.md "$root/usr/share/doc/clef/"
cat > "$root/usr/share/doc/clef/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: clef
License: MIT OR Apache-2.0
COPYRIGHT

install -d "$root/DEBIAN"
install -m 0755 scripts/debian/postinst scripts/debian/prerm scripts/debian/postrm "$root/DEBIAN/"
(cd "$root" && find etc -type f | sort | sed 's|^|/|') > "$root/DEBIAN/conffiles"
size_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: clef
Version: $VERSION
Architecture: $ARCH
Maintainer: clef developers <clef@localhost>
Installed-Size: $size_kib
Section: net
Priority: optional
Recommends: systemd
Homepage: https://example.invalid/clef
Description: decision appliance for edge boxes
 clef answers "what should we do with this?" for payments, API requests, chat
 messages or an AI agent's tool calls in microseconds, from decision tables it
 serves over HTTP, explains every answer and records it for replay.
 .
 The service starts at install, closed by a bearer token written to
 /etc/clef/server.token; the admin listener stays on 127.0.0.1:9901.
CONTROL

mkdir -p "$OUT"
deb="$OUT/clef_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
