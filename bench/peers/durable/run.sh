#!/usr/bin/env bash
# Builds and runs the side-by-side durable-execution benchmarks for the peer libraries and for
# Orrery (bench/cmd/durable: worlds as orrery-sqlite and orrery-pg, the workflow API as orrery-wf-sqlite
# and orrery-wf-pg, which run e2e-latency and workflow3 only), RUNS times each (default 1), and
# prints a median table (run i starts i-1 places further down the list of binaries). Usage: run.sh [RUNS] [extra binaries...]
# Scenario definitions: bench/README.md ("Side by side with the durable-execution peers").
# Needs a running PostgreSQL; DSN from
# PEERS_PG_DSN (default postgres://orrery:orrery@127.0.0.1:5432/orrery?sslmode=disable, a superuser
# role: each peer, and orrery-pg, drops and recreates its own database). An extra binary must print
# lines in the same format to join the same table:
#   "<lib> <scenario> n=<N> <duration> <rate> <unit>"      (scenarios: enqueue work workflow3)
#   "<lib> <scenario> p50=<x>ms p99=<y>ms max=<z>ms"       (e2e-latency workflow3-latency timer-lateness)
#   "<lib> <scenario> unsupported"  or  "<lib> <scenario> failed ..."
#   "# ..." lines are comments; "# <lib> <module>@<version>" lines are echoed above the table.
# Per-peer flags (N, tuning) are set below in peer_args; every binary also accepts -h.
# PEERS_EXTRA_ARGS is appended to the flags of the three peers and of Orrery (not of extra binaries), e.g. for a smoke
# test: PEERS_EXTRA_ARGS="-n 500 -e2e 100 -wf3 100 -timers 50" run.sh 1
set -eu
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-1}; shift || true
out=$(mktemp -d)
cur=""
cleanup() {
  if [ -n "$cur" ]; then kill "$cur" 2>/dev/null || true; wait "$cur" 2>/dev/null || true; fi
  rm -f "$out"/bin_river "$out"/bin_dbos "$out"/bin_gowf "$out"/bin_orrery
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# go-workflows' and orrery-sqlite's SQLite files live in $out: its fsyncs must reach a real disk, not tmpfs.
if [ "$(stat -f -c %T "$out" 2>/dev/null)" = "tmpfs" ]; then
  echo "# warning: $out is on tmpfs; SQLite fsync is not durable there (set TMPDIR to a disk path)" >&2
fi

peer_args() {
  case "$1" in
    *bin_river) echo "-n 20000 ${PEERS_EXTRA_ARGS:-}";;
    *bin_dbos)  echo "-n 20000 ${PEERS_EXTRA_ARGS:-}";;
    *bin_gowf)  echo "-n 5000 -dir $out ${PEERS_EXTRA_ARGS:-}";;  # SQLite: 20,000 would take ~5 min for work alone
    *bin_orrery:sqlite) echo "-store sqlite -dir $out ${PEERS_EXTRA_ARGS:-}";;  # same N as river and dbos
    *bin_orrery:pg)     echo "-store pg ${PEERS_EXTRA_ARGS:-}";;
    *bin_orrery:wf-sqlite) echo "-api workflow -store sqlite -dir $out ${PEERS_EXTRA_ARGS:-}";;
    *bin_orrery:wf-pg)     echo "-api workflow -store pg ${PEERS_EXTRA_ARGS:-}";;
    *)          echo "";;
  esac
}

for lib in river dbos gowf; do
  (cd "$here/$lib" && go build -o "$out/bin_$lib" .) || echo "# build failed: $lib" >&2
done
# Orrery's program lives in the bench module two levels up (it replaces the main module with ../).
(cd "$here/../.." && go build -o "$out/bin_orrery" ./cmd/durable) || echo "# build failed: orrery (bench/cmd/durable)" >&2
: > "$out/raw.txt"
# settle lets every binary start against a quiet server: the previous binary's dirty pages are written out
# (CHECKPOINT, when psql is installed and the role may) and the disks synced, so no row pays for the
# background writes of the rows before it.
settle() {
  if command -v psql >/dev/null 2>&1; then
    psql -q "${PEERS_PG_DSN:-postgres://orrery:orrery@127.0.0.1:5432/orrery?sslmode=disable}" -c CHECKPOINT >/dev/null 2>&1 || true
  fi
  sync
  sleep 2
}
# Run i starts i-1 places further down the list (and wraps): with RUNS > 1 no binary always runs last,
# when the machine has been busiest longest, and the medians do not carry one row's place in the order.
bins=("$out"/bin_river "$out"/bin_dbos "$out"/bin_gowf "$out/bin_orrery:sqlite" "$out/bin_orrery:pg" \
      "$out/bin_orrery:wf-sqlite" "$out/bin_orrery:wf-pg" "$@")
for i in $(seq 1 "$runs"); do
  for k in $(seq 0 $((${#bins[@]} - 1))); do
    b=${bins[$(((k + i - 1) % ${#bins[@]}))]}
    exe=${b%%:*}   # bin_orrery:<variant> runs bin_orrery once per variant (its flags: peer_args)
    [ -x "$exe" ] || continue
    settle
    echo "# run $i: $(basename "$b") $(peer_args "$b")" >&2
    # shellcheck disable=SC2046
    timeout 300 "$exe" $(peer_args "$b") >>"$out/raw.txt" 2>>"$out/stderr.txt" &
    cur=$!
    rc=0; wait "$cur" || rc=$?
    [ "$rc" = 0 ] || echo "# $(basename "$b") exited with status $rc" | tee -a "$out/raw.txt" >&2
    cur=""
  done
done
python3 "$here/summarize.py" "$out/raw.txt"
echo "# raw output: $out/raw.txt (stderr: $out/stderr.txt)"
