// Bytes that crossed this process's TCP sockets, as the kernel counts them, for benchmarks that
// compare dhp's byte counters (bytes by tensor size, worker/comm/comm_stats.h) with the wire:
//   - per-socket TCP_INFO of every TCP socket this process holds (found through /proc/self/fd):
//     payload bytes sent, retransmitted and received, and segments (including pure ACKs) in and
//     out. Needs no privilege; tcpi_bytes_sent and tcpi_bytes_retrans need Linux 4.19 (older
//     kernels: bytes acknowledged, and no retransmitted bytes);
//   - the interface counters of /proc/net/dev (bytes and packets, headers included), which mean
//     something only in a network namespace of one's own (PrivateNetNamespace), where the
//     loopback carries nothing but this process tree's traffic.
// Linux only. No LibTorch. Thread-safety: the functions are thread-safe;
// PrivateNetNamespace::Enter is also async-signal-safe (see there).
#ifndef DHP_BENCH_WIRE_COUNTERS_H_
#define DHP_BENCH_WIRE_COUNTERS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::bench {

// Counters of one TCP socket (or a sum of several), cumulative since the socket opened.
struct TcpCounters {
  int64_t bytes_sent = 0;      // payload bytes put on the wire, retransmissions included
                               // (tcpi_bytes_sent; tcpi_bytes_acked where the kernel lacks it)
  int64_t bytes_retrans = 0;   // of which retransmitted (tcpi_bytes_retrans; 0 if the kernel
                               // lacks it)
  int64_t bytes_received = 0;  // payload bytes received in order (tcpi_bytes_received)
  int64_t segs_out = 0;        // segments sent, pure ACKs included (tcpi_segs_out)
  int64_t segs_in = 0;         // segments received (tcpi_segs_in)
  // IP + TCP header bytes of one segment of this socket: 20 (IPv4) or 40 (IPv6) + 20 + 12 with
  // the timestamp option. For a sum: the largest of its sockets.
  int64_t header_bytes = 0;
  TcpCounters& operator+=(const TcpCounters& o);
  TcpCounters operator-(const TcpCounters& o) const;  // header_bytes: this one's
};

struct TcpSnapshot {
  std::map<uint64_t, TcpCounters> sockets;  // by socket inode
  bool bytes_sent_is_acked = false;         // the kernel has no tcpi_bytes_sent / _retrans
};

// TCP_INFO of every TCP socket of this process, except those whose local or peer port is in
// `skip_ports` (e.g. a control channel that is not part of the measurement).
absl::StatusOr<TcpSnapshot> ReadOwnTcpSockets(const std::set<int>& skip_ports);

// later - earlier, socket by socket (a socket absent from `earlier` counts from zero; one that
// closed in between is ignored), summed.
TcpCounters TcpDelta(const TcpSnapshot& earlier, const TcpSnapshot& later);

struct NetDevCounters {
  int64_t rx_bytes = 0, rx_packets = 0, tx_bytes = 0, tx_packets = 0;
  NetDevCounters operator-(const NetDevCounters& o) const;
};

// One interface's line of /proc/net/dev (this network namespace); nullopt if absent.
std::optional<NetDevCounters> ReadNetDev(const std::string& iface);

// Moves the calling process into a new network namespace (and, unless it has CAP_SYS_ADMIN, a
// new user namespace that maps its own uid and gid to themselves) and brings its loopback up.
// Processes started afterwards inherit it. A new user namespace needs a single-threaded caller,
// and libraries start threads when they load (OpenBLAS does): so construct this object, fork,
// call Enter() in the child (it makes system calls only: async-signal-safe) and exec. Enter()
// fails where namespaces are not allowed (a container's seccomp profile,
// kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0); Describe says why.
class PrivateNetNamespace {
 public:
  struct Result {
    int step = 0;        // 0: entered; else the step that failed (see Describe)
    int err = 0;         // errno of that step
    int err_direct = 0;  // errno of unshare(CLONE_NEWNET) alone, when the user namespace was tried
  };

  PrivateNetNamespace();  // formats the id maps (allocates: call before fork)
  Result Enter() const;

  static std::string Describe(const Result& r);
  // A short text form that survives exec in an environment variable ("step,err,err_direct"),
  // written without allocating into `buf` (at least 40 bytes), and its parser.
  static void Encode(const Result& r, char* buf);
  static std::optional<Result> Decode(const std::string& s);

 private:
  std::string uid_map_, gid_map_;
};

}  // namespace dhp::bench

#endif  // DHP_BENCH_WIRE_COUNTERS_H_
