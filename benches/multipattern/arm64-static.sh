#!/usr/bin/env bash
# Can Vectorscan go into a static aarch64 binary? (issue 28)
#
#   benches/multipattern/arm64-static.sh [OUT]
#
# Needs (root): dpkg --add-architecture arm64 && apt-get update (as for the Pi build), then
# apt-get install -y g++-aarch64-linux-gnu qemu-user-static. Fetches Debian's arm64
# libvectorscan packages with `apt-get download` (unpacked into OUT, nothing installed), links
# hs_bench.c statically against their libhs.a and the cross libstdc++, and runs it under qemu
# (cortex-a72, a Pi 4) on the first 40 textmod patterns that have no \w, \W or \p (compiling
# is slow under emulation). Prints the binary's size and what `file` says of it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/clef-multipattern-arm64}
mkdir -p "$OUT/deb"
cd "$OUT/deb"
apt-get download libvectorscan-dev:arm64 libvectorscan5:arm64 >/dev/null
for f in *.deb; do dpkg -x "$f" "$OUT/root"; done
LIB=$OUT/root/usr/lib/aarch64-linux-gnu
ls -l "$LIB"/libhs.a "$LIB"/libhs_runtime.a
aarch64-linux-gnu-gcc -O2 -static -o "$OUT/hs_bench" "$HERE/hs_bench.c" -I"$OUT/root/usr/include" -L"$LIB" -lhs -lstdc++ -lm
aarch64-linux-gnu-strip -o "$OUT/hs_bench.stripped" "$OUT/hs_bench"
file "$OUT/hs_bench"
ls -l "$OUT/hs_bench" "$OUT/hs_bench.stripped"
# NEON instructions in the runtime library (table lookups and vector compares of its scanners)
echo "NEON tbl/cmeq/addp/umaxv/ushr in libhs_runtime.a: $(aarch64-linux-gnu-objdump -d "$LIB/libhs_runtime.a" | grep -cE '\s(tbl|cmeq|ushr|umaxv|addp)\s+v[0-9]+')"
python3 "$HERE/extract.py" --out "$OUT/data" --rules 500 --shapes textmod >/dev/null
head -40 "$OUT/data/textmod-500.patterns" | grep -v '\\[wWp]' > "$OUT/small.patterns"
qemu-aarch64-static -cpu cortex-a72 "$OUT/hs_bench" -a 1 -n 200 -t 1 "$OUT/small.patterns" "$OUT/data/msg-textmod.txt" "$OUT/data/msg-4k.txt"
