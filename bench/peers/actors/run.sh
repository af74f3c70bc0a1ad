#!/usr/bin/env bash
# Builds and runs the side-by-side actor benchmarks: Orrery (bench/cmd/peers) and the peer
# libraries, each program in its own module here so their dependencies never meet. Every binary
# runs RUNS times (default 3), interleaved, and the script prints one table of medians.
# Usage: run.sh [RUNS] [extra binaries...]
# Every binary prints lines in one format:
#   "<lib> <scenario> n=<N> <duration> <rate> <unit>"  and  "<lib> call-latency p50=<d> p99=<d> max=<d>"
set -eu
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-3}; shift || true
out=$(mktemp -d)
(cd "$here/../.." && go build -o "$out/bin_orrery" ./cmd/peers)
for lib in hollywood protoactor goakt goactor ergo2; do
  (cd "$here/$lib" && go build -o "$out/bin_$lib" .) || echo "# build failed: $lib" >&2
done
: > "$out/raw.txt"
for i in $(seq 1 "$runs"); do
  for b in "$out"/bin_* "$@"; do
    [ -x "$b" ] || continue
    extra=""; case "$b" in *bin_ergo2) extra="-ergo.warning=false";; esac
    timeout 300 "$b" $extra 2>/dev/null | grep -v '^#' >> "$out/raw.txt" || true
  done
done
python3 "$here/summarize.py" "$out/raw.txt"
echo "# raw output: $out/raw.txt"
