// A histogram's quantile from two scrapes of a Prometheus text page: control_plane_bench reads
// the controller's own /metrics before and after a case's window, so that the server's share of
// a latency (the call's time in the controller, its wait for the loop, the loop's lag) stands
// next to what the clients measured. Bucket bounds only: "p99 <= 25 ms".
#ifndef DHP_BENCH_METRICS_HISTOGRAM_H_
#define DHP_BENCH_METRICS_HISTOGRAM_H_

#include <string>
#include <string_view>
#include <vector>

namespace dhp::bench {

// Cumulative counts by upper bound ("le"), in page order; +Inf as infinity.
struct HistogramBuckets {
  std::vector<double> le;
  std::vector<double> count;
};

// The `name`_bucket lines whose labels include every one of `labels` (each `key="value"`),
// summed over the series that match (e.g. every code of a method). Empty when none matches.
HistogramBuckets ParseHistogram(std::string_view page, std::string_view name,
                                const std::vector<std::string>& labels);

// The upper bound of the bucket that holds quantile q of the observations made between
// `before` and `after` (the same series, scraped twice), in the metric's unit; infinity when
// past the last finite bound; -1 when nothing was observed between them or they differ.
double QuantileBound(const HistogramBuckets& before, const HistogramBuckets& after, double q);

// The sum of the `name` samples (a counter or gauge, no suffix) whose labels include every one
// of `labels`; -1 when none matches.
double SumSamples(std::string_view page, std::string_view name,
                  const std::vector<std::string>& labels);

}  // namespace dhp::bench

#endif  // DHP_BENCH_METRICS_HISTOGRAM_H_
