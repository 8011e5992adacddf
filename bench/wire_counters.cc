#include "bench/wire_counters.h"

// <linux/tcp.h>, not <netinet/tcp.h>: glibc's struct tcp_info stops before tcpi_bytes_sent.
#include <dirent.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace dhp::bench {
namespace {

std::string Errno(int e) { return std::strerror(e); }

int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

// Local and peer port of a socket (0 where unknown, e.g. the peer of a listening socket).
std::pair<int, int> Ports(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t len = sizeof(local);
  int lp = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 ? PortOf(local) : 0;
  len = sizeof(peer);
  int pp = getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 ? PortOf(peer) : 0;
  return {lp, pp};
}

}  // namespace

TcpCounters& TcpCounters::operator+=(const TcpCounters& o) {
  bytes_sent += o.bytes_sent;
  bytes_retrans += o.bytes_retrans;
  bytes_received += o.bytes_received;
  segs_out += o.segs_out;
  segs_in += o.segs_in;
  header_bytes = std::max(header_bytes, o.header_bytes);
  return *this;
}

TcpCounters TcpCounters::operator-(const TcpCounters& o) const {
  TcpCounters d = *this;
  d.bytes_sent -= o.bytes_sent;
  d.bytes_retrans -= o.bytes_retrans;
  d.bytes_received -= o.bytes_received;
  d.segs_out -= o.segs_out;
  d.segs_in -= o.segs_in;
  return d;
}

absl::StatusOr<TcpSnapshot> ReadOwnTcpSockets(const std::set<int>& skip_ports) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::UnavailableError("opendir /proc/self/fd: " + Errno(errno));
  TcpSnapshot snap;
  const int dir_fd = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dir_fd) continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;  // closed meanwhile
    unsigned long long inode = 0;
    if (std::sscanf(target, "socket:[%llu]", &inode) != 1) continue;
    int protocol = 0, domain = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) continue;
    len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) continue;
    if (protocol != IPPROTO_TCP || (domain != AF_INET && domain != AF_INET6)) continue;
    const auto [local_port, peer_port] = Ports(fd);
    if (skip_ports.count(local_port) || skip_ports.count(peer_port)) continue;
    tcp_info info{};
    socklen_t info_len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) != 0) continue;
    TcpCounters c;
    const bool has_bytes_sent =
        info_len >= offsetof(tcp_info, tcpi_bytes_retrans) + sizeof(info.tcpi_bytes_retrans);
    if (!has_bytes_sent) snap.bytes_sent_is_acked = true;
    c.bytes_sent =
        static_cast<int64_t>(has_bytes_sent ? info.tcpi_bytes_sent : info.tcpi_bytes_acked);
    c.bytes_retrans = has_bytes_sent ? static_cast<int64_t>(info.tcpi_bytes_retrans) : 0;
    c.bytes_received = static_cast<int64_t>(info.tcpi_bytes_received);
    c.segs_out = info.tcpi_segs_out;
    c.segs_in = info.tcpi_segs_in;
    c.header_bytes = (domain == AF_INET ? 20 : 40) + 20 +
                     ((info.tcpi_options & TCPI_OPT_TIMESTAMPS) != 0 ? 12 : 0);
    snap.sockets[inode] = c;
  }
  closedir(dir);
  return snap;
}

TcpCounters TcpDelta(const TcpSnapshot& earlier, const TcpSnapshot& later) {
  TcpCounters total;
  for (const auto& [inode, now] : later.sockets) {
    auto it = earlier.sockets.find(inode);
    total += it == earlier.sockets.end() ? now : now - it->second;
  }
  return total;
}

NetDevCounters NetDevCounters::operator-(const NetDevCounters& o) const {
  return {rx_bytes - o.rx_bytes, rx_packets - o.rx_packets, tx_bytes - o.tx_bytes,
          tx_packets - o.tx_packets};
}

std::optional<NetDevCounters> ReadNetDev(const std::string& iface) {
  std::ifstream in("/proc/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != iface) continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t v[10] = {};
    for (int64_t& x : v) fields >> x;
    if (!fields) return std::nullopt;
    // rx: bytes packets errs drop fifo frame compressed multicast | tx: bytes packets ...
    return NetDevCounters{v[0], v[1], v[8], v[9]};
  }
  return std::nullopt;
}

namespace {

enum Step { kEntered = 0, kUnshare, kSetgroups, kUidMap, kGidMap, kSocket, kGetFlags, kSetFlags };

// open + write + close; 0 or errno. Async-signal-safe.
int WriteAll(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int e = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return e;
}

}  // namespace

PrivateNetNamespace::PrivateNetNamespace()
    : uid_map_(absl::StrCat(geteuid(), " ", geteuid(), " 1")),
      gid_map_(absl::StrCat(getegid(), " ", getegid(), " 1")) {}

PrivateNetNamespace::Result PrivateNetNamespace::Enter() const {
  Result r;
  if (unshare(CLONE_NEWNET) != 0) {
    r.err_direct = errno;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return {kUnshare, errno, r.err_direct};
    // Map our own ids, so that files keep their owner (setgroups must be denied first).
    static const std::string kDeny = "deny";
    if (int e = WriteAll("/proc/self/setgroups", kDeny)) return {kSetgroups, e, r.err_direct};
    if (int e = WriteAll("/proc/self/uid_map", uid_map_)) return {kUidMap, e, r.err_direct};
    if (int e = WriteAll("/proc/self/gid_map", gid_map_)) return {kGidMap, e, r.err_direct};
  }
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return {kSocket, errno, r.err_direct};
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    r = {kGetFlags, errno, r.err_direct};
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) r = {kSetFlags, errno, r.err_direct};
  }
  close(s);
  return r;
}

std::string PrivateNetNamespace::Describe(const Result& r) {
  switch (r.step) {
    case kEntered:
      return "entered";
    case kUnshare:
      return absl::StrCat("unshare(CLONE_NEWNET): ", Errno(r.err_direct),
                          "; unshare(CLONE_NEWUSER | CLONE_NEWNET): ", Errno(r.err),
                          "; namespaces are off here: no CAP_SYS_ADMIN, and user namespaces "
                          "blocked (seccomp, kernel.unprivileged_userns_clone=0 or "
                          "user.max_user_namespaces=0)");
    case kSetgroups:
      return "writing /proc/self/setgroups: " + Errno(r.err);
    case kUidMap:
      return "writing /proc/self/uid_map: " + Errno(r.err);
    case kGidMap:
      return "writing /proc/self/gid_map: " + Errno(r.err);
    case kSocket:
      return "socket: " + Errno(r.err);
    case kGetFlags:
      return "SIOCGIFFLAGS lo: " + Errno(r.err);
    case kSetFlags:
      return "SIOCSIFFLAGS lo up: " + Errno(r.err);
  }
  return "unknown step " + std::to_string(r.step);
}

void PrivateNetNamespace::Encode(const Result& r, char* buf) {
  // Decimal digits by hand: snprintf is not async-signal-safe.
  char* p = buf;
  for (int v : {r.step, r.err, r.err_direct}) {
    if (p != buf) *p++ = ',';
    unsigned u = v < 0 ? 0u : static_cast<unsigned>(v);
    char digits[12];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    while (n > 0) *p++ = digits[--n];
  }
  *p = '\0';
}

std::optional<PrivateNetNamespace::Result> PrivateNetNamespace::Decode(const std::string& s) {
  Result r;
  if (std::sscanf(s.c_str(), "%d,%d,%d", &r.step, &r.err, &r.err_direct) != 3) return std::nullopt;
  return r;
}

}  // namespace dhp::bench
