#include "bench/metrics_histogram.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace dhp::bench {
namespace {

// The value of `le="..."` in a label set, as a number; false when absent.
bool ParseLe(std::string_view labels, double* le) {
  const size_t at = labels.find("le=\"");
  if (at == std::string_view::npos) return false;
  const size_t end = labels.find('"', at + 4);
  if (end == std::string_view::npos) return false;
  const std::string v(labels.substr(at + 4, end - at - 4));
  if (v == "+Inf") {
    *le = std::numeric_limits<double>::infinity();
    return true;
  }
  char* stop = nullptr;
  *le = std::strtod(v.c_str(), &stop);
  return stop != v.c_str();
}

// Calls fn(line) for each line of `page`, without its newline.
template <typename Fn>
void ForEachLine(std::string_view page, Fn fn) {
  size_t pos = 0;
  while (pos < page.size()) {
    size_t eol = page.find('\n', pos);
    if (eol == std::string_view::npos) eol = page.size();
    fn(page.substr(pos, eol - pos));
    pos = eol + 1;
  }
}

}  // namespace

HistogramBuckets ParseHistogram(std::string_view page, std::string_view name,
                                const std::vector<std::string>& labels) {
  HistogramBuckets out;
  const std::string prefix = std::string(name) + "_bucket{";
  ForEachLine(page, [&](std::string_view line) {
    if (line.rfind(prefix, 0) != 0) return;
    const size_t close = line.find('}');
    if (close == std::string_view::npos) return;
    const std::string_view set = line.substr(prefix.size(), close - prefix.size());
    bool match = true;
    for (const std::string& l : labels) match = match && set.find(l) != std::string_view::npos;
    double le = 0;
    if (!match || !ParseLe(set, &le)) return;
    const double count = std::strtod(std::string(line.substr(close + 1)).c_str(), nullptr);
    size_t i = 0;
    while (i < out.le.size() && out.le[i] != le) ++i;
    if (i == out.le.size()) {
      out.le.push_back(le);
      out.count.push_back(0);
    }
    out.count[i] += count;
  });
  return out;
}

double SumSamples(std::string_view page, std::string_view name,
                  const std::vector<std::string>& labels) {
  double sum = -1;
  ForEachLine(page, [&](std::string_view line) {
    if (line.rfind(name, 0) != 0 || line.size() == name.size()) return;
    std::string_view set;
    size_t value_at = name.size();
    if (line[name.size()] == '{') {
      const size_t close = line.find('}');
      if (close == std::string_view::npos) return;
      set = line.substr(name.size() + 1, close - name.size() - 1);
      value_at = close + 1;
    } else if (line[name.size()] != ' ') {
      return;  // another family whose name starts with this one
    }
    bool match = true;
    for (const std::string& l : labels) match = match && set.find(l) != std::string_view::npos;
    if (!match) return;
    sum = std::max(sum, 0.0) + std::strtod(std::string(line.substr(value_at)).c_str(), nullptr);
  });
  return sum;
}

double QuantileBound(const HistogramBuckets& before, const HistogramBuckets& after, double q) {
  if (after.le.empty()) return -1;
  if (!before.le.empty() && before.le != after.le) return -1;
  auto delta = [&](size_t i) { return after.count[i] - (before.le.empty() ? 0 : before.count[i]); };
  const double total = delta(after.le.size() - 1);  // +Inf: every observation
  if (total <= 0) return -1;
  for (size_t i = 0; i < after.le.size(); ++i) {
    if (delta(i) >= q * total) return after.le[i];
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace dhp::bench
