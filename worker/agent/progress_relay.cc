#include "worker/agent/progress_relay.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dhp::worker {
namespace {

// The attempt is over: every later report of the rank gets the same answer.
bool Final(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition ||
         s.code() == absl::StatusCode::kNotFound;
}

}  // namespace

absl::StatusOr<v1::ReportProgressResponse> ProgressRelay::Accept(
    const v1::ReportProgressRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (unsupported_) {
    return absl::UnimplementedError(
        "the controller takes no progress reports relayed by agents; report to it directly");
  }
  const RankKey key = KeyOf(req);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_ranks_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the agent relays the reports of at most ", max_ranks_, " ranks"));
    }
    it = entries_.emplace(key, Entry{}).first;
  }
  Entry& e = it->second;
  if (Final(e.error)) return e.error;
  e.pending = req;
  if (!e.error.ok()) return std::exchange(e.error, absl::OkStatus());
  return e.answer;
}

int ProgressRelay::TakeInto(v1::HeartbeatRequest* hb, int max) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty()) return 0;
  auto it = last_taken_.has_value() ? entries_.upper_bound(*last_taken_) : entries_.begin();
  int n = 0;
  for (size_t visited = 0; visited < entries_.size() && n < max; ++visited, ++it) {
    if (it == entries_.end()) it = entries_.begin();
    if (!it->second.pending.has_value()) continue;
    *hb->add_progress() = std::move(*it->second.pending);
    it->second.pending.reset();
    last_taken_ = it->first;
    ++n;
  }
  return n;
}

void ProgressRelay::Answered(const v1::HeartbeatRequest& hb, const v1::HeartbeatResponse& resp) {
  if (hb.progress_size() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (resp.progress_size() != hb.progress_size()) {
    if (!unsupported_) {
      DHP_LOG(WARNING) << "the controller answered " << resp.progress_size() << " of "
                       << hb.progress_size() << " relayed progress reports: it predates "
                       << "relaying, so the ranks are told to report to it directly";
    }
    unsupported_ = true;
    return;
  }
  for (int i = 0; i < hb.progress_size(); ++i) {
    auto it = entries_.find(KeyOf(hb.progress(i)));
    if (it == entries_.end()) continue;  // forgotten meanwhile
    const v1::ProgressAnswer& a = resp.progress(i);
    if (a.code() == 0) {
      it->second.answer = a.response();
      it->second.error = absl::OkStatus();
    } else {
      const bool known = a.code() > 0 && a.code() <= 16;  // google.rpc.Code
      it->second.error = absl::Status(
          known ? static_cast<absl::StatusCode>(a.code()) : absl::StatusCode::kUnknown,
          a.message().empty() ? "the controller refused the report" : a.message());
    }
  }
}

void ProgressRelay::Failed(const v1::HeartbeatRequest& hb) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const v1::ReportProgressRequest& req : hb.progress()) {
    auto it = entries_.find(KeyOf(req));
    if (it == entries_.end() || it->second.pending.has_value()) continue;
    it->second.pending = req;
  }
}

void ProgressRelay::Retain(const std::set<RankKey>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : entries_.erase(it);
  }
}

bool ProgressRelay::unsupported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unsupported_;
}

size_t ProgressRelay::ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace dhp::worker
