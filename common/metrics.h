// A small Prometheus metrics registry with text exposition (format 0.0.4).
//
// There are no globals: the owner (the controller's main, a test) creates one MetricsRegistry
// and passes it by reference to whatever records metrics. A registry holds families; a family
// has a name, help text, a type and label names, and one child per distinct tuple of label
// values:
//
//   MetricsRegistry registry;
//   CounterFamily& requests = registry.AddCounter(
//       "dhp_api_requests_total", "API requests by method and code.", {"method", "code"});
//   requests.WithLabels({"SubmitJob", "OK"}).Inc();
//   HistogramFamily& latency = registry.AddHistogram(
//       "dhp_api_request_duration_seconds", "API latency.", {"method"});
//   latency.WithLabels({"SubmitJob"}).Observe(0.0012);
//   GaugeFamily& jobs = registry.AddGauge("dhp_jobs", "Jobs by state.", {"state"});
//   jobs.SetAll({{{"running"}, 3}, {{"queued"}, 1}});   // replaces every child at once
//   std::string text = registry.RenderText();
//
// Invalid metric or label names, a wrong number of label values, a duplicate family name,
// unsorted histogram buckets or a negative counter increment are programming errors and crash.
//
// Thread-safety: everything is thread-safe. Recording on a child (Inc, Set, Observe) is
// lock-free (atomics); WithLabels takes the family's mutex; RenderText takes the registry's
// mutex and each family's in turn. References returned by Add* and WithLabels stay valid for
// the registry's lifetime (children are never freed, only hidden by GaugeFamily::Reset).
#ifndef DHP_COMMON_METRICS_H_
#define DHP_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dhp {

// A monotonically increasing value.
class Counter {
 public:
  void Inc(double delta = 1.0);  // delta >= 0
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value);
  void Inc(double delta = 1.0);
  void Dec(double delta = 1.0) { Inc(-delta); }
  double Value() const { return value_.load(std::memory_order_relaxed); }
  // False after GaugeFamily::Reset until the next Set/Inc/Dec: hidden gauges are not rendered.
  bool Visible() const { return visible_.load(std::memory_order_acquire); }

 private:
  friend class GaugeFamily;
  std::atomic<double> value_{0.0};
  std::atomic<bool> visible_{true};
};

// Observations counted into buckets by upper bound (le), plus their sum and count.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then one for +Inf
    double sum = 0;
    uint64_t count = 0;                // == cumulative.back()
  };
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;  // owned by the family; sorted, finite
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_->size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

// Default buckets for latencies in seconds: 0.5 ms .. 10 s.
const std::vector<double>& DefaultLatencyBuckets();

enum class MetricType { kCounter, kGauge, kHistogram };

// What the registry knows about every family; the typed families below add WithLabels.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names);
  virtual ~MetricFamily() = default;
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends this family's exposition (HELP, TYPE and one line per sample) to `out`.
  void Render(std::string* out) const;

 protected:
  // Renders the samples of all children; called with mu_ held.
  virtual void RenderChildren(std::string* out) const = 0;
  // Checks the number of label values (crashes on a mismatch).
  void CheckArity(const std::vector<std::string>& values) const;
  // `{a="x",b="y"` without the closing brace (or empty) for the given label values, with an
  // optional extra label appended (histograms' le).
  std::string LabelText(const std::vector<std::string>& values, std::string_view extra_name = {},
                        std::string_view extra_value = {}) const;

  mutable std::mutex mu_;  // guards the children maps of the subclasses (not the values)

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

class CounterFamily : public MetricFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  Counter& WithLabels(const std::vector<std::string>& values = {});

 private:
  void RenderChildren(std::string* out) const override;
  std::map<std::vector<std::string>, std::unique_ptr<Counter>> children_;  // guarded by mu_
};

class GaugeFamily : public MetricFamily {
 public:
  GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names);
  Gauge& WithLabels(const std::vector<std::string>& values = {});

  // Hides every child (value 0, not rendered) until it is set again. References stay valid.
  void Reset();
  // Reset, then set the given children, atomically with respect to RenderText: a scrape sees
  // either the old set or the new one. For values the owner recomputes wholesale, such as
  // jobs by state.
  void SetAll(const std::vector<std::pair<std::vector<std::string>, double>>& values);

 private:
  void RenderChildren(std::string* out) const override;
  Gauge& ChildLocked(const std::vector<std::string>& values);
  std::map<std::vector<std::string>, std::unique_ptr<Gauge>> children_;  // guarded by mu_
};

class HistogramFamily : public MetricFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  Histogram& WithLabels(const std::vector<std::string>& values = {});
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  void RenderChildren(std::string* out) const override;
  const std::vector<double> bounds_;
  std::map<std::vector<std::string>, std::unique_ptr<Histogram>> children_;  // guarded by mu_
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // A family without labels gets its single child at once, so it renders as 0 from the start.
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(std::string name, std::string help,
                        std::vector<std::string> label_names = {});
  // `bounds`: strictly increasing finite upper bounds (+Inf is implied); empty: the defaults.
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<std::string> label_names = {},
                                std::vector<double> bounds = {});

  // Runs before every RenderText, outside the registry's lock, so that values computed on
  // demand (e.g. jobs by state via GaugeFamily::SetAll) are fresh in each scrape.
  void AddCollector(std::function<void()> collector);

  // All families in registration order, in the Prometheus text exposition format 0.0.4.
  std::string RenderText() const;

 private:
  template <typename F>
  F& Add(std::unique_ptr<F> family);

  mutable std::mutex mu_;  // guards families_ and collectors_
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::vector<std::shared_ptr<std::function<void()>>> collectors_;
};

// Helpers, exposed for tests and for other exposition code.
bool IsValidMetricName(std::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidLabelName(std::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, not starting "__"
std::string EscapeLabelValue(std::string_view value);  // \ " and newline
std::string FormatMetricValue(double value);           // shortest exact form; +Inf, -Inf, NaN

}  // namespace dhp

#endif  // DHP_COMMON_METRICS_H_
