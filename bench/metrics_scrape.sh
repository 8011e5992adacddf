#!/usr/bin/env bash
# Scrape cost of /metrics, hand-written registry (baseline) against prometheus-cpp, in one run:
# builds bench/metrics_scrape_bench.cc with the baseline's common/metrics.{h,cc} taken from git
# and the tree's common/metrics_exposition.cc, runs it, and writes bench/results/metrics.{md,json}.
#
#   bench/metrics_scrape.sh [JOBS [RANKS [ROUNDS]]]      (default 100 64 15)
set -euo pipefail
cd "$(dirname "$0")/.."
BASELINE=8af9c63  # the last commit with common/metrics.{h,cc}
jobs=${1:-100} ranks=${2:-64} rounds=${3:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/common"
for f in metrics.h metrics.cc; do git show "$BASELINE:common/$f" > "$tmp/common/$f"; done
# -O2 as the Release build of the controller (CMake); the include order puts the baseline's
# common/metrics.h first, the tree's metrics_exposition.h next.
g++ -std=c++17 -O2 -DDHP_METRICS_BASELINE -I"$tmp" -I. -o "$tmp/bench" bench/metrics_scrape_bench.cc \
    "$tmp/common/metrics.cc" common/metrics_exposition.cc common/check.cc -lprometheus-cpp-core \
    -pthread
"$tmp/bench" "$jobs" "$ranks" "$rounds" "$tmp/metrics"
mkdir -p bench/results
cp "$tmp/metrics.json" bench/results/metrics.json
{
  echo "# /metrics scrape cost: hand-written registry vs prometheus-cpp"
  echo
  echo "\`bench/metrics_scrape.sh $jobs $ranks $rounds\` on $(date -u +%Y-%m-%d), $(nproc) cores"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), g++ -O2,"
  echo "prometheus-cpp $(dpkg-query -W -f='${Version}' libprometheus-cpp-core1.0 2>/dev/null)."
  echo "Baseline: common/metrics.{h,cc} at $BASELINE. Both in one process, interleaved."
  echo
  cat "$tmp/metrics.table"
  cat <<'NOTES'

- **Set**: replacing every computed sample, as `RunMetrics::Set` does each scrape. Baseline:
  `GaugeFamily::SetAll` into each family's map of label tuples. prometheus-cpp path:
  `ComputedGauges::Set` renders the families' text once (byte for byte what
  `prometheus::TextSerializer` would write: `metrics_exposition_test`) and shares it with the
  scrape. Until 2026-11-30 it built `prometheus::MetricFamily` vectors (a copy of every label)
  that the scrape serialized: that path measured 31.6 ms Set and 98.8 ms render (134.9 ms,
  0.84x the baseline's 161.5 ms) on that day, against 36.7-42.6 and 3.0 ms (39.7-45.1 ms,
  0.23-0.25x) after.
- **render**: the baseline's string appends against, for prometheus-cpp's registry families
  (counters, histograms), `prometheus::TextSerializer` (an ostream with 16 significant digits),
  then the computed gauges' text. Counters and histograms (2 transports x 20 methods of API
  metrics) are in both.
- Not measured, identical in both: `GatherRunMetricsInput` and `ComputeRunMetrics`.
- The texts differ in form only: prometheus-cpp sorts the labels of registry families
  (counters, histograms) by name, prints histograms' `_count` and `_sum` before the buckets,
  NaN as `Nan`, and 16 significant digits (a value of 1e16 or more, such as a byte counter
  after 10 PB, loses its last digits; the baseline printed the shortest exact form). The
  bench parses both and compares every sample: it fails on any difference.
NOTES
} > bench/results/metrics.md
echo "wrote bench/results/metrics.{md,json}"
