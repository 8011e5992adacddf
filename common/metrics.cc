#include "common/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace dhp {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "metrics: " << message << std::endl;
  std::abort();
}

void AtomicAdd(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", value == 0 ? 0.0 : value);  // no "-0"
    return buf;
  }
  // The shortest of %.15g..%.17g that reads back to the same double.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

const std::vector<double>& DefaultLatencyBuckets() {
  static const std::vector<double>* const kBuckets = new std::vector<double>{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *kBuckets;
}

// ---- children ------------------------------------------------------------------------------

void Counter::Inc(double delta) {
  if (!(delta >= 0)) Die("counter increment must be >= 0, got " + FormatMetricValue(delta));
  AtomicAdd(value_, delta);
}

void Gauge::Set(double value) {
  value_.store(value, std::memory_order_relaxed);
  visible_.store(true, std::memory_order_release);
}

void Gauge::Inc(double delta) {
  AtomicAdd(value_, delta);
  visible_.store(true, std::memory_order_release);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // First bucket whose upper bound is >= value (le is inclusive); NaN lands in +Inf.
  size_t i = 0;
  const size_t n = bounds_->size();
  while (i < n && !(value <= (*bounds_)[i])) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.cumulative.resize(bounds_->size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---- families ------------------------------------------------------------------------------

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type,
                           std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {
  if (!IsValidMetricName(name_)) Die("invalid metric name \"" + name_ + "\"");
  for (size_t i = 0; i < label_names_.size(); ++i) {
    const std::string& label = label_names_[i];
    if (!IsValidLabelName(label)) {
      Die("metric " + name_ + ": invalid label name \"" + label + "\"");
    }
    if (type_ == MetricType::kHistogram && label == "le") {
      Die("metric " + name_ + ": histograms may not have a label named le");
    }
    for (size_t j = 0; j < i; ++j) {
      if (label_names_[j] == label) Die("metric " + name_ + ": duplicate label " + label);
    }
  }
}

void MetricFamily::CheckArity(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size()) {
    Die("metric " + name_ + ": expected " + std::to_string(label_names_.size()) +
        " label values, got " + std::to_string(values.size()));
  }
}

std::string MetricFamily::LabelText(const std::vector<std::string>& values,
                                    std::string_view extra_name,
                                    std::string_view extra_value) const {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += label_names_[i];
    out += "=\"";
    out += EscapeLabelValue(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name;
    out += "=\"";
    out += EscapeLabelValue(extra_value);
    out += '"';
  }
  return out;
}

void MetricFamily::Render(std::string* out) const {
  *out += "# HELP " + name_ + (help_.empty() ? "" : " " + EscapeHelp(help_)) + "\n";
  *out += "# TYPE " + name_ + " " + TypeName(type_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  RenderChildren(out);
}

namespace {
void AppendSample(std::string* out, const std::string& name, std::string labels, double value) {
  *out += name;
  if (!labels.empty()) {
    *out += labels;
    *out += '}';
  }
  *out += ' ';
  *out += FormatMetricValue(value);
  *out += '\n';
}
}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : MetricFamily(std::move(name), std::move(help), MetricType::kCounter,
                   std::move(label_names)) {}

Counter& CounterFamily::WithLabels(const std::vector<std::string>& values) {
  CheckArity(values);
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Counter>& child = children_[values];
  if (!child) child = std::make_unique<Counter>();
  return *child;
}

void CounterFamily::RenderChildren(std::string* out) const {
  for (const auto& [values, child] : children_) {
    AppendSample(out, name(), LabelText(values), child->Value());
  }
}

GaugeFamily::GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names)
    : MetricFamily(std::move(name), std::move(help), MetricType::kGauge,
                   std::move(label_names)) {}

Gauge& GaugeFamily::ChildLocked(const std::vector<std::string>& values) {
  CheckArity(values);
  std::unique_ptr<Gauge>& child = children_[values];
  if (!child) child = std::make_unique<Gauge>();
  return *child;
}

Gauge& GaugeFamily::WithLabels(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  return ChildLocked(values);
}

void GaugeFamily::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [values, child] : children_) {
    child->visible_.store(false, std::memory_order_release);
    child->value_.store(0.0, std::memory_order_relaxed);
  }
}

void GaugeFamily::SetAll(const std::vector<std::pair<std::vector<std::string>, double>>& values) {
  for (const auto& [labels, value] : values) CheckArity(labels);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [labels, child] : children_) {
    child->visible_.store(false, std::memory_order_release);
    child->value_.store(0.0, std::memory_order_relaxed);
  }
  for (const auto& [labels, value] : values) ChildLocked(labels).Set(value);
}

void GaugeFamily::RenderChildren(std::string* out) const {
  for (const auto& [values, child] : children_) {
    if (child->Visible()) AppendSample(out, name(), LabelText(values), child->Value());
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : MetricFamily(std::move(name), std::move(help), MetricType::kHistogram,
                   std::move(label_names)),
      bounds_(bounds.empty() ? DefaultLatencyBuckets() : std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i])) {
      Die("metric " + this->name() + ": bucket bounds must be finite (+Inf is implied)");
    }
    if (i > 0 && !(bounds_[i] > bounds_[i - 1])) {
      Die("metric " + this->name() + ": bucket bounds must be strictly increasing");
    }
  }
}

Histogram& HistogramFamily::WithLabels(const std::vector<std::string>& values) {
  CheckArity(values);
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Histogram>& child = children_[values];
  if (!child) child = std::make_unique<Histogram>(&bounds_);
  return *child;
}

void HistogramFamily::RenderChildren(std::string* out) const {
  const std::string bucket_name = name() + "_bucket";
  for (const auto& [values, child] : children_) {
    const Histogram::Snapshot s = child->Read();
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      const std::string le = i < bounds_.size() ? FormatMetricValue(bounds_[i]) : "+Inf";
      AppendSample(out, bucket_name, LabelText(values, "le", le),
                   static_cast<double>(s.cumulative[i]));
    }
    AppendSample(out, name() + "_sum", LabelText(values), s.sum);
    AppendSample(out, name() + "_count", LabelText(values), static_cast<double>(s.count));
  }
}

// ---- registry ------------------------------------------------------------------------------

template <typename F>
F& MetricsRegistry::Add(std::unique_ptr<F> family) {
  F& ref = *family;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& existing : families_) {
    if (existing->name() == family->name()) {
      Die("metric " + family->name() + " registered twice");
    }
  }
  if (family->label_names().empty()) family->WithLabels({});
  families_.push_back(std::move(family));
  return ref;
}

CounterFamily& MetricsRegistry::AddCounter(std::string name, std::string help,
                                           std::vector<std::string> label_names) {
  return Add(std::make_unique<CounterFamily>(std::move(name), std::move(help),
                                             std::move(label_names)));
}

GaugeFamily& MetricsRegistry::AddGauge(std::string name, std::string help,
                                       std::vector<std::string> label_names) {
  return Add(std::make_unique<GaugeFamily>(std::move(name), std::move(help),
                                           std::move(label_names)));
}

HistogramFamily& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                               std::vector<std::string> label_names,
                                               std::vector<double> bounds) {
  return Add(std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                               std::move(label_names), std::move(bounds)));
}

void MetricsRegistry::AddCollector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::make_shared<std::function<void()>>(std::move(collector)));
}

std::string MetricsRegistry::RenderText() const {
  std::vector<std::shared_ptr<std::function<void()>>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) (*collect)();

  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& family : families_) family->Render(&out);
  return out;
}

}  // namespace dhp
