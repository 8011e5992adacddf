// CommStats: bytes by tensor size that every collective moved, per (group name, operation), for
// the step loop's metrics, the benchmarks and the tests (deterministic counters beat timers).
// Also the per-rank volume formulas (AllReduceVolume, ...) that the communicators record.
//
// What the counters are, and are not. A counter is a formula of the size of the tensor handed
// to the backend: the algorithmic volume of the collective, as if the data crossed the network
// exactly once per the bandwidth-optimal algorithm (ring / pairwise exchange). It is NOT bytes
// seen on the wire: the backend's own algorithm, its message headers and control messages, TCP/IP
// (or NVLink/InfiniBand) framing and retransmissions are not in it, and Gloo or NCCL may move
// more or fewer bytes than the formula for a given op and group size. bench/comm_wire_bench.cc
// measures the difference for 2 Gloo ranks on loopback (bench/results/comm_wire.md). Hence the
// field names tensor_bytes_sent / tensor_bytes_received. The rank's metric "comm_bytes:<group>"
// and the controller's dhp_collective_bytes export these counters under their historical names.
//
// Counting convention (per rank, per call; N = bytes of the tensor the backend is handed, i.e.
// after any dtype change the communicator makes, such as bf16 -> fp32 for reductions on Gloo;
// P = group size; "/" is integer division, rounding down), independent of what the backend
// does internally:
//   all_reduce      N = tensor bytes            sent = received = 2*N*(P-1)/P
//   all_gather      N = bytes of one rank's     sent = received = N*(P-1)
//                   input (uneven inputs travel padded to the largest: N = max rows * row bytes)
//   reduce_scatter  N = input bytes (all P      sent = received = N*(P-1)/P
//                   chunks); uneven chunks: sent = sum of the chunks for the other ranks,
//                   received = (P-1) * own chunk
//   all_to_all      N = input bytes             sent = N - own chunk (= N*(P-1)/P when even),
//                                               received = output bytes - own chunk
//   broadcast       N = tensor bytes            root: sent = N*(P-1); others: received = N
//   send / recv     N = tensor bytes            sent = N / received = N
//   barrier                                     0 bytes (the call is counted)
// With P = 1 every volume is 0. Operation names are the strings in `kOp*` below.
//
// Thread-safety: CommStats is thread-safe (mu_ guards counters_). The Volume functions are pure.
#ifndef DHP_WORKER_COMM_COMM_STATS_H_
#define DHP_WORKER_COMM_COMM_STATS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace dhp::comm {

inline constexpr char kOpAllReduce[] = "all_reduce";
inline constexpr char kOpAllGather[] = "all_gather";
inline constexpr char kOpReduceScatter[] = "reduce_scatter";
inline constexpr char kOpAllToAll[] = "all_to_all";
inline constexpr char kOpBroadcast[] = "broadcast";
inline constexpr char kOpSend[] = "send";
inline constexpr char kOpRecv[] = "recv";
inline constexpr char kOpBarrier[] = "barrier";

struct CommCounters {
  int64_t calls = 0;
  int64_t tensor_bytes_sent = 0;
  int64_t tensor_bytes_received = 0;
  CommCounters& operator+=(const CommCounters& o) {
    calls += o.calls;
    tensor_bytes_sent += o.tensor_bytes_sent;
    tensor_bytes_received += o.tensor_bytes_received;
    return *this;
  }
  bool operator==(const CommCounters& o) const {
    return calls == o.calls && tensor_bytes_sent == o.tensor_bytes_sent &&
           tensor_bytes_received == o.tensor_bytes_received;
  }
};

// Per-rank bytes by tensor size of one call (the convention above), not bytes on the wire.
struct Volume {
  int64_t sent = 0;
  int64_t received = 0;
  bool operator==(const Volume& o) const { return sent == o.sent && received == o.received; }
};

Volume AllReduceVolume(int64_t bytes, int group_size);
Volume AllGatherVolume(int64_t bytes_per_rank, int group_size);
Volume ReduceScatterVolume(int64_t input_bytes, int group_size);
Volume AllToAllVolume(int64_t input_bytes, int group_size);
Volume BroadcastVolume(int64_t bytes, int group_size, bool is_root);

class CommStats {
 public:
  using Key = std::pair<std::string, std::string>;  // (group, op)

  void Record(std::string_view group, std::string_view op, const Volume& volume);

  CommCounters Get(std::string_view group, std::string_view op) const;
  CommCounters GroupTotal(std::string_view group) const;  // every op of one group
  CommCounters OpTotal(std::string_view op) const;        // one op over every group
  CommCounters Total() const;
  std::map<Key, CommCounters> Snapshot() const;
  void Reset();

 private:
  mutable std::mutex mu_;  // guards counters_
  std::map<Key, CommCounters> counters_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_COMM_STATS_H_
