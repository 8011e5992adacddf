#include "common/metrics_exposition.h"

#include <prometheus/check_names.h>
#include <prometheus/text_serializer.h>

#include <sstream>

#include "common/check.h"

namespace dhp {
namespace {

void CheckName(const std::string& name) {
  DHP_CHECK(prometheus::CheckMetricName(name)) << "invalid metric name \"" << name << "\"";
}

// prometheus-cpp 1.0.1 writes HELP text as given; the format wants \ and newline escaped.
std::string EscapeHelp(const std::string& help) {
  std::string out;
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

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *kBuckets;
}

// ---- ComputedGauges ------------------------------------------------------------------------

ComputedGauges::ComputedGauges(std::vector<GaugeFamilyDef> families) : defs_(std::move(families)) {
  for (size_t i = 0; i < defs_.size(); ++i) {
    const GaugeFamilyDef& def = defs_[i];
    CheckName(def.name);
    for (const std::string& label : def.labels) {
      DHP_CHECK(prometheus::CheckLabelName(label)) << def.name << ": invalid label name " << label;
    }
    DHP_CHECK(index_.emplace(def.name, i).second) << "duplicate metric family " << def.name;
  }
  Set({});
}

void ComputedGauges::Set(const MetricRows& rows) {
  auto families = std::make_shared<std::vector<prometheus::MetricFamily>>();
  for (const GaugeFamilyDef& def : defs_) {
    families->push_back({def.name, EscapeHelp(def.help), prometheus::MetricType::Gauge, {}});
  }
  for (const auto& [name, samples] : rows) {
    auto it = index_.find(name);
    DHP_CHECK(it != index_.end()) << "ComputedGauges::Set: unknown family " << name;
    const GaugeFamilyDef& def = defs_[it->second];
    std::vector<prometheus::ClientMetric>& out = (*families)[it->second].metric;
    out.reserve(samples.size());
    for (const auto& [values, value] : samples) {
      DHP_CHECK(values.size() == def.labels.size())
          << name << ": " << values.size() << " label values for " << def.labels.size()
          << " labels";
      prometheus::ClientMetric& metric = out.emplace_back();
      metric.label.reserve(values.size());
      for (size_t i = 0; i < values.size(); ++i) metric.label.push_back({def.labels[i], values[i]});
      metric.gauge.value = value;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = std::move(families);
}

std::shared_ptr<const std::vector<prometheus::MetricFamily>> ComputedGauges::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

// ---- MetricsExposition ---------------------------------------------------------------------

MetricsExposition::MetricsExposition() : registry_(prometheus::Registry::InsertBehavior::Throw) {}

void MetricsExposition::Register(Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  DHP_CHECK(names_.insert(entry.name).second) << "duplicate metric family " << entry.name;
  entries_.push_back(std::move(entry));
}

prometheus::Family<prometheus::Counter>& MetricsExposition::AddCounter(const std::string& name,
                                                                       const std::string& help) {
  CheckName(name);
  Register({name, EscapeHelp(help), prometheus::MetricType::Counter});
  return prometheus::BuildCounter().Name(name).Help(EscapeHelp(help)).Register(registry_);
}

prometheus::Family<prometheus::Histogram>& MetricsExposition::AddHistogram(
    const std::string& name, const std::string& help) {
  CheckName(name);
  Register({name, EscapeHelp(help), prometheus::MetricType::Histogram});
  return prometheus::BuildHistogram().Name(name).Help(EscapeHelp(help)).Register(registry_);
}

ComputedGauges& MetricsExposition::AddComputedGauges(std::vector<GaugeFamilyDef> families) {
  auto gauges = std::make_unique<ComputedGauges>(std::move(families));
  ComputedGauges& result = *gauges;
  std::lock_guard<std::mutex> lock(mu_);
  for (const GaugeFamilyDef& def : result.families()) {
    DHP_CHECK(names_.insert(def.name).second) << "duplicate metric family " << def.name;
  }
  entries_.push_back({"", "", prometheus::MetricType::Gauge, &result});
  computed_.push_back(std::move(gauges));
  return result;
}

void MetricsExposition::AddCollector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::make_shared<std::function<void()>>(std::move(collector)));
}

std::string MetricsExposition::RenderText() const {
  std::vector<std::shared_ptr<std::function<void()>>> collectors;
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
    entries = entries_;
  }
  for (const auto& collect : collectors) (*collect)();

  std::map<std::string, prometheus::MetricFamily> recorded;
  for (prometheus::MetricFamily& family : registry_.Collect()) {
    std::string name = family.name;
    recorded.emplace(std::move(name), std::move(family));
  }
  const prometheus::TextSerializer serializer;
  std::ostringstream out;
  for (const Entry& entry : entries) {
    if (entry.computed != nullptr) {
      serializer.Serialize(out, *entry.computed->Snapshot());
      continue;
    }
    std::vector<prometheus::MetricFamily> one(1);
    auto it = recorded.find(entry.name);
    if (it != recorded.end()) {
      one[0] = std::move(it->second);
    } else {
      one[0] = {entry.name, entry.help, entry.type, {}};  // no samples yet: HELP and TYPE
    }
    serializer.Serialize(out, one);
  }
  return out.str();
}

}  // namespace dhp
