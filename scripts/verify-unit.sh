#!/usr/bin/env bash
# Checks systemd/clef.service with `systemd-analyze verify` (CI runs it): any warning fails.
#
#   scripts/verify-unit.sh [CLEF_BIN]
#
# verify needs ExecStart's binary to exist: it checks a copy of the unit whose ExecStart
# points at a temporary copy of CLEF_BIN (default target/release/clef). It needs no running
# systemd; systemd-analyze comes with Debian's `systemd` package (installed if missing, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/clef}
fail() { echo "verify-unit: FAILED: $*" >&2; exit 1; }
if ! command -v systemd-analyze >/dev/null; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || fail "systemd-analyze is missing (Debian: apt-get install systemd)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null ||
    fail "apt-get could not install systemd (for systemd-analyze)"
fi
[ -x "$BIN" ] || fail "no clef binary at $BIN"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$BIN" "$WORK/clef"
sed "s#/usr/local/bin/clef#$WORK/clef#g" systemd/clef.service >"$WORK/clef.service"
grep -q "^ExecStart=$WORK/clef serve" "$WORK/clef.service" || fail "ExecStart is not /usr/local/bin/clef serve ..."
out=$(systemd-analyze verify --man=no "$WORK/clef.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
echo "verify-unit: systemd/clef.service verifies ($(systemd-analyze --version | head -n 1))"
