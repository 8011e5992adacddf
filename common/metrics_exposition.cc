#include "common/metrics_exposition.h"

#include <prometheus/check_names.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <cmath>
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

// A gauge's value as prometheus-cpp 1.0.1 writes it: "%.16g" (max_digits10 - 1), with NaN and
// the infinities spelled as it spells them.
void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "Nan";
  } else if (std::isinf(value)) {
    out += value < 0 ? "-Inf" : "+Inf";
  } else {
    char buf[32];
    const std::to_chars_result r =
        std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::general, 16);
    out.append(buf, r.ptr);
  }
}

// A label value with \, " and newline escaped.
void AppendLabelValue(std::string& out, std::string_view value) {
  if (value.find_first_of("\\\"\n") == std::string_view::npos) {
    out += value;
    return;
  }
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
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
    std::string head;
    if (!def.help.empty()) head += "# HELP " + def.name + " " + EscapeHelp(def.help) + "\n";
    heads_.push_back(head + "# TYPE " + def.name + " gauge\n");
  }
  Set({});
}

void ComputedGauges::Set(const MetricRows& rows) {
  GaugeTextWriter text(*this);
  std::vector<std::string_view> labels;
  for (const auto& [name, family_rows] : rows) {
    auto it = index_.find(name);
    DHP_CHECK(it != index_.end()) << "ComputedGauges::Set: unknown family " << name;
    for (const auto& [values, value] : family_rows) {
      labels.assign(values.begin(), values.end());
      text.Add(it->second, labels.data(), labels.size(), value);
    }
  }
  Set(std::move(text));
}

void ComputedGauges::Set(GaugeTextWriter&& text) {
  DHP_CHECK(text.gauges_ == this) << "ComputedGauges::Set: a writer made for other gauges";
  auto bodies = std::make_shared<const std::vector<std::string>>(std::move(text.bodies_));
  std::lock_guard<std::mutex> lock(mu_);
  bodies_ = std::move(bodies);
}

void ComputedGauges::AppendText(std::string& out) const {
  std::shared_ptr<const std::vector<std::string>> bodies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bodies = bodies_;
  }
  for (size_t f = 0; f < defs_.size(); ++f) {
    out += heads_[f];
    if (bodies != nullptr) out += (*bodies)[f];
  }
}

// ---- GaugeTextWriter and GaugeRowsCollector ------------------------------------------------

GaugeTextWriter::GaugeTextWriter(const ComputedGauges& gauges)
    : gauges_(&gauges), bodies_(gauges.defs_.size()) {
  std::shared_ptr<const std::vector<std::string>> previous;
  {
    std::lock_guard<std::mutex> lock(gauges.mu_);
    previous = gauges.bodies_;
  }
  if (previous == nullptr) return;
  for (size_t f = 0; f < bodies_.size(); ++f) {
    const size_t last = (*previous)[f].size();  // the last set's, and some room to grow
    if (last > 0) bodies_[f].reserve(last + last / 8);
  }
}

void GaugeTextWriter::Add(size_t family, std::initializer_list<std::string_view> labels,
                          double value) {
  Add(family, labels.begin(), labels.size(), value);
}

void GaugeTextWriter::Add(size_t family, const std::string_view* labels, size_t n,
                          double value) {
  DHP_CHECK(family < bodies_.size()) << "GaugeTextWriter: no family " << family;
  const GaugeFamilyDef& def = gauges_->defs_[family];
  DHP_CHECK(n == def.labels.size())
      << def.name << ": " << n << " label values for " << def.labels.size() << " labels";
  std::string& out = bodies_[family];
  out += def.name;
  for (size_t i = 0; i < n; ++i) {
    out += i == 0 ? '{' : ',';
    out += def.labels[i];
    out += "=\"";
    AppendLabelValue(out, labels[i]);
    out += '"';
  }
  if (n > 0) out += '}';
  out += ' ';
  AppendValue(out, value);
  out += '\n';
}

void GaugeRowsCollector::Add(size_t family, std::initializer_list<std::string_view> labels,
                             double value) {
  DHP_CHECK(family < families_.size()) << "GaugeRowsCollector: no family " << family;
  rows_[families_[family].name].push_back(
      {std::vector<std::string>(labels.begin(), labels.end()), value});
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
  std::string out;
  for (const Entry& entry : entries) {
    if (entry.computed != nullptr) {
      entry.computed->AppendText(out);
      continue;
    }
    std::vector<prometheus::MetricFamily> one(1);
    auto it = recorded.find(entry.name);
    if (it != recorded.end()) {
      one[0] = std::move(it->second);
    } else {
      one[0] = {entry.name, entry.help, entry.type, {}};  // no samples yet: HELP and TYPE
    }
    std::ostringstream family;
    serializer.Serialize(family, one);
    out += family.str();
  }
  return out;
}

}  // namespace dhp
