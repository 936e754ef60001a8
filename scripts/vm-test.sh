#!/usr/bin/env bash
# clef on a booted arm64 Debian 12 with systemd as PID 1: what a Raspberry Pi owner does, done in
# a VM (qemu-system-aarch64 -M virt -cpu cortex-a72 -m 2048: a Pi 4 with 2 GB), from this host.
#
#   scripts/vm-test.sh --deb clef_V_arm64.deb --bin path/to/aarch64/clef [--keep]
#
#   1. apt install ./clef_V_arm64.deb: the service becomes active through Type=notify; /health
#      and a /decide per example table answer through the forwarded port, with the token the
#      package wrote (and 401 without it: GET /tables never shows the rules);
#   2. systemctl reload reloads; kill -9 is followed by a restart; a stopped process (SIGSTOP) is
#      restarted by the watchdog; journalctl -u clef shows clef's log lines;
#   3. a rollback pin and a kill switch survive systemctl restart and a reboot of the VM;
#   4. benches/device.sh inside the VM under MemoryMax=64M: no OOM kill, NRestarts unchanged,
#      its figures printed (emulated on this host: slow, say so when quoting them);
#   5. systemctl stop drains and exits 0; an upgrade to a newer package keeps token, config,
#      pins and switches and restarts the service; apt purge leaves nothing running or behind;
#   6. README.md's own scp path (the block after `<!-- vm-test: install -->`), then the checks of 1.
#
# The image (Debian 12 arm64 by mmdebstrap, the cloud kernel: virtio drivers, small initramfs) is
# built once and cached in $CLEF_VM_CACHE (default /var/cache/clef-ci/vm, outside the clone);
# each run boots a copy-on-write overlay of it, so runs start from the same clean system.
# Needs root (mmdebstrap, binfmt_misc) and installs what it needs from Debian's packages:
# mmdebstrap arch-test qemu-system-arm qemu-user-static binfmt-support e2fsprogs openssh-client curl.
# Every wait is bounded; the VM is stopped at the end (--keep leaves it running for a look).
# Network: user-mode networking, ssh and the decision port forwarded to 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB='' BIN='' KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --deb) DEB=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vm-test.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

started=$SECONDS
say() { printf '[vm-test %4d s] %s\n' $((SECONDS - started)) "$*"; }
die() { say "FAILED: $*"; [ -z "${CONSOLE:-}" ] || { echo "--- last lines of the VM console:"; tail -n 40 "$CONSOLE" 2>/dev/null || true; }; exit 1; }
check() { # description, command...: the command must succeed
  local what=$1; shift
  if "$@"; then say "ok: $what"; else die "$what"; fi
}
[ -f "$DEB" ] || die "--deb: no such file: ${DEB:-(not given)}"
[ -f "$BIN" ] || die "--bin: no such file: ${BIN:-(not given)}"
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap, binfmt_misc, apt-get)"

# --- what the host needs ------------------------------------------------------------------------
missing() {
  need=()
  for pair in mmdebstrap:mmdebstrap qemu-system-aarch64:qemu-system-arm qemu-aarch64-static:qemu-user-static \
    update-binfmts:binfmt-support arch-test:arch-test mkfs.ext4:e2fsprogs ssh:openssh-client curl:curl qemu-img:qemu-utils; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair##*:}")
  done
  # qemu's packages are installed together: apt may otherwise remove a qemu-utils of another
  # version (from backports) to install qemu-system-arm, and qemu-img with it
  case " ${need[*]} " in *" qemu-system-arm "*) [[ " ${need[*]} " == *" qemu-utils "* ]] || need+=(qemu-utils) ;; esac
  [ ${#need[@]} -gt 0 ]
}
# A qemu-utils newer than the release's qemu (a backport some images come with) breaks the
# release's qemu-system-common: qemu-utils is then installed at qemu-system-arm's version.
install_packages() {
  local pkgs=() p qemu
  qemu=$(apt-cache policy qemu-system-arm | awk '/Candidate:/ {print $2}')
  for p in "$@"; do
    if [ "$p" = qemu-utils ] && [ -n "$qemu" ] && [ "$qemu" != "(none)" ]; then p="qemu-utils=$qemu"; fi
    pkgs+=("$p")
  done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "${pkgs[@]}"
}
# twice: an install can remove what an earlier check found
for _ in 1 2; do
  missing || break
  say "installing ${need[*]}"
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && install_packages "${need[@]}"; } >>/tmp/clef-vm-apt.log 2>&1 ||
    die "apt-get could not install ${need[*]} (see /tmp/clef-vm-apt.log)"
done
! missing || die "still missing after installing: ${need[*]} (see /tmp/clef-vm-apt.log)"
# arm64 programs run in the image while it is built: qemu-user through binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || die "cannot mount binfmt_misc"
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 || die "cannot register qemu-aarch64 with binfmt_misc"

# --- the image, built once ----------------------------------------------------------------------
CACHE=${CLEF_VM_CACHE:-/var/cache/clef-ci/vm}
PACKAGES=systemd,systemd-sysv,udev,dbus,openssh-server,linux-image-cloud-arm64,sudo,curl,wrk,python3,procps,iproute2,ca-certificates
# the recipe's revision: change it with the recipe so that cached images are rebuilt
RECIPE="r1 bookworm $PACKAGES"
KEY_ID=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
IMAGE_DIR=$CACHE/$KEY_ID
mkdir -p "$CACHE"

build_image() {
  local tmp=$CACHE/building.$$
  rm -rf "$tmp" && mkdir -p "$tmp"
  ssh-keygen -q -t ed25519 -N '' -C clef-vm-test -f "$tmp/id_ed25519"
  say "building the arm64 image (mmdebstrap, once; cached in $IMAGE_DIR)"
  local t0=$SECONDS
  # The initramfs holds only the modules a virtio VM boots with (MODULES=list): generated under
  # qemu-user, the default (MODULES=most) takes most of half an hour.
  if ! mmdebstrap --arch=arm64 --variant=minbase --include="$PACKAGES" \
    --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/initramfs-tools/hooks" && echo MODULES=list > "$1/etc/initramfs-tools/conf.d/clef-vm.conf"' \
    --setup-hook='printf "#!/bin/sh\n[ \"\$1\" = prereqs ] && exit 0\n. /usr/share/initramfs-tools/hook-functions\nmanual_add_modules virtio_pci virtio_blk virtio_net\n" > "$1/etc/initramfs-tools/hooks/clef-vm" && chmod 755 "$1/etc/initramfs-tools/hooks/clef-vm"' \
    --customize-hook='echo clef-vm > "$1/etc/hostname" && printf "127.0.0.1 localhost\n127.0.1.1 clef-vm\n" > "$1/etc/hosts"' \
    --customize-hook='echo "/dev/vda / ext4 defaults,noatime 0 1" > "$1/etc/fstab"' \
    --customize-hook='printf "[Match]\nName=en* eth*\n[Network]\nDHCP=yes\n" > "$1/etc/systemd/network/20-wired.network"' \
    --customize-hook="install -d -m 0700 \"\$1/root/.ssh\" && install -m 0600 \"$tmp/id_ed25519.pub\" \"\$1/root/.ssh/authorized_keys\"" \
    --customize-hook='chroot "$1" systemctl enable systemd-networkd ssh' \
    --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer systemd-networkd-wait-online.service' \
    --customize-hook='cp "$1"/boot/vmlinuz-* "$1/../vmlinuz" && cp "$1"/boot/initrd.img-* "$1/../initrd.img"' \
    bookworm "$tmp/rootfs" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >"$tmp/mmdebstrap.log" 2>&1; then
    tail -n 30 "$tmp/mmdebstrap.log"
    die "mmdebstrap failed (log above; full log $tmp/mmdebstrap.log)"
  fi
  mkfs.ext4 -q -F -L clefroot -d "$tmp/rootfs" "$tmp/rootfs.img" 3G || die "mkfs.ext4 -d failed"
  rm -rf "$tmp/rootfs"
  rm -rf "$IMAGE_DIR" && mv "$tmp" "$IMAGE_DIR"
  say "image built in $((SECONDS - t0)) s: $(du -sh --apparent-size "$IMAGE_DIR/rootfs.img" | cut -f1) (sparse: $(du -sh "$IMAGE_DIR/rootfs.img" | cut -f1))"
}
[ -f "$IMAGE_DIR/rootfs.img" ] && [ -f "$IMAGE_DIR/initrd.img" ] || build_image
say "image: $IMAGE_DIR"

# --- the VM -------------------------------------------------------------------------------------
RUN=$(mktemp -d /tmp/clef-vm.XXXXXX)
CONSOLE=$RUN/console.log
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SSH_PORT=$(free_port) HTTP_PORT=$(free_port)
SSH_OPTS=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes
  -o ConnectTimeout=10 -o ServerAliveInterval=10 -o ServerAliveCountMax=6 -i "$IMAGE_DIR/id_ed25519")
vm() { ssh "${SSH_OPTS[@]}" -p "$SSH_PORT" root@127.0.0.1 "$@"; }
to_vm() { scp -q "${SSH_OPTS[@]}" -P "$SSH_PORT" "$@"; }
qemu-img create -q -f qcow2 -F raw -b "$IMAGE_DIR/rootfs.img" "$RUN/disk.qcow2"

boot() {
  local t0=$SECONDS
  qemu-system-aarch64 -M virt -cpu cortex-a72 -m 2048 -smp 2 -display none -daemonize \
    -pidfile "$RUN/qemu.pid" -serial "file:$CONSOLE" \
    -kernel "$IMAGE_DIR/vmlinuz" -initrd "$IMAGE_DIR/initrd.img" \
    -append "root=/dev/vda rw console=ttyAMA0 net.ifnames=0 systemd.show_status=0" \
    -drive "file=$RUN/disk.qcow2,if=virtio,format=qcow2" \
    -netdev "user,id=net0,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22,hostfwd=tcp:127.0.0.1:$HTTP_PORT-:8080" \
    -device virtio-net-pci,netdev=net0,romfile= || die "qemu-system-aarch64 did not start"
  wait_for 420 "ssh into the booted VM" vm true
  say "booted: ssh answers $((SECONDS - t0)) s after qemu started"
}
stop_vm() {
  if [ -f "$RUN/qemu.pid" ] && kill -0 "$(cat "$RUN/qemu.pid")" 2>/dev/null; then
    kill "$(cat "$RUN/qemu.pid")" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$(cat "$RUN/qemu.pid")" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$(cat "$RUN/qemu.pid")" 2>/dev/null || true
  fi
}
cleanup() {
  if [ "$KEEP" = 1 ]; then
    say "--keep: the VM runs on: ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1  (stop: kill \$(cat $RUN/qemu.pid))"
  else
    stop_vm
    rm -rf "$RUN"
  fi
}
trap cleanup EXIT
wait_for() { # seconds, description, command...: retry each second until it succeeds
  local limit=$1 what=$2 deadline=$((SECONDS + $1)); shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what: not within $limit s"
    sleep 1
  done
}

prop() { vm systemctl show -p "$1" --value clef; }
active() { [ "$(vm systemctl is-active clef)" = active ]; }
http() { curl -s --max-time 20 "$@"; }
# a sample per example table: tables/samples/NAME.CASE.json, posted to /decide/NAME
decide_each_table() { # token
  local n=0 sample name body
  for sample in tables/samples/*.json; do
    name=$(basename "$sample"); name=${name%%.*}
    case " $seen " in *" $name "*) continue ;; esac
    seen="$seen $name"
    body=$(http -w '\n%{http_code}' -H "Authorization: Bearer $1" --data-binary "@$sample" "127.0.0.1:$HTTP_PORT/decide/$name")
    [ "${body##*$'\n'}" = 200 ] || { say "POST /decide/$name answered ${body##*$'\n'}: ${body%$'\n'*}"; return 1; }
    grep -q '"action"' <<<"${body%$'\n'*}" || { say "POST /decide/$name: no action in ${body%$'\n'*}"; return 1; }
    n=$((n + 1))
  done
  say "decided one sample of each of $n tables through 127.0.0.1:$HTTP_PORT"
  [ "$n" -ge 5 ]
}
serving_checks() { # token: what step 1 and step 6 check
  local token=$1 code
  wait_for 60 "clef active" active
  check "Type=notify" test "$(prop Type)" = notify
  check "GET /health answers ok" bash -c "curl -s --max-time 20 127.0.0.1:$HTTP_PORT/health | grep -q '\"status\":\"ok\"'"
  code=$(http -o "$RUN/tables.out" -w '%{http_code}' "127.0.0.1:$HTTP_PORT/tables")
  check "GET /tables without the token is 401 ($code)" test "$code" = 401
  check "... and shows no rule" bash -c "! grep -q '\"rules\"' '$RUN/tables.out'"
  code=$(http -o /dev/null -w '%{http_code}' -X POST -d '{}' "127.0.0.1:$HTTP_PORT/decide")
  check "POST /decide without the token is 401 ($code)" test "$code" = 401
  code=$(http -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "127.0.0.1:$HTTP_PORT/tables")
  check "GET /tables with the token is 200 ($code)" test "$code" = 200
  seen=''
  check "a /decide per example table with the token" decide_each_table "$token"
}

boot

# --- 1. the package -----------------------------------------------------------------------------
say "1. apt install ./$(basename "$DEB")"
to_vm "$DEB" root@127.0.0.1:/root/
vm "DEBIAN_FRONTEND=noninteractive apt-get install -y ./$(basename "$DEB")" >"$RUN/install.log" 2>&1 || { cat "$RUN/install.log"; die "apt install failed"; }
grep '^clef:' "$RUN/install.log" | sed 's/^/    /'
check "the package printed where the token is" grep -q 'sudo cat /etc/clef/server.token' "$RUN/install.log"
TOKEN=$(vm cat /etc/clef/server.token)
check "a token was written (${#TOKEN} characters, mode $(vm stat -c %a /etc/clef/server.token))" test "${#TOKEN}" -ge 32
check "the token is readable by root only" test "$(vm stat -c %a /etc/clef/server.token)" = 600
serving_checks "$TOKEN"
ready_us=$(($(prop ActiveEnterTimestampMonotonic) - $(prop ExecMainStartTimestampMonotonic)))
say "start to ready (Type=notify): $((ready_us / 1000)) ms; idle MemoryCurrent $(($(prop MemoryCurrent) / 1024)) KiB; MemoryMax $(($(prop MemoryMax) / 1048576)) MiB"
check "the admin listener is on loopback only" bash -c "ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 ss -ltnH | grep -q '127.0.0.1:9901'"

# --- 2. reload, crash, hang ---------------------------------------------------------------------
say "2. reload, kill -9, SIGSTOP"
pid=$(prop MainPID) restarts=$(prop NRestarts)
vm systemctl reload clef
wait_for 30 "a reload logged" bash -c "ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 journalctl -u clef --no-pager -o cat | grep -q 'reload (SIGHUP)'"
check "systemctl reload kept the process ($pid)" test "$(prop MainPID)" = "$pid"
t0=$SECONDS
vm kill -9 "$pid"
wait_for 30 "a restart after kill -9" bash -c "[ \"\$(ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 systemctl show -p MainPID --value clef)\" != $pid ] && [ \"\$(ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 systemctl is-active clef)\" = active ]"
say "ok: restarted $((SECONDS - t0)) s after kill -9 (NRestarts $restarts -> $(prop NRestarts))"
pid=$(prop MainPID) t0=$SECONDS
vm kill -STOP "$pid"
wait_for 60 "the watchdog restarting a stopped process" bash -c "[ \"\$(ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 systemctl show -p MainPID --value clef)\" != $pid ] && [ \"\$(ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 systemctl is-active clef)\" = active ]"
say "ok: the watchdog restarted the stopped process after $((SECONDS - t0)) s (WatchdogSec=$(prop WatchdogUSec))"
check "journalctl -u clef shows the watchdog and clef's own lines" bash -c \
  "ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 journalctl -u clef --no-pager -o cat > '$RUN/journal' && grep -q 'listening on' '$RUN/journal' && grep -qi 'watchdog' '$RUN/journal'"

# --- 3. pins and switches survive restarts and reboots ------------------------------------------
say "3. a rollback pin and a kill switch across restart and reboot"
admin() { vm curl -s --max-time 20 "$@"; }
first_version=$(admin 127.0.0.1:9901/tables/risk | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
rule=$(admin 127.0.0.1:9901/tables/risk | python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"][0]["id"])')
# a new version of risk.json (a key order change is new bytes), then a rollback to the first
vm "python3 -c 'import json; p=\"/etc/clef/tables/risk.json\"; t=json.load(open(p)); json.dump(t, open(p+\".new\",\"w\"), indent=1)' && mv /etc/clef/tables/risk.json.new /etc/clef/tables/risk.json && curl -s -X POST 127.0.0.1:9901/reload >/dev/null"
check "the edited file serves a new version" bash -c "[ \"\$(ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 curl -s 127.0.0.1:9901/tables/risk | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"version\"])')\" != $first_version ]"
admin -X POST 127.0.0.1:9901/tables/risk/rollback | grep -q '"pinned":true' || die "rollback did not pin"
admin -X PUT -d false "127.0.0.1:9901/tables/risk/rules/$rule/enabled" | grep -q '"enabled":false' || die "the kill switch was not set"
pin_and_switch_hold() {
  admin 127.0.0.1:9901/tables/risk | python3 -c "
import json, sys
t = json.load(sys.stdin)
assert t['version'] == '$first_version', ('version', t['version'])
assert (t.get('pinned') or {}).get('version') == '$first_version', ('pinned', t.get('pinned'))
r = [r for r in t['rules'] if r['id'] == '$rule'][0]
assert r['enabled'] is False, r"
}
check "pinned to $first_version with rule $rule off" pin_and_switch_hold
vm systemctl restart clef
wait_for 60 "clef active after restart" active
check "... after systemctl restart" pin_and_switch_hold
vm systemctl reboot || true
sleep 5
wait_for 420 "ssh after the reboot" vm true
wait_for 90 "clef active after the reboot" active
check "... after a reboot of the VM" pin_and_switch_hold

# --- 4. device.sh under MemoryMax=64M -----------------------------------------------------------
say "4. benches/device.sh in the VM (emulated aarch64 on this host: figures far below a real Pi)"
restarts=$(prop NRestarts)
to_vm benches/device.sh root@127.0.0.1:/root/
vm "bash /root/device.sh --token-file /etc/clef/server.token --duration 3 --connections 16 --starts 2 --bench-n 1000" \
  >"$RUN/device.log" 2>&1 || { cat "$RUN/device.log"; die "device.sh failed"; }
sed 's/^/    /' "$RUN/device.log"
check "no restart during the load (NRestarts $restarts)" test "$(prop NRestarts)" = "$restarts"
oom=$(vm "awk '/^oom_kill /{print \$2}' /sys/fs/cgroup/system.slice/clef.service/memory.events")
check "no OOM kill in the unit's cgroup (oom_kill ${oom:-?})" test "${oom:-1}" = 0
check "still active" active

# --- 5. stop, upgrade, purge --------------------------------------------------------------------
say "5. stop drains and exits 0; upgrade keeps state; purge leaves nothing"
vm systemctl stop clef
check "stopped with exit status 0 (Result=$(prop Result), status $(prop ExecMainStatus))" test "$(prop ExecMainStatus)" = 0
check "the drain was logged" bash -c "ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 journalctl -u clef --no-pager -o cat -n 20 | grep -q draining"
vm systemctl start clef
wait_for 60 "clef active" active
# the same binary under a higher version: what an upgrade does to the installed system is the test
version=$(vm dpkg-query -W -f='\${Version}' clef)
newer=$(dirname "$RUN")/$(basename "$RUN")-newer
bash scripts/package.sh --arch arm64 --bin "$BIN" --out "$newer" --version "$version+vmtest1" >/dev/null
pid=$(prop MainPID) edited=$(vm sha256sum /etc/clef/tables/risk.json)
to_vm "$newer/clef_${version}+vmtest1_arm64.deb" root@127.0.0.1:/root/
rm -rf "$newer"
vm "DEBIAN_FRONTEND=noninteractive apt-get install -y ./clef_${version}+vmtest1_arm64.deb" >"$RUN/upgrade.log" 2>&1 || { cat "$RUN/upgrade.log"; die "the upgrade failed"; }
check "upgraded to $(vm dpkg-query -W -f='\${Version}' clef)" test "$(vm dpkg-query -W -f='\${Version}' clef)" = "$version+vmtest1"
wait_for 60 "clef active after the upgrade" active
check "the upgrade restarted the service" test "$(prop MainPID)" != "$pid"
check "the upgrade kept the token" test "$(vm cat /etc/clef/server.token)" = "$TOKEN"
check "the upgrade kept the edited table (a conffile)" test "$(vm sha256sum /etc/clef/tables/risk.json)" = "$edited"
check "the upgrade kept the pin and the switch" pin_and_switch_hold
vm "DEBIAN_FRONTEND=noninteractive apt-get purge -y clef" >"$RUN/purge.log" 2>&1 || { cat "$RUN/purge.log"; die "apt purge failed"; }
check "purge: nothing running" bash -c "! ssh ${SSH_OPTS[*]} -p $SSH_PORT root@127.0.0.1 pgrep -x clef"
check "purge: nothing behind (package, unit, /etc/clef, state)" vm \
  '! dpkg -s clef >/dev/null 2>&1 && [ ! -e /lib/systemd/system/clef.service ] && [ ! -e /etc/clef ] && [ ! -e /var/lib/private/clef ] && [ ! -e /var/lib/clef ] && [ ! -e /usr/bin/clef ]'

# --- 6. README.md's scp path --------------------------------------------------------------------
say "6. README.md's scp path"
# The block after the marker, as a user would type it: the lines up to `ssh "$PI"` on this
# machine (scp through the forwarded port), the rest on the Pi.
block=$(awk '/<!-- vm-test: install -->/{f=1; next} f && /^```sh/{b=1; next} b && /^```/{exit} b' README.md)
[ -n "$block" ] || die "README.md has no sh block after <!-- vm-test: install -->"
here=$(sed -n '1,/^ssh "\$PI"$/p' <<<"$block" | grep -v '^ssh "\$PI"$' | grep -v '^PI=')
there=$(sed -n '/^ssh "\$PI"$/,$p' <<<"$block" | tail -n +2)
[ -n "$here" ] && [ -n "$there" ] || die "README.md's install block must have scp lines, then ssh \"\$PI\", then the lines run on the Pi"
workdir=$(mktemp -d)
# the README's relative paths, from a copy of the checkout with the aarch64 binary where it says
cp -r README.md config.yaml systemd benches tables "$workdir/"
install -D -m 0755 "$BIN" "$workdir/target/aarch64-unknown-linux-gnu/release/clef"
(cd "$workdir" && PI=root@127.0.0.1 && scp() { command scp -q "${SSH_OPTS[@]}" -P "$SSH_PORT" "$@"; } && eval "$here") ||
  die "README's scp lines failed"
rm -rf "$workdir"
vm "set -e; cd /root; $there" >"$RUN/readme.log" 2>&1 || { cat "$RUN/readme.log"; die "README's install lines failed on the VM"; }
serving_checks "$(vm cat /etc/clef/server.token)"

say "all steps passed in $((SECONDS - started)) s"
