// Ranks in separate processes: the test starts a gRPC server exposing the rendezvous KV (the
// WorkerService Kv* calls, as the controller serves them), forks and re-executes this binary once
// per rank, and each child bootstraps its process groups through GrpcKvClient ->
// ControllerStore -> ProcessGroupGloo over loopback, then runs collectives and checks them. Two
// tests take a rank away: one never starts, one is killed while its partners wait on it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "api/grpc_status.h"
#include "common/child_wait.h"
#include "dhp/v1/service.grpc.pb.h"
#include "worker/comm/grpc_kv_client.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"

extern char** environ;

namespace dhp::comm {
namespace {

using namespace std::chrono_literals;
using api::ToGrpcStatus;

// The Kv* half of WorkerService on an InMemoryKvClient, namespaced by (job, attempt).
class FakeKvService final : public v1::WorkerService::Service {
 public:
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest* req,
                     v1::KvSetResponse*) override {
    return ToGrpcStatus(kv_.Set(Key(req->scope(), req->key()), req->value()));
  }
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override {
    absl::StatusOr<std::string> v =
        kv_.Get(Key(req->scope(), req->key()), std::chrono::milliseconds(req->timeout_ms()));
    if (v.ok()) resp->set_value(*v);
    return ToGrpcStatus(v.status());
  }
  grpc::Status KvAdd(grpc::ServerContext*, const v1::KvAddRequest* req,
                     v1::KvAddResponse* resp) override {
    absl::StatusOr<int64_t> v = kv_.Add(Key(req->scope(), req->key()), req->delta());
    if (v.ok()) resp->set_value(*v);
    return ToGrpcStatus(v.status());
  }
  grpc::Status KvWait(grpc::ServerContext*, const v1::KvWaitRequest* req,
                      v1::KvWaitResponse*) override {
    return ToGrpcStatus(
        kv_.Wait(Keys(req->scope(), req->keys()), std::chrono::milliseconds(req->timeout_ms())));
  }
  grpc::Status KvCheck(grpc::ServerContext*, const v1::KvCheckRequest* req,
                       v1::KvCheckResponse* resp) override {
    absl::StatusOr<bool> v = kv_.Check(Keys(req->scope(), req->keys()));
    if (v.ok()) resp->set_ready(*v);
    return ToGrpcStatus(v.status());
  }
  grpc::Status KvDelete(grpc::ServerContext*, const v1::KvDeleteRequest* req,
                        v1::KvDeleteResponse* resp) override {
    absl::StatusOr<bool> v = kv_.Delete(Key(req->scope(), req->key()));
    if (v.ok()) resp->set_deleted(*v);
    return ToGrpcStatus(v.status());
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

  InMemoryKvClient kv_;
};

// Layout of the multi-process run: separate placement, vision 2 x text 1 -> world 3
// (vision ranks 0, 1; text rank 2).
Layout ChildLayout() {
  Layout l;
  l.vision_degree = 2;
  l.text_degree = 1;
  l.placement = Placement::kSeparate;
  return l;
}

// Forks and re-executes this binary as rank `rank`, running only the child test.
pid_t SpawnRank(int rank, const std::string& target, const std::string& mode) {
  std::vector<std::string> env_strings;
  // The parent's environment minus the test runner's per-test outputs (XML report, premature-
  // exit marker, sharding), which belong to the parent alone.
  const std::vector<std::string> runner_vars = {
      "XML_OUTPUT_FILE=",        "GTEST_OUTPUT=",      "TEST_PREMATURE_EXIT_FILE=",
      "TEST_SHARD_STATUS_FILE=", "GTEST_SHARD_INDEX=", "GTEST_TOTAL_SHARDS=",
      "TEST_SHARD_INDEX=",       "TEST_TOTAL_SHARDS="};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    bool skip = false;
    for (const std::string& prefix : runner_vars) skip = skip || var.rfind(prefix, 0) == 0;
    if (!skip) env_strings.push_back(var);
  }
  env_strings.push_back("DHP_COMM_CHILD_RANK=" + std::to_string(rank));
  env_strings.push_back("DHP_COMM_CHILD_TARGET=" + target);
  env_strings.push_back("DHP_COMM_CHILD_MODE=" + mode);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=CrossProcessChild.Rank";
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};
  pid_t pid = fork();  // everything the child needs is prepared above: it only execs
  if (pid == 0) {
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

class CrossProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
  }
  std::string Target() const { return "127.0.0.1:" + std::to_string(port_); }

  FakeKvService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(CrossProcessTest, RanksInSeparateProcessesBootstrapAndCommunicate) {
  std::vector<pid_t> pids;
  for (int r = 0; r < ChildLayout().WorldSize(); ++r) pids.push_back(SpawnRank(r, Target(), "ok"));
  std::vector<int> codes = WaitForChildren(pids, 120s);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST_F(CrossProcessTest, AMissingProcessIsNamedByTheOthers) {
  // Only ranks 0 and 2 of the three start; the child test checks their error (see below).
  std::vector<pid_t> pids = {SpawnRank(0, Target(), "missing"), SpawnRank(2, Target(), "missing")};
  std::vector<int> codes = WaitForChildren(pids, 120s);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST_F(CrossProcessTest, AKilledPeerFailsItsPartnersAtOnce) {
  // World rank 2 kills itself (SIGKILL) while rank 0 receives from it and rank 1 sends to it; the
  // child test checks the survivors' errors and how long they waited (see KilledPeer below).
  std::vector<pid_t> pids;
  for (int r = 0; r < ChildLayout().WorldSize(); ++r) {
    pids.push_back(SpawnRank(r, Target(), "killed"));
  }
  std::vector<int> codes = WaitForChildren(pids, 120s);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], -1) << "rank 2 was to die by its own SIGKILL";
}

// Mode "killed" (collective timeout kKilledTimeout): world rank 2 dies by SIGKILL 300 ms after a
// world barrier, without closing anything itself (the kernel closes its sockets). Rank 0's recv
// from it and rank 1's send to it fail with UNAVAILABLE (Gloo: connection closed by peer) well
// within the collective timeout, as does the next all_reduce: a dead rank stops its partners
// within the timeout, it does not leave them waiting for the controller's stall timeout.
constexpr std::chrono::milliseconds kKilledTimeout = 5s;

void KilledPeer(ProcessGroups& pg, int rank) {
  ASSERT_TRUE(pg.world().Barrier().ok());
  if (rank == 2) {
    std::this_thread::sleep_for(300ms);
    raise(SIGKILL);
  }
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t0);
  };
  at::Tensor x = at::zeros({3, 2});
  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = rank == 0 ? pg.world().Recv(x, /*src_rank=*/2, /*tag=*/7)
                             : pg.world().Send(x, /*dst_rank=*/2, /*tag=*/7);
  EXPECT_LT(since(t0), kKilledTimeout) << s;
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith(rank == 0 ? "recv on group world (rank 0 of 3) from rank 2: "
                                              : "send on group world (rank 1 of 3) to rank 2: "));
  t0 = std::chrono::steady_clock::now();
  s = pg.world().AllReduce(x, ReduceOp::kSum);
  EXPECT_LT(since(t0), kKilledTimeout) << s;
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(pg.stats().Get("world", kOpRecv).calls + pg.stats().Get("world", kOpSend).calls, 0);
}

// The body of one rank process; skipped unless started by the tests above.
TEST(CrossProcessChild, Rank) {
  const char* rank_env = std::getenv("DHP_COMM_CHILD_RANK");
  if (rank_env == nullptr) GTEST_SKIP() << "runs only as a child of CrossProcessTest";
  const int rank = std::atoi(rank_env);
  const std::string mode = std::getenv("DHP_COMM_CHILD_MODE");
  at::set_num_threads(1);
  api::DhpClient client(std::getenv("DHP_COMM_CHILD_TARGET"));
  GrpcKvClient kv(client, "job-1", mode == "ok" ? 1 : mode == "missing" ? 2 : 3);
  ProcessGroupsOptions options;
  options.arrival_timeout = mode == "missing" ? 1500ms : 60s;
  options.store_timeout = 60s;
  if (mode == "killed") options.collective_timeout = kKilledTimeout;
  const Layout layout = ChildLayout();
  absl::StatusOr<std::unique_ptr<ProcessGroups>> pgs =
      ProcessGroups::Create(kv, layout, rank, options);

  if (mode == "missing") {
    // World rank 1 (a vision rank) never starts: "world" is the first group, so both name it.
    ASSERT_FALSE(pgs.ok());
    EXPECT_EQ(pgs.status().message(),
              "group world (size 3): rank 1 (world rank 1) did not arrive within 1500 ms");
    return;
  }
  ASSERT_TRUE(pgs.ok()) << pgs.status();
  ProcessGroups& pg = **pgs;
  if (mode == "killed") {
    KilledPeer(pg, rank);
    return;
  }

  // World: sum of (rank + 1) = 6.
  at::Tensor t = at::full({4}, rank + 1, at::kFloat);
  ASSERT_TRUE(pg.world().AllReduce(t, ReduceOp::kSum).ok());
  EXPECT_TRUE(t.eq(6).all().item<bool>());
  // Bytes by tensor size, 2N(P-1)/P with N = 16 B, P = 3: 2*16*2/3 = 64/3 = 21 (rounded down).
  EXPECT_EQ(pg.stats().Get("world", kOpAllReduce).tensor_bytes_sent, 21);

  if (pg.vision_coord()) {
    // Vision: an uneven sequence gather over the two vision processes.
    std::vector<int64_t> rows = {3, 1};
    at::Tensor x = at::full({rows[rank], 2}, rank, at::kFloat);
    absl::StatusOr<at::Tensor> y = pg.vision()->AllGatherV(x, rows);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(y->equal(at::cat({at::zeros({3, 2}), at::ones({1, 2})})));
    EXPECT_EQ(pg.text(), nullptr);
  } else {
    EXPECT_EQ(pg.text()->size(), 1);
    EXPECT_EQ(pg.vision(), nullptr);
  }

  // Hand-off over the world group: vision rank 0 sends embeddings to the text rank (2).
  at::Tensor emb = at::arange(6, at::kFloat).view({3, 2});
  if (rank == 0) {
    ASSERT_TRUE(pg.world().Send(emb, 2, 7).ok());
  } else if (rank == 2) {
    at::Tensor got = at::zeros({3, 2});
    ASSERT_TRUE(pg.world().Recv(got, 0, 7).ok());
    EXPECT_TRUE(got.equal(emb));
    EXPECT_EQ(pg.stats().Get("world", kOpRecv).tensor_bytes_received, 24);
  }
  ASSERT_TRUE(pg.world().Barrier().ok());
}

}  // namespace
}  // namespace dhp::comm
