# What the load scripts in benches/ share (sourced, not run): the wrk check, the binary, free
# loopback ports, and a process's CPU time and resident memory from /proc.
# (benches/device.sh stays self-contained: it is copied to a Pi on its own.)

command -v wrk >/dev/null || { echo "wrk is required: apt-get install wrk" >&2; exit 1; }
# BIN=path measures another binary; by default the checkout's release build
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=$PWD/target/release/clef
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# utime + stime of PID, in clock ticks
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# resident memory of PID: in KiB, and in MiB with one decimal
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# Runs wrk with the given arguments against the server PID (first argument) and sets WRK_OUT
# (wrk's report), REQS, RPS, P99 (as wrk writes it) and CPU_US: the server's CPU time per request
# over the run, in microseconds (utime + stime from /proc: independent of the load).
wrk_measured() {
  local pid=$1 before after
  shift
  before=$(cpu_ticks "$pid")
  WRK_OUT=$(wrk "$@")
  after=$(cpu_ticks "$pid")
  REQS=$(echo "$WRK_OUT" | awk '/requests in/ {print $1}')
  RPS=$(echo "$WRK_OUT" | awk '/Requests\/sec/ {print $2}')
  P99=$(echo "$WRK_OUT" | awk '$1=="99%" {print $2}')
  CPU_US=$(awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$REQS" 'BEGIN {printf "%.3f", ticks / hz * 1e6 / n}')
}
