#include "api/dhpctl/log_lines.h"

#include <algorithm>
#include <utility>

namespace dhp::dhpctl {

// ---- LineAssembler -------------------------------------------------------------------------

std::string LineAssembler::Prefix(int32_t rank) const {
  return prefix_ ? "[rank " + std::to_string(rank) + "] " : "";
}

std::string LineAssembler::Add(int32_t rank, std::string_view data) {
  std::string out;
  std::string& partial = partial_[rank];
  size_t start = 0;
  for (size_t nl; (nl = data.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    out += Prefix(rank);
    out += partial;
    out.append(data.data() + start, nl - start + 1);
    partial.clear();
  }
  partial.append(data.data() + start, data.size() - start);
  if (partial.size() > kMaxPartialBytes) {
    out += Prefix(rank) + partial + "\n";
    partial.clear();
  }
  return out;
}

std::string LineAssembler::Flush() {
  std::string out;
  for (auto& [rank, partial] : partial_) {
    if (partial.empty()) continue;
    out += Prefix(rank) + partial + "\n";
    partial.clear();
  }
  return out;
}

// ---- LogCursor -----------------------------------------------------------------------------

LogCursor::LogCursor(std::string job_id, int32_t attempt, std::vector<int32_t> ranks)
    : job_id_(std::move(job_id)), attempt_(attempt), chosen_(std::move(ranks)) {}

bool LogCursor::MultiRank() const {
  if (!chosen_.empty()) {
    return std::any_of(chosen_.begin(), chosen_.end(),
                       [&](int32_t r) { return r != chosen_.front(); });
  }
  return world_size_ != 1;
}

int64_t LogCursor::offset(int32_t rank) const {
  auto it = offsets_.find(rank);
  return it == offsets_.end() ? 0 : it->second;
}

std::vector<int32_t> LogCursor::RequestRanks() const {
  if (!chosen_.empty()) {
    std::vector<int32_t> ranks;
    for (int32_t r : chosen_) {
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
    return ranks;
  }
  std::vector<int32_t> ranks;
  for (int32_t r = 0; r < world_size_; ++r) ranks.push_back(r);
  for (const auto& [r, offset] : offsets_) {
    if (r >= world_size_) ranks.push_back(r);
  }
  return ranks;
}

v1::GetLogsRequest LogCursor::NextRequest() {
  ++requests_;
  v1::GetLogsRequest req;
  req.set_job_id(job_id_);
  req.set_attempt(attempt_);
  const std::vector<int32_t> ranks = RequestRanks();
  const bool discover =
      discovering() && (ranks.empty() || discover_next_ || requests_ % kDiscoveryEvery == 0);
  discover_next_ = false;
  if (discover) {
    // Every rank, from 0: only new ranks' bytes are used (Consume skips the rest).
    last_max_bytes_ = ranks.empty() ? kUnknownRanksBytes : 1;
    req.set_max_bytes(static_cast<int32_t>(last_max_bytes_));
    return req;
  }
  for (int32_t r : ranks) {
    req.add_ranks(r);
    req.add_offsets(offset(r));
  }
  const int64_t per_rank = std::clamp<int64_t>(
      kBytesPerRequest / std::max<int64_t>(1, static_cast<int64_t>(ranks.size())), kMinRankBytes,
      kMaxRankBytes);
  last_max_bytes_ = per_rank;
  req.set_max_bytes(static_cast<int32_t>(per_rank));
  return req;
}

LogCursor::Update LogCursor::Consume(const v1::GetLogsResponse& resp, LineAssembler& lines,
                                     std::string* out) {
  Update update;
  if (attempt_ == 0 && resp.attempt() > 0) attempt_ = resp.attempt();
  // Rank order, so that one response prints deterministically.
  std::vector<const v1::LogChunk*> chunks;
  for (const v1::LogChunk& c : resp.chunks()) chunks.push_back(&c);
  std::stable_sort(chunks.begin(), chunks.end(), [](const v1::LogChunk* a, const v1::LogChunk* b) {
    return a->world_rank() < b->world_rank();
  });
  for (const v1::LogChunk* c : chunks) {
    const int32_t rank = c->world_rank();
    if (!chosen_.empty() && std::find(chosen_.begin(), chosen_.end(), rank) == chosen_.end()) {
      continue;  // not asked for
    }
    const std::string& data = c->data();
    if (!data.empty() && static_cast<int64_t>(data.size()) >= last_max_bytes_) update.full = true;
    int64_t& have = offsets_[rank];
    const int64_t end = c->offset() + static_cast<int64_t>(data.size());
    if (end <= have) continue;
    // Bytes from `have` on are new; a chunk starting past `have` means bytes were skipped
    // (the server lost them): print what came.
    const int64_t skip = std::max<int64_t>(0, have - c->offset());
    const std::string_view fresh(data.data() + skip, data.size() - skip);
    *out += lines.Add(rank, fresh);
    update.new_bytes += static_cast<int64_t>(fresh.size());
    have = end;
  }
  return update;
}

}  // namespace dhp::dhpctl
