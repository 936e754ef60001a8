#!/usr/bin/env bash
# Builds the Raspberry Pi binary: target/aarch64-unknown-linux-gnu/release/clef, a stripped,
# statically linked aarch64 executable (64-bit Pi OS; Pi 3, 4, 5, Zero 2 W).
#
#   scripts/build-aarch64.sh [--x86_64] [--no-install] [--check]
#
#   --x86_64      also build the static x86_64 binary: target/x86_64-unknown-linux-gnu/release/clef
#   --no-install  never call apt-get: only say what is missing
#   --check       only check the toolchain (install what is missing unless --no-install); build nothing
#
# No Docker, no `rustup target add`: on Debian 12 (bookworm) everything comes from Debian's
# packages: the cross linker gcc-aarch64-linux-gnu, Debian's Rust (`rustc-web`, from
# bookworm-security) with its aarch64 standard library `libstd-rust-web-dev:arm64`, and
# qemu-user-static to run the result here. As root (or with sudo) the script installs them
# itself; otherwise it prints the command. Elsewhere (Ubuntu, other distributions) it uses
# rustup's aarch64 standard library when `rustup target add aarch64-unknown-linux-gnu` works
# and the cross gcc is installed, and otherwise says what is missing.
# With Docker, `cross build --release --target aarch64-unknown-linux-gnu` (cross.toml) does the
# same job.
#
# Environment: CARGO_TARGET_DIR (where cargo builds, as usual), CLEF_RUST=debian|rustup (pick the
# toolchain instead of detecting it).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
X86=0 INSTALL=1 BUILD=1
for arg in "$@"; do
  case $arg in
    --x86_64) X86=1 ;;
    --no-install) INSTALL=0 ;;
    --check) BUILD=0 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '%s\n' "build-aarch64: $*" >&2; }
die() { say "$*"; exit 1; }

# Debian's packages. libstd-rust-web-dev is Multi-Arch: same: the amd64 and arm64 versions must be
# the same, so both are installed by one apt-get command.
DEBIAN_PKGS=(rustc-web cargo-web libstd-rust-web-dev libstd-rust-web-dev:arm64
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static file)
CROSS_PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static file)

missing_pkgs() { # the packages among "$@" that dpkg does not have installed
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"
  else return 127
  fi
}

apt_install() { # packages...
  local cmd="apt-get install -y --no-install-recommends $*"
  local arch_cmd=""
  if printf '%s\n' "$@" | grep -q ':arm64$' && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    arch_cmd="dpkg --add-architecture arm64 && "
  fi
  if [ "$INSTALL" = 0 ]; then
    die "missing: $*
  install them with:  sudo sh -c '${arch_cmd}apt-get update && $cmd'"
  fi
  if ! as_root true 2>/dev/null; then
    die "missing: $* (and this user cannot install packages: not root, no password-less sudo)
  install them with:  sudo sh -c '${arch_cmd}apt-get update && $cmd'"
  fi
  say "installing: $*"
  local started=$SECONDS
  [ -z "$arch_cmd" ] || as_root dpkg --add-architecture arm64
  # Some configured repositories may be unreachable; what matters is whether the install works.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || say "apt-get update reported errors (going on)"
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; then
    die "apt-get could not install: $* (no network to the Debian mirror? a suite missing from
  /etc/apt/sources.list, such as bookworm-security for rustc-web?)"
  fi
  say "installed in $((SECONDS - started)) s"
}

# --- which Rust compiles for aarch64 -----------------------------------------------------------
rustup_has_target() {
  command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx "$TARGET"
}
is_debian_bookworm() {
  [ -r /etc/os-release ] && (. /etc/os-release && [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ])
}

RUST=${CLEF_RUST:-}
if [ -z "$RUST" ]; then
  if rustup_has_target; then RUST=rustup
  elif is_debian_bookworm; then RUST=debian
  elif command -v rustup >/dev/null; then RUST=rustup
  elif command -v apt-get >/dev/null && apt-cache show libstd-rust-web-dev >/dev/null 2>&1; then RUST=debian
  else
    die "no Rust toolchain that can build for $TARGET: install rustup (https://rustup.rs) and run
  rustup target add $TARGET
and the cross linker (Debian/Ubuntu: gcc-aarch64-linux-gnu libc6-dev-arm64-cross; Fedora:
gcc-aarch64-linux-gnu sysroot; Arch: aarch64-linux-gnu-gcc), or use cross with Docker (cross.toml)."
  fi
fi

command -v apt-get >/dev/null || HAVE_APT=0
case $RUST in
  debian)
    command -v dpkg-query >/dev/null || die "CLEF_RUST=debian needs a Debian system (dpkg, apt-get)"
    missing=$(missing_pkgs "${DEBIAN_PKGS[@]}")
    # the compiler and both standard libraries move together (one version, one apt command)
    if grep -q '^libstd-rust-web-dev\|^rustc-web' <<<"$missing"; then
      missing=$(printf '%s\n' $missing rustc-web libstd-rust-web-dev libstd-rust-web-dev:arm64 | awk '!seen[$0]++')
    fi
    [ -z "$missing" ] || apt_install $missing
    export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
    [ -x "$RUSTC" ] || die "$RUSTC is missing although rustc-web is installed"
    # Debian's std rlibs load only in Debian's exact rustc: the two packages must agree.
    [ -d /usr/lib/rustlib/$TARGET/lib ] || die "no aarch64 standard library in /usr/lib/rustlib/$TARGET (libstd-rust-web-dev:arm64)"
    ;;
  rustup)
    command -v rustup >/dev/null || die "CLEF_RUST=rustup but rustup is not installed"
    if ! rustup_has_target; then
      say "rustup target add $TARGET"
      timeout 300 rustup target add "$TARGET" || die "rustup target add $TARGET failed (no network?).
  On Debian 12, CLEF_RUST=debian uses Debian's aarch64 standard library instead."
    fi
    if [ "${HAVE_APT:-1}" = 1 ] && command -v dpkg-query >/dev/null; then
      missing=$(missing_pkgs "${CROSS_PKGS[@]}")
      [ -z "$missing" ] || apt_install $missing
    fi
    command -v aarch64-linux-gnu-gcc >/dev/null || die "the cross linker aarch64-linux-gnu-gcc is missing
  (Debian/Ubuntu: gcc-aarch64-linux-gnu libc6-dev-arm64-cross; Fedora: gcc-aarch64-linux-gnu; Arch: aarch64-linux-gnu-gcc)"
    ;;
  *) die "CLEF_RUST must be debian or rustup, not $RUST" ;;
esac
command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc is missing (gcc-aarch64-linux-gnu)"
command -v cargo >/dev/null || [ -x /usr/bin/cargo ] || die "cargo is missing"
CARGO=$(command -v cargo || echo /usr/bin/cargo)
say "toolchain: $RUST ($(${RUSTC:-rustc} --version)), linker $(command -v aarch64-linux-gnu-gcc)"
[ "$BUILD" = 1 ] || exit 0

# --- build ----------------------------------------------------------------------------------------
# .cargo/config.toml supplies the linker, +crt-static, the C cross compiler for mimalloc and
# the qemu runner; the variables repeat what matters, so that the build also works from a copy
# of the sources without that file.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
OUT=${CARGO_TARGET_DIR:-target}
started=$SECONDS
"$CARGO" build --release --locked --target "$TARGET" --bin clef
BIN=$OUT/$TARGET/release/clef

check_static() { # binary, expected `file` architecture
  local desc
  desc=$(file -b "$1")
  case $desc in
    *"$2"*) ;;
    *) die "$1 is not an $2 executable: $desc" ;;
  esac
  case $desc in
    *"statically linked"* | *"static-pie linked"*) ;;
    *) die "$1 is not statically linked: $desc" ;;
  esac
  say "$1: $(stat -c %s "$1") bytes, $desc"
}
check_static "$BIN" "ARM aarch64"

if [ "$X86" = 1 ]; then
  # rustup's (or Debian's) x86_64 std; +crt-static only for this target (never in
  # .cargo/config.toml: it would also apply to proc-macros in a plain `cargo build`).
  unset RUSTC RUSTDOC
  [ "$RUST" = debian ] && ! command -v rustc >/dev/null && export RUSTC=/usr/bin/rustc
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
    "$CARGO" build --release --locked --target x86_64-unknown-linux-gnu --bin clef
  check_static "$OUT/x86_64-unknown-linux-gnu/release/clef" "x86-64"
fi
say "built in $((SECONDS - started)) s: $BIN"
