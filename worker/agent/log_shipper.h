// LogShipper: forwards the rank logs of a node to the controller (AppendLogs), in order and
// without loss across controller restarts.
//
// For each log it keeps the offset the controller has acknowledged and ships the bytes after it
// (chunks of at most max_chunk_bytes, one per log per call, at most max_request_bytes per call).
// The controller answers with the size it now holds for each chunk's log, which becomes the new
// offset: less than sent means "resend from there", more means "skip ahead". When a call fails
// (controller unreachable) the offsets stay and the next round retries. A log that Track no
// longer lists (its rank exited and was forgotten) is shipped until fully acknowledged, then
// dropped. Adopt takes on logs a previous agent left (its ranks ended with it): the first
// chunk of each is empty, so the controller's answer says how much of it it already holds, and
// the rest is shipped like a forgotten rank's. Resync makes the next round ask the controller for its sizes even when there is no
// new output (after a controller restart).
//
// Thread-safe: Track and the accessors may be called from any thread while Ship runs on
// another; the mutex is never held during a send, so a slow controller does not block Track.
#ifndef DHP_WORKER_AGENT_LOG_SHIPPER_H_
#define DHP_WORKER_AGENT_LOG_SHIPPER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"
#include "worker/agent/rank_launcher.h"

namespace dhp::worker {

struct LogShipperOptions {
  std::string node_id;
  int64_t max_chunk_bytes = 256 << 10;
  int64_t max_request_bytes = 1 << 20;
  int max_chunks_per_request = 512;  // bounds a request of many empty probes
  int max_calls_per_round = 8;  // Ship stops after this many calls even when more is waiting
};

class LogShipper {
 public:
  using SendFn =
      std::function<absl::StatusOr<v1::AppendLogsResponse>(const v1::AppendLogsRequest&)>;

  LogShipper(LogShipperOptions options, SendFn send);

  // The logs of the ranks tracked now: new ones are shipped from offset 0, those no longer
  // listed until fully acknowledged.
  void Track(const std::vector<RankLog>& logs);
  // After the controller forgot this node (it may have restarted and lost logs): the next Ship
  // sends an empty chunk at the acknowledged offset of each log with nothing new, so the
  // controller's answer (its size) says where to resend from.
  void Resync();
  // Logs found on disk at start (FindRankLogs), not tracked now: shipped from the size the
  // controller holds (asked with an empty chunk) until fully acknowledged, then dropped. A log
  // Track lists later keeps the acknowledged offset.
  void Adopt(const std::vector<RankLog>& logs);
  // One round: AppendLogs calls until no new output is left, max_calls_per_round calls were
  // made, or a call failed (its status is returned; the offsets stay for the next round).
  absl::Status Ship();

  size_t tracked() const;
  // The acknowledged offset of a log; nullopt when not tracked.
  std::optional<int64_t> acknowledged(const RankKey& key) const;

 private:
  struct Log {
    std::string path;
    int64_t acked = 0;    // bytes the controller holds
    bool listed = true;   // in the last Track
    bool probe = false;   // send an empty chunk even without new bytes (Resync)
    bool ask_size = false;  // adopted, size held unknown: the next chunk is an empty probe
  };
  // Builds the next request from the logs' new bytes; no chunks when there is nothing new.
  v1::AppendLogsRequest NextRequest();
  void DropFinished();

  const LogShipperOptions options_;
  const SendFn send_;
  std::mutex ship_mu_;      // serializes Ship calls
  mutable std::mutex mu_;   // guards logs_ and cursor_
  std::map<RankKey, Log> logs_;
  std::optional<RankKey> cursor_;  // the last log put in a request: the next one starts after it
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_LOG_SHIPPER_H_
