// comm_wire_bench: dhp's collective byte counters (CommStats: bytes by tensor size, the formula
// of worker/comm/comm_stats.h) against the bytes that actually crossed the sockets, for 2 ranks
// over real Gloo TCP on loopback.
//
// Two rank processes (this binary, re-executed) bootstrap a 2-rank group through a gRPC
// rendezvous KV served by the parent (GrpcKvClient -> ControllerStore -> ProcessGroupGloo, as
// dhp-rank does), then run each collective on fp32 tensors of a few sizes. Each measurement
// window is
//   barrier, settle, SNAPSHOT, barrier, op x reps, barrier, settle, SNAPSHOT
// and a baseline window is the same without the ops (its two barriers are subtracted, so
// rendezvous, connection set-up and the fences themselves are not in the numbers). Per call,
// summed over both ranks:
//   counted       CommStats' tensor_bytes_sent;
//   Gloo payload  tcpi_bytes_sent - tcpi_bytes_retrans over the rank's TCP sockets (TCP_INFO via
//                 /proc/self/fd; the socket to the KV is skipped): Gloo's data and message
//                 headers, each byte once. Needs no privilege;
//   retrans       tcpi_bytes_retrans; segs: tcpi_segs_out (pure ACKs included);
//   wire est.     payload + retrans + segs x IP/TCP header bytes;
//   wire (lo)     where the parent could enter a network namespace of its own (it forks, the
//                 child unshares and re-executes this binary; the ranks inherit the namespace),
//                 the loopback's tx bytes from /proc/net/dev: every IP packet of the run,
//                 exactly. Elsewhere the column is left out and the reason printed (--no-netns
//                 skips it).
//
// bazel run //bench:comm_wire_bench -- [--sizes 4096,1048576,16777216] [--no-netns]
// Prints a Markdown table last and writes bench/results/comm_wire.{md,json}.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/client.h"
#include "api/grpc_status.h"
#include "bench/bench_util.h"
#include "bench/wire_counters.h"
#include "common/child_wait.h"
#include "dhp/v1/service.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"
#include "worker/comm/grpc_kv_client.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"

extern char** environ;

namespace dhp::bench {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

constexpr char kRankEnv[] = "DHP_COMM_WIRE_RANK";
constexpr char kTargetEnv[] = "DHP_COMM_WIRE_KV";
constexpr char kOutEnv[] = "DHP_COMM_WIRE_OUT";
constexpr char kNetnsEnv[] = "DHP_COMM_WIRE_NETNS";  // PrivateNetNamespace::Encode's result
constexpr int kRanks = 2;
// The ops, in the order measured and printed. "send_recv": rank 0 sends, rank 1 receives.
const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter",
                                       "all_to_all", "broadcast",  "send_recv"};

struct Options {
  std::vector<int64_t> sizes = {4096, 1 << 20, 16 << 20};  // bytes of the fp32 tensor
  int64_t window_bytes = 64 << 20;                         // reps = window_bytes / size, clamped
  int min_reps = 3, max_reps = 50, baselines = 5, settle_ms = 100;
  bool netns = true;
  std::string out_dir = "bench/results";
};

// ---- the rendezvous KV, served by the parent (WorkerService Kv* on an InMemoryKvClient) ------

class KvService final : public v1::WorkerService::Service {
 public:
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest* req,
                     v1::KvSetResponse*) override {
    return api::ToGrpcStatus(kv_.Set(Key(req->scope(), req->key()), req->value()));
  }
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override {
    absl::StatusOr<std::string> v =
        kv_.Get(Key(req->scope(), req->key()), std::chrono::milliseconds(req->timeout_ms()));
    if (v.ok()) resp->set_value(*v);
    return api::ToGrpcStatus(v.status());
  }
  grpc::Status KvAdd(grpc::ServerContext*, const v1::KvAddRequest* req,
                     v1::KvAddResponse* resp) override {
    absl::StatusOr<int64_t> v = kv_.Add(Key(req->scope(), req->key()), req->delta());
    if (v.ok()) resp->set_value(*v);
    return api::ToGrpcStatus(v.status());
  }
  grpc::Status KvWait(grpc::ServerContext*, const v1::KvWaitRequest* req,
                      v1::KvWaitResponse*) override {
    return api::ToGrpcStatus(
        kv_.Wait(Keys(req->scope(), req->keys()), std::chrono::milliseconds(req->timeout_ms())));
  }
  grpc::Status KvCheck(grpc::ServerContext*, const v1::KvCheckRequest* req,
                       v1::KvCheckResponse* resp) override {
    absl::StatusOr<bool> v = kv_.Check(Keys(req->scope(), req->keys()));
    if (v.ok()) resp->set_ready(*v);
    return api::ToGrpcStatus(v.status());
  }
  grpc::Status KvDelete(grpc::ServerContext*, const v1::KvDeleteRequest* req,
                        v1::KvDeleteResponse* resp) override {
    absl::StatusOr<bool> v = kv_.Delete(Key(req->scope(), req->key()));
    if (v.ok()) resp->set_deleted(*v);
    return api::ToGrpcStatus(v.status());
  }

 private:
  static std::string Key(const v1::KvScope& scope, const std::string& key) {
    return scope.job_id() + "#" + std::to_string(scope.attempt()) + "/" + key;
  }
  template <typename Repeated>
  static std::vector<std::string> Keys(const v1::KvScope& scope, const Repeated& keys) {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(Key(scope, k));
    return out;
  }

  comm::InMemoryKvClient kv_;
};

// ---- one rank process -------------------------------------------------------------------------

int64_t RepsFor(const Options& o, int64_t bytes) {
  return std::clamp<int64_t>(o.window_bytes / std::max<int64_t>(bytes, 1), o.min_reps, o.max_reps);
}

Json TcpJson(const TcpCounters& c) {
  return {{"bytes_sent", c.bytes_sent},
          {"bytes_retrans", c.bytes_retrans},
          {"bytes_received", c.bytes_received},
          {"segs_out", c.segs_out},
          {"segs_in", c.segs_in},
          {"header_bytes", c.header_bytes}};
}

Json LoJson(const std::optional<NetDevCounters>& c) {
  if (!c) return nullptr;
  return {{"tx_bytes", c->tx_bytes},
          {"tx_packets", c->tx_packets},
          {"rx_bytes", c->rx_bytes},
          {"rx_packets", c->rx_packets}};
}

absl::Status Check(const absl::Status& s, const std::string& what) {
  return s.ok() ? s : absl::Status(s.code(), what + ": " + std::string(s.message()));
}

absl::Status RunRank(int rank, const Options& o, const std::string& target,
                     const std::string& out_path) {
  at::set_num_threads(1);
  api::DhpClient client(target);
  comm::GrpcKvClient kv(client, "comm-wire", 1);
  comm::ProcessGroupsOptions popts;
  popts.arrival_timeout = popts.store_timeout = 60s;
  popts.collective_timeout = 120s;
  comm::CommStats stats;
  absl::StatusOr<std::unique_ptr<comm::Communicator>> made =
      comm::CreateCommunicator(kv, comm::GroupSpec{"wire", {0, 1}}, rank, popts, &stats);
  if (!made.ok()) return made.status();
  comm::Communicator& c = **made;
  const int kv_port = std::atoi(target.substr(target.rfind(':') + 1).c_str());
  const std::set<int> skip = {kv_port};

  struct Snap {
    TcpSnapshot tcp;
    std::optional<NetDevCounters> lo;
    comm::CommCounters counted;  // every op but the barrier
  };
  bool acked_only = false;
  auto snap = [&]() -> absl::StatusOr<Snap> {
    absl::StatusOr<TcpSnapshot> tcp = ReadOwnTcpSockets(skip);
    if (!tcp.ok()) return tcp.status();
    acked_only = acked_only || tcp->bytes_sent_is_acked;
    Snap s{std::move(*tcp), ReadNetDev("lo"), {}};
    for (const auto& [key, counters] : stats.Snapshot()) {
      if (key.second != comm::kOpBarrier) s.counted += counters;
    }
    return s;
  };
  auto settle = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms)); };

  Json windows = Json::array();
  // One window: `op` `reps` times between fences (reps = 0: the baseline).
  auto window = [&](const std::string& name, int64_t bytes, int64_t reps,
                    const std::function<absl::Status()>& op) -> absl::Status {
    if (reps > 0) {
      if (absl::Status s = op(); !s.ok()) return Check(s, name + " warm-up");
    }
    if (absl::Status s = c.Barrier(); !s.ok()) return s;
    settle();
    absl::StatusOr<Snap> a = snap();
    if (!a.ok()) return a.status();
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = c.Barrier(); !s.ok()) return s;
    for (int64_t i = 0; i < reps; ++i) {
      if (absl::Status s = op(); !s.ok()) return Check(s, name);
    }
    if (absl::Status s = c.Barrier(); !s.ok()) return s;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    settle();
    absl::StatusOr<Snap> b = snap();
    if (!b.ok()) return b.status();
    Json w = {
        {"op", name},
        {"bytes", bytes},
        {"reps", reps},
        {"seconds", seconds},
        {"counted_sent", b->counted.tensor_bytes_sent - a->counted.tensor_bytes_sent},
        {"counted_received", b->counted.tensor_bytes_received - a->counted.tensor_bytes_received},
        {"tcp", TcpJson(TcpDelta(a->tcp, b->tcp))},
        {"tcp_sockets", b->tcp.sockets.size()}};
    w["lo"] = a->lo && b->lo ? LoJson(*b->lo - *a->lo) : Json(nullptr);
    windows.push_back(w);
    return absl::OkStatus();
  };

  for (int i = 0; i < o.baselines; ++i) {
    if (absl::Status s = window("baseline", 0, 0, nullptr); !s.ok()) return s;
  }
  for (int64_t bytes : o.sizes) {
    const int64_t n = bytes / 4;  // fp32 elements; even, so every op splits over 2 ranks
    const int64_t reps = RepsFor(o, bytes);
    at::Tensor x = at::full({n}, static_cast<float>(rank + 1), at::kFloat);
    const std::map<std::string, std::function<absl::Status()>> ops = {
        {"all_reduce", [&] { return c.AllReduce(x, comm::ReduceOp::kSum); }},
        {"all_gather", [&] { return c.AllGather(x).status(); }},
        {"reduce_scatter", [&] { return c.ReduceScatter(x).status(); }},
        {"all_to_all", [&] { return c.AllToAll(x).status(); }},
        {"broadcast", [&] { return c.Broadcast(x, 0); }},
        {"send_recv", [&] { return rank == 0 ? c.Send(x, 1, 5) : c.Recv(x, 0, 5); }},
    };
    for (const std::string& name : kOps) {
      if (absl::Status s = window(name, bytes, reps, ops.at(name)); !s.ok()) return s;
      std::fprintf(stderr, "[rank %d] %s %lld B x %lld\n", rank, name.c_str(),
                   static_cast<long long>(bytes), static_cast<long long>(reps));
    }
  }
  const Json out = {{"rank", rank},
                    {"tcp_bytes_sent_is_acked", acked_only},
                    {"libtorch", TORCH_VERSION},
                    {"windows", windows}};
  std::ofstream(out_path) << out.dump(2) << "\n";
  return absl::OkStatus();
}

// ---- the parent -------------------------------------------------------------------------------

pid_t SpawnRank(int rank, const std::string& target, const std::string& out_path, char** argv) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.push_back(std::string(kRankEnv) + "=" + std::to_string(rank));
  env_strings.push_back(std::string(kTargetEnv) + "=" + target);
  env_strings.push_back(std::string(kOutEnv) + "=" + out_path);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = fork();  // the child only execs
  if (pid == 0) {
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  return pid;
}

std::string Size(int64_t b) {
  if (b >= (1 << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string Num(double v) {  // bytes per call, thousands separated
  const long long x = std::llround(v);
  std::string s = std::to_string(x < 0 ? -x : x), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (x < 0 ? "-" : "") + out;
}

// Sums of one window over both ranks (lo: rank 0's reading, which already holds both ranks').
struct WindowSum {
  int64_t reps = 0;
  double counted = 0, counted_received = 0, payload = 0, retrans = 0, received = 0, segs = 0,
         headers = 0;
  std::optional<double> lo_bytes, lo_packets;
  double seconds = 0;
};

WindowSum Sum(const Json& w0, const Json& w1) {
  WindowSum s;
  s.reps = w0["reps"].get<int64_t>();
  for (const Json* w : {&w0, &w1}) {
    const Json& t = (*w)["tcp"];
    s.counted += (*w)["counted_sent"].get<double>();
    s.counted_received += (*w)["counted_received"].get<double>();
    s.payload += t["bytes_sent"].get<double>();
    s.retrans += t["bytes_retrans"].get<double>();
    s.received += t["bytes_received"].get<double>();
    s.segs += t["segs_out"].get<double>();
    s.headers += t["segs_out"].get<double>() * t["header_bytes"].get<double>();
    s.seconds = std::max(s.seconds, (*w)["seconds"].get<double>());
  }
  if (!w0["lo"].is_null()) {
    s.lo_bytes = w0["lo"]["tx_bytes"].get<double>();
    s.lo_packets = w0["lo"]["tx_packets"].get<double>();
  }
  return s;
}

// Forks a child that enters a private network namespace (a fork has one thread, which a new
// user namespace needs; this process already has OpenBLAS's) and re-executes this binary there
// with the outcome in kNetnsEnv, whether or not it succeeded. Returns the child's exit code.
int ReexecInPrivateNetNamespace(char** argv) {
  const PrivateNetNamespace ns;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.push_back(std::string(kNetnsEnv) + "=" + std::string(48, ' '));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char* result = env_strings.back().data() + std::strlen(kNetnsEnv) + 1;
  const pid_t pid = fork();
  if (pid == 0) {  // system calls only until exec
    PrivateNetNamespace::Encode(ns.Enter(), result);
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  if (pid < 0) {
    std::perror("fork");
    return 1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int ParentMain(const Options& o, char** argv) {
  std::string netns_note = "--no-netns: the lo column is left out";
  bool have_netns = false;
  if (o.netns) {
    const char* env = std::getenv(kNetnsEnv);
    std::optional<PrivateNetNamespace::Result> r =
        PrivateNetNamespace::Decode(env != nullptr ? env : "");
    have_netns = r && r->step == 0;
    netns_note = have_netns ? "private network namespace: loopback carries only this benchmark"
                            : "no private network namespace (" +
                                  (r ? PrivateNetNamespace::Describe(*r) : "not tried") +
                                  "): the wire (lo) column is left out";
  }
  std::fprintf(stderr, "[comm_wire] %s\n", netns_note.c_str());
  const Json machine = MachineInfo();
  const auto t_start = std::chrono::steady_clock::now();

  KvService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port <= 0) {
    std::fprintf(stderr, "comm_wire_bench: cannot start the KV server on 127.0.0.1\n");
    return 1;
  }
  const std::string target = "127.0.0.1:" + std::to_string(port);
  char tmpl[] = "/tmp/comm_wire_XXXXXX";
  const char* tmp = mkdtemp(tmpl);
  if (tmp == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int r = 0; r < kRanks; ++r) {
    outs.push_back(std::string(tmp) + "/rank" + std::to_string(r) + ".json");
    pids.push_back(SpawnRank(r, target, outs.back(), argv));
  }
  const std::vector<int> codes = WaitForChildren(pids, 600s);
  server->Shutdown(std::chrono::system_clock::now() + 1s);
  std::vector<Json> ranks;
  for (int r = 0; r < kRanks; ++r) {
    Json j;
    try {
      std::ifstream in(outs[r]);
      j = Json::parse(in);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm_wire_bench: rank %d exited with %d, no results (%s)\n", r,
                   codes[r], e.what());
      return 1;
    }
    ranks.push_back(std::move(j));
    std::remove(outs[r].c_str());
  }
  rmdir(tmp);
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  const Json& w0 = ranks[0]["windows"];
  const Json& w1 = ranks[1]["windows"];
  std::vector<WindowSum> base;
  std::vector<std::pair<std::string, int64_t>> keys;
  std::vector<WindowSum> sums;
  for (size_t i = 0; i < w0.size(); ++i) {
    WindowSum s = Sum(w0[i], w1[i]);
    if (w0[i]["op"] == "baseline") {
      base.push_back(s);
    } else {
      keys.emplace_back(w0[i]["op"].get<std::string>(), w0[i]["bytes"].get<int64_t>());
      sums.push_back(s);
    }
  }
  auto median_of = [&](auto field) {
    std::vector<double> v;
    for (const WindowSum& b : base) v.push_back(field(b));
    return Median(v);
  };
  auto spread = [&](auto field) {
    double lo_v = 1e300, hi_v = -1e300;
    for (const WindowSum& b : base) {
      lo_v = std::min(lo_v, field(b));
      hi_v = std::max(hi_v, field(b));
    }
    return Json{{"min", lo_v}, {"max", hi_v}};
  };
  const double b_payload = median_of([](const WindowSum& b) { return b.payload; });
  const double b_retrans = median_of([](const WindowSum& b) { return b.retrans; });
  const double b_received = median_of([](const WindowSum& b) { return b.received; });
  const double b_segs = median_of([](const WindowSum& b) { return b.segs; });
  const double b_headers = median_of([](const WindowSum& b) { return b.headers; });
  const bool lo = have_netns && !base.empty() && base[0].lo_bytes.has_value();
  const double b_lo = lo ? median_of([](const WindowSum& b) { return *b.lo_bytes; }) : 0;
  const double b_lo_pk = lo ? median_of([](const WindowSum& b) { return *b.lo_packets; }) : 0;
  int64_t header_bytes = 0;  // per segment, as TCP_INFO describes the ranks' sockets
  for (const Json& w : w0) {
    header_bytes = std::max(header_bytes, w["tcp"]["header_bytes"].get<int64_t>());
  }
  const bool acked = ranks[0]["tcp_bytes_sent_is_acked"].get<bool>() ||
                     ranks[1]["tcp_bytes_sent_is_acked"].get<bool>();

  std::ostringstream md;
  md << "## comm_wire_bench: CommStats' bytes by tensor size vs bytes on the wire (2 Gloo "
        "ranks, TCP loopback)\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"] << " CPUs ("
     << machine["cpu_model"].get<std::string>() << "), " << machine["kernel"].get<std::string>()
     << ", LibTorch " << ranks[0]["libtorch"].get<std::string>()
     << " (ProcessGroupGloo, 1 Gloo thread); run " << Fixed(total_s, 0)
     << " s. Two rank processes, one group of 2, fp32 tensors; " << netns_note << ".\n\n"
     << "Bytes per call, both ranks together (P = 2). **counted**: CommStats' "
        "tensor_bytes_sent, the formula of worker/comm/comm_stats.h (bytes by tensor size: what "
        "the rank's comm_bytes and `dhp_collective_bytes` add up, as sent + received). **Gloo "
        "payload**: TCP payload bytes sent by the ranks' sockets, each byte once "
        "(TCP_INFO tcpi_bytes_sent - tcpi_bytes_retrans"
     << (acked ? "; this kernel lacks them: tcpi_bytes_acked" : "")
     << "): Gloo's data and its own message headers. **framing**: Gloo payload - counted; "
        "**/48**: that in 48-byte Gloo preambles (gloo/transport/tcp/pair.h: six size_t). "
        "**retrans**: payload the kernel sent again (tcpi_bytes_retrans). **segs**: TCP segments "
        "out, pure ACKs included. **wire est.**: Gloo payload + retrans + segs x "
     << header_bytes
     << " B of IP + TCP headers (address family and timestamp option from TCP_INFO). **wire "
        "(lo)**: the loopback's tx bytes in the private namespace, i.e. all IP packets of the "
        "run, exact (the loopback does not count a link-layer header). The baseline (the "
        "window's two barriers, median of "
     << base.size() << " windows: " << Num(b_payload) << " B payload, " << Num(b_segs)
     << " segments" << (lo ? ", " + Num(b_lo) + " B on lo" : std::string())
     << ") is subtracted.\n\n"
     << "How to read it. (1) Data: framing is a whole number of 144-byte units in every row, "
        "so the data Gloo moves equals the formula exactly for these ops at P = 2 and the rest "
        "of the payload is Gloo's message headers: ring all-reduce sends N per rank "
        "(2N(P-1)/P), all-gather N(P-1), all-to-all N(P-1)/P, broadcast and send N; dhp's "
        "reduce-scatter on Gloo is an all-to-all plus a local sum, so it moves what all-to-all "
        "moves. (2) Gloo's framing: 144 B per transfer, three 48-byte preambles (consistent "
        "with a send-ready and a recv-ready notice plus the data message's own header); "
        "all-reduce splits its buffer into more transfers as it grows. That is 3.5-14% of a "
        "4 KiB call and under 0.1% from 1 MiB up. (3) IP + TCP headers (52 B per segment of up "
        "to ~64 KiB on loopback, ACK segments included) add 4-20% at 4 KiB and 0.1-0.2% from "
        "1 MiB up; on an Ethernet NIC with a 1500-byte MTU they would be about 3.6%, plus "
        "38 B of Ethernet framing per 1448-byte segment (not measured here). (4) Retransmitted "
        "bytes are the kernel's and vary from run to run: on loopback they are spurious (in a "
        "check run nstat counted tail-loss probes and DSACKs, i.e. duplicates received, when "
        "an ACK came back late on 2 busy cores). They are real bytes on the wire; the receivers "
        "got each byte once (tcp_payload_received in the JSON). (5) Not covered: P > 2 "
        "(Gloo's algorithms and message counts there may differ from the ring formula), NCCL, "
        "bf16 and uneven splits.\n\n";
  md << "| op | tensor | reps | counted | Gloo payload | payload / counted | framing | /48 | "
        "retrans | segs | wire est. | wire (lo) | wire / counted |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  Json rows = Json::array();
  for (size_t i = 0; i < sums.size(); ++i) {
    const WindowSum& s = sums[i];
    const double reps = static_cast<double>(s.reps);
    const double counted = s.counted / reps;
    const double retrans = (s.retrans - b_retrans) / reps;
    const double payload = (s.payload - s.retrans - (b_payload - b_retrans)) / reps;
    const double received = (s.received - b_received) / reps;
    const double segs = (s.segs - b_segs) / reps;
    const double estimate = payload + retrans + (s.headers - b_headers) / reps;
    std::optional<double> lo_bytes, lo_packets;
    if (lo && s.lo_bytes) {
      lo_bytes = (*s.lo_bytes - b_lo) / reps;
      lo_packets = (*s.lo_packets - b_lo_pk) / reps;
    }
    const double wire = lo_bytes ? *lo_bytes : estimate;
    md << "| " << keys[i].first << " | " << Size(keys[i].second) << " | " << s.reps << " | "
       << Num(counted) << " | " << Num(payload) << " | " << Fixed(payload / counted, 4) << " | "
       << Num(payload - counted) << " | " << Fixed((payload - counted) / 48, 1) << " | "
       << Num(retrans) << " | " << Fixed(segs, 1) << " | " << Num(estimate) << " | "
       << (lo_bytes ? Num(*lo_bytes) : "n/a") << " | " << Fixed(wire / counted, 4)
       << (lo_bytes ? "" : " (est.)") << " |\n";
    Json row = {{"op", keys[i].first},
                {"tensor_bytes", keys[i].second},
                {"reps", s.reps},
                {"counted_bytes_sent_per_call", counted},
                {"counted_bytes_received_per_call", s.counted_received / reps},
                {"gloo_payload_per_call", payload},
                {"tcp_payload_received_per_call", received},
                {"payload_over_counted", payload / counted},
                {"framing_per_call", payload - counted},
                {"retransmitted_per_call", retrans},
                {"segments_out_per_call", segs},
                {"wire_estimate_per_call", estimate},
                {"wire_over_counted", wire / counted},
                {"wire_from_lo", lo_bytes.has_value()},
                {"seconds_per_call", s.seconds / reps}};
    row["lo_bytes_per_call"] = lo_bytes ? Json(*lo_bytes) : Json(nullptr);
    row["lo_packets_per_call"] = lo_packets ? Json(*lo_packets) : Json(nullptr);
    rows.push_back(row);
  }

  Json j = {{"machine", machine},
            {"run_seconds", total_s},
            {"libtorch", ranks[0]["libtorch"]},
            {"network_namespace", have_netns},
            {"network_namespace_note", netns_note},
            {"tcp_bytes_sent_is_acked", acked},
            {"settle_ms", o.settle_ms},
            {"baseline",
             {{"windows", base.size()},
              {"payload_median", b_payload},
              {"payload", spread([](const WindowSum& b) { return b.payload; })},
              {"segments_median", b_segs},
              {"lo_bytes_median", lo ? Json(b_lo) : Json(nullptr)}}},
            {"rows", rows},
            {"raw_windows", {{"rank0", w0}, {"rank1", w1}}}};
  const std::string dir = InWorkspace(o.out_dir);
  std::ofstream(dir + "/comm_wire.md") << md.str();
  std::ofstream(dir + "/comm_wire.json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp::bench;
  Options o;
  bool no_netns = false;
  CLI::App app{
      "comm_wire_bench: CommStats' bytes by tensor size vs bytes on the wire, 2 Gloo "
      "ranks on TCP loopback"};
  app.add_option("--sizes", o.sizes, "Tensor sizes in bytes (fp32; multiples of 8)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--window-bytes", o.window_bytes,
                 "Bytes per measurement window: reps = this / size, within --min-reps..--max-reps")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-reps", o.min_reps)->check(CLI::PositiveNumber);
  app.add_option("--max-reps", o.max_reps)->check(CLI::PositiveNumber);
  app.add_option("--baselines", o.baselines, "Baseline windows (median)")
      ->check(CLI::PositiveNumber);
  app.add_option("--settle-ms", o.settle_ms, "Quiet time before each snapshot (delayed ACKs)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-netns", no_netns, "Do not try a private network namespace (no lo column)");
  app.add_option("--out-dir", o.out_dir, "Where comm_wire.md and comm_wire.json go");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  o.netns = !no_netns;
  if (o.min_reps > o.max_reps) {
    std::fprintf(stderr, "--min-reps %d exceeds --max-reps %d\n", o.min_reps, o.max_reps);
    return 2;
  }
  for (int64_t s : o.sizes) {
    if (s % 8 != 0) {
      std::fprintf(stderr, "--sizes: %lld is not a multiple of 8 (2 ranks x 4-byte floats)\n",
                   static_cast<long long>(s));
      return 2;
    }
  }
  if (const char* rank = std::getenv(kRankEnv)) {
    const char* target = std::getenv(kTargetEnv);
    const char* out_path = std::getenv(kOutEnv);
    if (target == nullptr || out_path == nullptr) return 2;
    absl::Status s = RunRank(std::atoi(rank), o, target, out_path);
    if (!s.ok()) {
      std::fprintf(stderr, "[rank %s] %s\n", rank, s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  if (o.netns && std::getenv(kNetnsEnv) == nullptr) return ReexecInPrivateNetNamespace(argv);
  return ParentMain(o, argv);
}
