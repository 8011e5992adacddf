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
void AppendLabelValue(std::string& out, const std::string& value) {
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
  std::vector<const GaugeRows*> samples(defs_.size(), nullptr);
  for (const auto& [name, family_rows] : rows) {
    auto it = index_.find(name);
    DHP_CHECK(it != index_.end()) << "ComputedGauges::Set: unknown family " << name;
    samples[it->second] = &family_rows;
  }
  size_t previous = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (text_ != nullptr) previous = text_->size();
  }
  auto text = std::make_shared<std::string>();
  text->reserve(previous + previous / 8);
  for (size_t f = 0; f < defs_.size(); ++f) {
    const GaugeFamilyDef& def = defs_[f];
    *text += heads_[f];
    if (samples[f] == nullptr) continue;
    for (const auto& [values, value] : *samples[f]) {
      DHP_CHECK(values.size() == def.labels.size())
          << def.name << ": " << values.size() << " label values for " << def.labels.size()
          << " labels";
      *text += def.name;
      for (size_t i = 0; i < values.size(); ++i) {
        *text += i == 0 ? '{' : ',';
        *text += def.labels[i];
        *text += "=\"";
        AppendLabelValue(*text, values[i]);
        *text += '"';
      }
      if (!values.empty()) *text += '}';
      *text += ' ';
      AppendValue(*text, value);
      *text += '\n';
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  text_ = std::move(text);
}

std::shared_ptr<const std::string> ComputedGauges::Text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return text_;
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
      out += *entry.computed->Text();
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
