// The pure logic of `dhpctl logs`: which GetLogs request to send next, and how the chunks it
// returns become complete output lines.
//
// LineAssembler keeps each rank's partial last line until its newline arrives (or the output
// ends), so that lines of different ranks never interleave mid-line; with a prefix each line
// starts "[rank N] ".
//
// LogCursor remembers, per rank, how many bytes were printed, builds the next request (ranks
// with their offsets) and consumes responses: bytes already printed are skipped, so it also
// accepts chunks that start before its offset (a discovery request for every rank reads from
// 0). With no ranks chosen it follows every rank: the ranks of the world when its size is
// known, plus any rank that shows up. Without the world size it asks for every rank until one
// has output, then for the ranks seen, with every 8th request a small one for every rank to
// find ranks whose output starts later.
//
// Not thread-safe; one per command.
#ifndef DHP_API_DHPCTL_LOG_LINES_H_
#define DHP_API_DHPCTL_LOG_LINES_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

class LineAssembler {
 public:
  // A partial line longer than this is printed as a line of its own.
  static constexpr size_t kMaxPartialBytes = 64 << 10;

  explicit LineAssembler(bool prefix) : prefix_(prefix) {}

  // The complete lines that `data` finishes (with what was kept of that rank before), each
  // with its "\n"; keeps the rest.
  std::string Add(int32_t rank, std::string_view data);
  // Every rank's kept partial line, ended with "\n" (when the output has ended).
  std::string Flush();

 private:
  std::string Prefix(int32_t rank) const;

  const bool prefix_;
  std::map<int32_t, std::string> partial_;  // rank -> bytes after its last newline
};

class LogCursor {
 public:
  // A request asks for at most this many bytes in all, split among its ranks (gRPC refuses
  // replies over 4 MiB); each rank gets between kMinRankBytes and kMaxRankBytes.
  static constexpr int64_t kBytesPerRequest = 2 << 20;
  static constexpr int64_t kMinRankBytes = 1 << 10;
  static constexpr int64_t kMaxRankBytes = 1 << 20;
  // Asking for every rank without knowing how many there are.
  static constexpr int64_t kUnknownRanksBytes = 4 << 10;
  static constexpr int kDiscoveryEvery = 8;

  // `ranks` empty: every rank. `attempt` 0: the current one (the first response tells which).
  LogCursor(std::string job_id, int32_t attempt, std::vector<int32_t> ranks);

  // The run's world size when known (0: unknown); only matters with no ranks chosen.
  void set_world_size(int32_t world_size) { world_size_ = world_size; }
  // Whether lines need a "[rank N] " prefix: unless exactly one rank is chosen, or every rank
  // is followed and the world has one rank.
  bool MultiRank() const;

  v1::GetLogsRequest NextRequest();

  struct Update {
    int64_t new_bytes = 0;  // bytes not seen before
    bool full = false;      // some chunk came back as large as asked: more may be waiting
  };
  // Feeds the new bytes of each chunk into `lines` and appends the completed lines to `out`.
  Update Consume(const v1::GetLogsResponse& resp, LineAssembler& lines, std::string* out);

  // Every rank is followed and the world size is unknown: ranks are found by asking for all.
  bool discovering() const { return chosen_.empty() && world_size_ <= 0; }
  // Makes the next request one for every rank (when discovering), e.g. a last look for ranks
  // not seen yet once the attempt has ended.
  void DiscoverNext() { discover_next_ = true; }

  int32_t attempt() const { return attempt_; }
  int64_t offset(int32_t rank) const;

 private:
  std::vector<int32_t> RequestRanks() const;

  const std::string job_id_;
  int32_t attempt_;
  const std::vector<int32_t> chosen_;  // empty: every rank
  int32_t world_size_ = 0;
  int64_t requests_ = 0;
  bool discover_next_ = false;
  int64_t last_max_bytes_ = kMaxRankBytes;  // max_bytes of the last request
  std::map<int32_t, int64_t> offsets_;  // rank -> bytes consumed
};

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_LOG_LINES_H_
