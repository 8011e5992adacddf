#include "api/dhpctl/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/proto_enum.h"

namespace dhp::dhpctl {
namespace {

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

std::string LossText(double loss) { return Printf("%.4g", loss); }

}  // namespace

std::string HumanCount(double value) {
  if (!std::isfinite(value)) return "-";
  const char* suffixes[] = {"", "k", "M", "G", "T"};
  double v = std::fabs(value);
  int s = 0;
  while (v >= 999.5 && s < 4) {
    v /= 1000;
    ++s;
  }
  const std::string sign = value < 0 ? "-" : "";
  if (s == 0) return sign + Printf("%.0f", v);
  // One decimal below 10 ("1.2k"), none above ("12k", "340M").
  return sign + Printf(v < 9.95 ? "%.1f" : "%.0f", v) + suffixes[s];
}

std::string ClockDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const long long total = std::llround(seconds);
  const long long h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  char buf[64];
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", h, m, s);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", m, s);
  }
  return buf;
}

std::string ProgressBar(double fraction, int width) {
  if (!std::isfinite(fraction)) fraction = 0;
  fraction = std::clamp(fraction, 0.0, 1.0);
  width = std::max(width, 1);
  const int filled = static_cast<int>(std::floor(fraction * width + 1e-9));
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

double ProgressFraction(const v1::Job& job) {
  if (job.total_steps() <= 0) return 0;
  return std::clamp(static_cast<double>(job.latest_step()) / job.total_steps(), 0.0, 1.0);
}

std::string ProgressLine(const v1::Job& job) {
  std::string out = "step " + std::to_string(job.latest_step());
  const bool known_total = job.total_steps() > 0;
  if (known_total) {
    const double fraction = ProgressFraction(job);
    out += "/" + std::to_string(job.total_steps()) + " " + ProgressBar(fraction, 20) + " " +
           std::to_string(static_cast<int>(std::floor(fraction * 100 + 1e-9))) + "%";
  }
  if (job.latest_step() > 0) out += "  loss " + LossText(job.latest_loss());
  if (job.tokens_per_second() > 0) out += "  " + HumanCount(job.tokens_per_second()) + " tok/s";
  if (known_total && job.step_seconds() > 0) {
    const int64_t left = std::max<int64_t>(0, job.total_steps() - job.latest_step());
    out += "  ETA " + ClockDuration(static_cast<double>(left) * job.step_seconds());
  }
  return out;
}

std::string FinalSummary(const v1::GetJobResponse& resp) {
  const v1::Job& job = resp.job();
  std::string out = "job " + job.id() + " ended " + ShortName(job.state());
  if (!job.message().empty()) out += ": " + job.message();
  out += "\n  steps:       " + std::to_string(job.latest_step());
  if (job.total_steps() > 0) out += "/" + std::to_string(job.total_steps());
  if (job.latest_step() > 0) out += ", final loss " + LossText(job.latest_loss());
  out += "\n  checkpoint:  ";
  const v1::Checkpoint* best = nullptr;
  for (const v1::Checkpoint& c : resp.checkpoints()) {
    if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) continue;
    if (best == nullptr || c.step() > best->step() ||
        (c.step() == best->step() && c.id() > best->id())) {
      best = &c;
    }
  }
  if (best == nullptr) {
    out += "none";
  } else {
    out += "step " + std::to_string(best->step()) + ", " + best->path();
  }
  out += "\nnext: dhpctl logs " + job.id() + ", dhpctl checkpoints " + job.id() + ", dhpctl get " +
         job.id() + "\n";
  return out;
}

// ---- ProgressConsole -----------------------------------------------------------------------

ProgressConsole::ProgressConsole(std::ostream& out, bool tty, int width)
    : out_(out), tty_(tty), width_(width) {}

void ProgressConsole::EraseLocked() {
  if (!drawn_) return;
  out_ << "\r\033[K";
  drawn_ = false;
}

void ProgressConsole::DrawLocked() {
  if (line_.empty()) return;
  std::string shown = line_;
  if (width_ > 1 && static_cast<int>(shown.size()) >= width_) shown.resize(width_ - 1);
  out_ << "\r" << shown << "\033[K";
  drawn_ = true;
}

void ProgressConsole::Line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) EraseLocked();
  out_ << line << "\n";
  if (tty_) DrawLocked();
  out_.flush();
}

void ProgressConsole::Progress(const std::string& line, double fraction, int64_t now_micros) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    if (line == line_ && drawn_) return;
    line_ = line;
    DrawLocked();
    out_.flush();
    return;
  }
  const int decile = static_cast<int>(std::floor(std::clamp(fraction, 0.0, 1.0) * 10 + 1e-9));
  const bool due = last_print_micros_ == 0 ||
                   now_micros - last_print_micros_ >= kPipeIntervalMicros ||
                   decile > last_decile_;
  if (line == line_ || !due) return;
  out_ << line << "\n";
  out_.flush();
  line_ = line;
  last_print_micros_ = now_micros;
  last_decile_ = std::max(last_decile_, decile);
}

void ProgressConsole::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    EraseLocked();
    out_.flush();
    line_.clear();
  }
}

}  // namespace dhp::dhpctl
