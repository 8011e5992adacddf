#include "api/dhpctl/top.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "api/dhpctl/output.h"
#include "api/dhpctl/progress.h"
#include "common/proto_enum.h"

namespace dhp::dhpctl {
namespace {

using Metrics = google::protobuf::Map<std::string, double>;

std::optional<double> Get(const Metrics& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

// The process-wide key, else the sum of the per-stage ones the rank sent.
std::optional<double> Phase(const Metrics& m, const std::string& key) {
  if (std::optional<double> v = Get(m, key)) return v;
  std::optional<double> vision = Get(m, "vision_" + key), text = Get(m, "text_" + key);
  if (!vision && !text) return std::nullopt;
  return vision.value_or(0) + text.value_or(0);
}

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

std::string Ms(std::optional<double> seconds) {
  if (!seconds) return "-";
  return Printf(*seconds * 1000 < 9.95 ? "%.1f" : "%.0f", *seconds * 1000);
}

std::string Mib(double bytes) { return Printf("%.0f", bytes / 1048576.0); }

std::string Count(std::optional<double> v) { return v ? HumanCount(*v) : "-"; }

// The value of the first key found on the lowest rank that has one of them.
std::optional<double> FirstRank(const v1::GetJobResponse& resp,
                                std::initializer_list<const char*> keys) {
  for (const v1::RankProgress& r : resp.ranks()) {
    for (const char* key : keys) {
      if (std::optional<double> v = Get(r.metrics(), key)) return v;
    }
  }
  return std::nullopt;
}

std::string Memory(const Metrics& m) {
  std::optional<double> alloc = Get(m, "memory_allocated_bytes");
  std::optional<double> peak = Get(m, "memory_peak_bytes");
  if (alloc || peak) {
    return (alloc ? Mib(*alloc) : "-") + "/" + (peak ? Mib(*peak) : "-");
  }
  if (std::optional<double> rss = Get(m, "memory_rss_bytes")) return Mib(*rss) + " rss";
  return "-";
}

std::string Percent(std::optional<double> fraction) {
  return fraction ? Printf("%.1f%%", *fraction * 100) : "-";
}

// "31.0%/42.5%": the rank's MFU of the vision / text stage; "-" when neither is reported.
std::string Mfu(const Metrics& m) {
  std::optional<double> vision = Get(m, "mfu_vision");
  std::optional<double> text = Get(m, "mfu_text");
  if (!vision && !text) return "-";
  return Percent(vision) + "/" + Percent(text);
}

std::string Waiting(const v1::RankProgress& r) {
  if (!r.waiting_on().empty()) return r.waiting_on();
  if (r.step() < 0 && r.report_age_seconds() == 0) return "not reported yet";
  if (r.report_age_seconds() >= kTopSilentSeconds) {
    return "silent for " + Printf("%.0f", r.report_age_seconds()) + " s";
  }
  return "-";
}

std::string Stages(const v1::RankProgress& r) {
  if (r.has_vision() && r.has_text()) return "vision+text";
  if (r.has_vision()) return "vision";
  if (r.has_text()) return "text";
  return "-";
}

std::string Cut(const std::string& text, int width) {
  if (width <= 0) return text;
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += text.substr(start, std::min<size_t>(end - start, width));
    if (end < text.size()) out += "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string TopHeader(const v1::GetJobResponse& resp) {
  const v1::Job& job = resp.job();
  std::string out = "job " + job.id();
  if (!job.spec().name().empty()) out += "  " + job.spec().name();
  out += "  " + ShortName(job.state()) + "  attempt " + std::to_string(job.current_attempt()) +
         "  restarts " + std::to_string(job.restart_count()) + "\n";

  int64_t step = job.latest_step();
  for (const v1::RankProgress& r : resp.ranks()) step = std::max(step, r.step());
  out += "step " + std::to_string(step);
  if (job.total_steps() > 0) {
    const double fraction = std::clamp(static_cast<double>(step) / job.total_steps(), 0.0, 1.0);
    out += "/" + std::to_string(job.total_steps()) + " (" +
           std::to_string(static_cast<int>(std::floor(fraction * 100 + 1e-9))) + "%)";
  }
  if (step > 0) out += "  loss " + Printf("%.4g", job.latest_loss());
  if (std::optional<double> lr = FirstRank(resp, {"lr", "learning_rate"})) {
    out += "  lr " + Printf("%.3g", *lr);
  }
  if (std::optional<double> g = FirstRank(resp, {"grad_norm"})) {
    out += "  grad norm " + Printf("%.3g", *g);
  }
  if (job.tokens_per_second() > 0) out += "  " + HumanCount(job.tokens_per_second()) + " tok/s";
  if (job.step_seconds() > 0) out += "  " + Printf("%.3g", job.step_seconds()) + " s/step";
  if (job.total_steps() > 0 && job.step_seconds() > 0 && job.state() == v1::JOB_STATE_RUNNING) {
    const int64_t left = std::max<int64_t>(0, job.total_steps() - step);
    out += "  ETA " + ClockDuration(static_cast<double>(left) * job.step_seconds());
  }
  return out + "\n";
}

std::string TopView(const v1::GetJobResponse& resp, int width) {
  std::string out = TopHeader(resp) + "\n";
  if (resp.ranks_size() == 0) {
    out += "no ranks placed";
    if (!resp.job().message().empty()) out += ": " + resp.job().message();
    out += "\n";
    return Cut(out, width);
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::RankProgress& r : resp.ranks()) {
    const Metrics& m = r.metrics();
    std::string tokens = "-";
    std::optional<double> vision = Get(m, "vision_tokens_per_s");
    std::optional<double> text = Get(m, "text_tokens_per_s");
    if (vision || text) tokens = Count(vision) + "/" + Count(text);
    rows.push_back({std::to_string(r.rank()), r.node_id().empty() ? "-" : r.node_id(), Stages(r),
                    r.step() < 0 ? "-" : std::to_string(r.step()), tokens,
                    Ms(Phase(m, "forward_s")), Ms(Phase(m, "backward_s")),
                    Ms(Phase(m, "comm_s")), Ms(Phase(m, "optimizer_s")), Memory(m), Mfu(m),
                    Waiting(r)});
  }
  out += RenderTable({"RANK", "NODE", "STAGES", "STEP", "TOK/S V/T", "FWD ms", "BWD ms",
                      "COMM ms", "OPT ms", "MEM MiB", "MFU V/T", "WAITING"},
                     rows);
  return Cut(out, width);
}

std::optional<int> ParseInterval(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  const std::string unit(end);
  double ms;
  if (unit.empty() || unit == "s") {
    ms = value * 1000;
  } else if (unit == "ms") {
    ms = value;
  } else if (unit == "m") {
    ms = value * 60000;
  } else {
    return std::nullopt;
  }
  if (!std::isfinite(ms) || ms < 1 || ms > 86400000) return std::nullopt;
  return static_cast<int>(std::lround(ms));
}

}  // namespace dhp::dhpctl
