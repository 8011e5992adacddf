#include "api/authz.h"

#include <map>
#include <string>
#include <vector>

#include "api/fake_owners_service.h"
#include "gtest/gtest.h"

namespace dhp::api {
namespace {

using absl::StatusCode;

class CollectSink : public EventSink {
 public:
  bool Write(const v1::Event& event) override {
    seen.push_back(event.job_id());
    return true;
  }
  bool IsCancelled() const override { return false; }
  std::vector<std::string> seen;
};

class AuthzTest : public testing::Test {
 protected:
  AuthzTest() {
    AuthSettings settings;
    settings.admin_token = "admin-secret";
    settings.users = {{"alice", Role::kUser, Sha256Hex("alice-secret")},
                      {"bob", Role::kUser, Sha256Hex("bob-secret")},
                      {"vera", Role::kViewer, Sha256Hex("vera-secret")}};
    settings.nodes = {{"node-a", Sha256Hex("node-a-secret")},
                      {"node-b", Sha256Hex("node-b-secret")}};
    settings.rank_key = std::string(32, 'k');
    auth_ = *TokenAuth::Create(settings);
    service_.owner_of = {{"j-alice", "alice"}, {"j-bob", "bob"}, {"j-1", "alice"}};
  }

  template <typename Req, typename Resp>
  absl::Status As(const std::string& token, const char* method,
                  absl::Status (DhpService::*call)(const Req&, Resp*), const Req& req) {
    Resp resp;
    return authz_.Call("Bearer " + token, method, call, req, &resp);
  }

  FakeOwnersService service_;
  TokenAuth auth_;
  Authorizer authz_{auth_, service_};
};

TEST_F(AuthzTest, TokensNameTheirIdentities) {
  EXPECT_EQ(auth_.Authenticate("Bearer alice-secret")->name, "alice");
  EXPECT_EQ(auth_.Authenticate("Bearer alice-secret")->role, Role::kUser);
  EXPECT_EQ(auth_.Authenticate("Bearer vera-secret")->role, Role::kViewer);
  EXPECT_EQ(auth_.Authenticate("Bearer node-b-secret")->name, "node-b");
  EXPECT_EQ(auth_.Authenticate("Bearer admin-secret")->role, Role::kAdmin);
  EXPECT_EQ(auth_.Authenticate("Bearer alice-secreT").status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_.Authenticate("").status().code(), StatusCode::kUnauthenticated);
}

TEST_F(AuthzTest, RankTokensAreBoundToTheirJobAndAttempt) {
  const std::string token = auth_.RankToken("j-1", 2);
  absl::StatusOr<Identity> rank = auth_.Authenticate("Bearer " + token);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(rank->role, Role::kRank);
  EXPECT_EQ(rank->job_id, "j-1");
  EXPECT_EQ(rank->attempt, 2);
  // Job ids with dots, and tampering: another attempt or job with the same mac is refused.
  EXPECT_EQ(auth_.Authenticate("Bearer " + auth_.RankToken("a.b.c", 7))->job_id, "a.b.c");
  const std::string mac = token.substr(token.rfind('.'));
  for (const std::string& forged :
       std::vector<std::string>{"rank.j-1.3" + mac, "rank.j-2.2" + mac, "rank.j-1.2.",
                                "rank.j-1" + mac, "rank." + mac, "rank.."}) {
    EXPECT_EQ(auth_.Authenticate("Bearer " + forged).status().code(),
              StatusCode::kUnauthenticated)
        << forged;
  }
  // Another controller's key makes other tokens.
  AuthSettings other;
  other.rank_key = std::string(32, 'x');
  EXPECT_NE((*TokenAuth::Create(other)).RankToken("j-1", 2), token);
  EXPECT_EQ((*TokenAuth::Create(other)).Authenticate("Bearer " + token).status().code(),
            StatusCode::kUnauthenticated);
}

TEST_F(AuthzTest, BadCredentialSettingsNameTheField) {
  AuthSettings bad;
  bad.users = {{"alice", Role::kUser, "abc"}};
  EXPECT_EQ(TokenAuth::Create(bad).status().message(),
            "auth.users[0].token_sha256: expected 64 lowercase hex digits (sha256sum of the "
            "token)");
  bad.users = {{"alice", Role::kUser, Sha256Hex("x")}, {"alice", Role::kViewer, Sha256Hex("y")}};
  EXPECT_EQ(TokenAuth::Create(bad).status().message(), "auth.users[1]: repeats auth.users[0]");
  bad.users = {{"alice", Role::kUser, Sha256Hex("x")}};
  bad.nodes = {{"n", Sha256Hex("x")}};
  EXPECT_EQ(TokenAuth::Create(bad).status().message(),
            "auth.nodes[0].token_sha256: another credential has the same token");
  EXPECT_EQ(ParseUserRole("root").status().message(),
            "role: \"root\" is not a role; one of admin, user, viewer");
}

TEST_F(AuthzTest, NodesActOnlyForThemselves) {
  v1::HeartbeatRequest beat;
  beat.set_node_id("node-a");
  EXPECT_TRUE(As("node-a-secret", "Heartbeat", &DhpService::Heartbeat, beat).ok());
  beat.set_node_id("node-b");  // a heartbeat that would mark node-b's ranks exited
  absl::Status s = As("node-a-secret", "Heartbeat", &DhpService::Heartbeat, beat);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "Heartbeat: node \"node-a\" may act only for its own node, not \"node-b\"");
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_hostname("node-b");  // no id: registers as its hostname
  EXPECT_EQ(As("node-a-secret", "RegisterNode", &DhpService::RegisterNode, reg).code(),
            StatusCode::kPermissionDenied);
  reg.mutable_node()->set_id("node-a");
  EXPECT_TRUE(As("node-a-secret", "RegisterNode", &DhpService::RegisterNode, reg).ok());
  v1::AppendLogsRequest logs;
  logs.set_node_id("node-b");
  EXPECT_EQ(As("node-a-secret", "AppendLogs", &DhpService::AppendLogs, logs).code(),
            StatusCode::kPermissionDenied);
  // A node may not submit, read, or act as a rank.
  EXPECT_EQ(As("node-a-secret", "SubmitJob", &DhpService::SubmitJob, v1::SubmitJobRequest())
                .code(),
            StatusCode::kPermissionDenied);
  v1::KvSetRequest kv;
  kv.mutable_scope()->set_job_id("j-1");
  kv.mutable_scope()->set_attempt(2);
  EXPECT_EQ(As("node-a-secret", "KvSet", &DhpService::KvSet, kv).code(),
            StatusCode::kPermissionDenied);
}

TEST_F(AuthzTest, HeartbeatsCarryEachRanksToken) {
  v1::HeartbeatRequest beat;
  beat.set_node_id("node-a");
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(authz_.Call("Bearer node-a-secret", "Heartbeat", &DhpService::Heartbeat, beat,
                          &resp)
                  .ok());
  ASSERT_EQ(resp.ranks_size(), 1);
  EXPECT_EQ(resp.ranks(0).credential(), auth_.RankToken("j-1", 2));
}

// A relay may send any node's heartbeats, but each is checked with its agent's own token: a
// forged or missing one is refused in its place, and the others still reach the service.
TEST_F(AuthzTest, ARelaysBatchChecksEachHeartbeatWithItsOwnToken) {
  v1::HeartbeatBatchRequest batch;
  auto add = [&](const std::string& token, const std::string& node) {
    v1::RelayedHeartbeat* entry = batch.add_heartbeats();
    if (!token.empty()) entry->set_authorization("Bearer " + token);
    entry->mutable_heartbeat()->set_node_id(node);
  };
  add("node-a-secret", "node-a");
  add("node-a-secret", "node-b");  // node-a's token for node-b
  add("", "node-b");
  add("node-b-secret", "node-b");
  add("alice-secret", "node-a");
  v1::HeartbeatBatchResponse resp;
  ASSERT_TRUE(authz_.Call("Bearer node-b-secret", "HeartbeatBatch", &DhpService::HeartbeatBatch,
                          batch, &resp)
                  .ok());
  ASSERT_EQ(resp.answers_size(), 5);
  EXPECT_EQ(resp.answers(0).code(), 0);
  EXPECT_EQ(resp.answers(0).response().ranks(0).credential(), auth_.RankToken("j-1", 2));
  EXPECT_EQ(resp.answers(1).code(), static_cast<int>(StatusCode::kPermissionDenied));
  EXPECT_EQ(resp.answers(1).message(),
            "Heartbeat: node \"node-a\" may act only for its own node, not \"node-b\"");
  EXPECT_FALSE(resp.answers(1).has_response());
  EXPECT_EQ(resp.answers(2).code(), static_cast<int>(StatusCode::kUnauthenticated));
  EXPECT_EQ(resp.answers(3).code(), 0);
  EXPECT_EQ(resp.answers(3).response().ranks(0).credential(), auth_.RankToken("j-1", 2));
  EXPECT_EQ(resp.answers(4).code(), static_cast<int>(StatusCode::kPermissionDenied));
  EXPECT_EQ(service_.batched_nodes, (std::vector<std::string>{"node-a", "node-b"}));

  // The relay itself must be a node's agent (or an admin); users, viewers and ranks may not.
  service_.batched_nodes.clear();
  for (const std::string& caller :
       {std::string("alice-secret"), std::string("vera-secret"), auth_.RankToken("j-1", 2)}) {
    v1::HeartbeatBatchResponse refused;
    EXPECT_EQ(authz_.Call("Bearer " + caller, "HeartbeatBatch", &DhpService::HeartbeatBatch,
                          batch, &refused)
                  .code(),
              StatusCode::kPermissionDenied)
        << caller;
  }
  EXPECT_TRUE(As("admin-secret", "HeartbeatBatch", &DhpService::HeartbeatBatch, batch).ok());
  EXPECT_EQ(service_.batched_nodes.size(), 2u);

  // Past the limit, nothing is applied.
  service_.batched_nodes.clear();
  while (batch.heartbeats_size() <= kMaxHeartbeatBatch) add("node-a-secret", "node-a");
  absl::Status s = As("admin-secret", "HeartbeatBatch", &DhpService::HeartbeatBatch, batch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "heartbeats: 1025; a batch holds at most 1024");
  EXPECT_TRUE(service_.batched_nodes.empty());
}

TEST_F(AuthzTest, RanksActOnlyForTheirJobAndAttempt) {
  const std::string rank = auth_.RankToken("j-1", 2);
  v1::KvSetRequest kv;
  kv.mutable_scope()->set_job_id("j-1");
  kv.mutable_scope()->set_attempt(2);
  EXPECT_TRUE(As(rank, "KvSet", &DhpService::KvSet, kv).ok());
  kv.mutable_scope()->set_attempt(3);
  EXPECT_EQ(As(rank, "KvSet", &DhpService::KvSet, kv).code(), StatusCode::kPermissionDenied);
  kv.mutable_scope()->set_job_id("j-bob");  // a queued job's scope
  kv.mutable_scope()->set_attempt(1);
  EXPECT_EQ(As(rank, "KvSet", &DhpService::KvSet, kv).code(), StatusCode::kPermissionDenied);
  v1::ReportCheckpointRequest ckpt;  // a fake COMPLETE checkpoint for another job
  ckpt.set_job_id("j-bob");
  ckpt.set_attempt(2);
  absl::Status s = As(rank, "ReportCheckpoint", &DhpService::ReportCheckpoint, ckpt);
  EXPECT_EQ(s.message(),
            "ReportCheckpoint: rank \"j-1/2\" may act only for its own job and attempt, not "
            "\"j-bob/2\"");
  ckpt.set_job_id("j-1");
  EXPECT_TRUE(As(rank, "ReportCheckpoint", &DhpService::ReportCheckpoint, ckpt).ok());
  // Users and viewers are not ranks; nor may a rank cancel or read.
  EXPECT_EQ(As("alice-secret", "ReportCheckpoint", &DhpService::ReportCheckpoint, ckpt).code(),
            StatusCode::kPermissionDenied);
  v1::CancelJobRequest cancel;
  cancel.set_job_id("j-1");
  EXPECT_EQ(As(rank, "CancelJob", &DhpService::CancelJob, cancel).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(As(rank, "ListJobs", &DhpService::ListJobs, v1::ListJobsRequest()).code(),
            StatusCode::kPermissionDenied);
  // It reads its own job (the spec, its run), and no other.
  v1::GetJobRequest get;
  get.set_job_id("j-1");
  EXPECT_TRUE(As(rank, "GetJob", &DhpService::GetJob, get).ok());
  get.set_job_id("j-bob");
  EXPECT_EQ(As(rank, "GetJob", &DhpService::GetJob, get).code(), StatusCode::kPermissionDenied);
}

TEST_F(AuthzTest, UsersOwnTheirJobs) {
  v1::SubmitJobRequest submit;
  ASSERT_TRUE(As("alice-secret", "SubmitJob", &DhpService::SubmitJob, submit).ok());
  EXPECT_EQ(service_.last_submit.owner(), "alice");
  submit.set_owner("bob");
  EXPECT_EQ(As("alice-secret", "SubmitJob", &DhpService::SubmitJob, submit).code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(As("admin-secret", "SubmitJob", &DhpService::SubmitJob, submit).ok());
  EXPECT_EQ(service_.last_submit.owner(), "bob");  // an admin may submit for anyone
  submit.clear_owner();
  ASSERT_TRUE(As("admin-secret", "SubmitJob", &DhpService::SubmitJob, submit).ok());
  EXPECT_EQ(service_.last_submit.owner(), "admin");

  v1::CancelJobRequest cancel;
  cancel.set_job_id("j-bob");
  absl::Status s = As("alice-secret", "CancelJob", &DhpService::CancelJob, cancel);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "CancelJob: user \"alice\" does not own job j-bob");
  cancel.set_job_id("j-alice");
  EXPECT_TRUE(As("alice-secret", "CancelJob", &DhpService::CancelJob, cancel).ok());
  cancel.set_job_id("j-nope");
  EXPECT_EQ(As("alice-secret", "CancelJob", &DhpService::CancelJob, cancel).code(),
            StatusCode::kNotFound);

  v1::GetLogsRequest logs;
  logs.set_job_id("j-bob");
  EXPECT_EQ(As("alice-secret", "GetLogs", &DhpService::GetLogs, logs).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(As("vera-secret", "GetLogs", &DhpService::GetLogs, logs).ok());

  // ListJobs: a user's are theirs only, whatever they ask; others may filter freely.
  v1::ListJobsRequest list;
  ASSERT_TRUE(As("alice-secret", "ListJobs", &DhpService::ListJobs, list).ok());
  EXPECT_EQ(service_.last_list.owner(), "alice");
  list.set_owner("bob");
  EXPECT_EQ(As("alice-secret", "ListJobs", &DhpService::ListJobs, list).code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(As("vera-secret", "ListJobs", &DhpService::ListJobs, list).ok());
  EXPECT_EQ(service_.last_list.owner(), "bob");
}

// SubmitJob's stateless part on gRPC's thread: the same checks as Call before the service
// prepares the request, and the owner set in the request the loop then gets.
TEST_F(AuthzTest, PrepareChecksTheCallerBeforeTheServicePrepares) {
  v1::SubmitJobRequest submit;
  EXPECT_EQ(authz_.Prepare("", &submit).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(authz_.Prepare("Bearer alice-secreT", &submit).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(authz_.Prepare("Bearer vera-secret", &submit).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(authz_.Prepare("Bearer node-a-secret", &submit).code(),
            StatusCode::kPermissionDenied);
  submit.set_owner("bob");
  EXPECT_EQ(authz_.Prepare("Bearer alice-secret", &submit).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(service_.calls, 0);  // refused before the service saw it

  submit.clear_owner();
  ASSERT_TRUE(authz_.Prepare("Bearer alice-secret", &submit).ok());
  EXPECT_EQ(submit.owner(), "alice");
  EXPECT_EQ(service_.last_submit.owner(), "alice");
  EXPECT_EQ(service_.names, std::vector<std::string>{"PrepareSubmitJob"});
  ASSERT_TRUE(As("alice-secret", "SubmitJob", &DhpService::SubmitJob, submit).ok());
  EXPECT_EQ(service_.last_submit.owner(), "alice");
}

TEST_F(AuthzTest, ViewersOnlyRead) {
  v1::CancelJobRequest cancel;
  cancel.set_job_id("j-alice");
  EXPECT_EQ(As("vera-secret", "CancelJob", &DhpService::CancelJob, cancel).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(As("vera-secret", "SubmitJob", &DhpService::SubmitJob, v1::SubmitJobRequest())
                .message(),
            "SubmitJob: viewer \"vera\" may not submit jobs (roles user or admin may)");
  v1::GetJobRequest get;
  get.set_job_id("j-alice");
  EXPECT_TRUE(As("vera-secret", "GetJob", &DhpService::GetJob, get).ok());
  EXPECT_TRUE(As("vera-secret", "ListNodes", &DhpService::ListNodes, v1::ListNodesRequest())
                  .ok());
}

TEST_F(AuthzTest, OnlyAdminsDrainAndUncordonNodes) {
  v1::DrainNodeRequest drain;
  drain.set_node_id("node-a");
  for (const char* token : {"alice-secret", "vera-secret", "node-a-secret"}) {
    EXPECT_EQ(As(token, "DrainNode", &DhpService::DrainNode, drain).code(),
              StatusCode::kPermissionDenied)
        << token;
  }
  EXPECT_EQ(As("node-a-secret", "DrainNode", &DhpService::DrainNode, drain).message(),
            "DrainNode: node \"node-a\" may not change nodes (only admins may)");
  v1::UncordonNodeRequest uncordon;
  uncordon.set_node_id("node-a");
  EXPECT_EQ(As("alice-secret", "UncordonNode", &DhpService::UncordonNode, uncordon).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(As("admin-secret", "DrainNode", &DhpService::DrainNode, drain).ok());
  EXPECT_TRUE(As("admin-secret", "UncordonNode", &DhpService::UncordonNode, uncordon).ok());
}

TEST_F(AuthzTest, AUsersEventStreamHoldsTheirJobsAndNodes) {
  for (const char* job : {"j-alice", "j-bob", "", "j-1", "j-gone"}) {
    v1::Event e;
    e.set_job_id(job);
    service_.events.push_back(e);
  }
  CollectSink alice;
  ASSERT_TRUE(authz_.Watch("Bearer alice-secret", v1::WatchJobRequest(), alice).ok());
  EXPECT_EQ(alice.seen, (std::vector<std::string>{"j-alice", "", "j-1"}));
  CollectSink vera;
  ASSERT_TRUE(authz_.Watch("Bearer vera-secret", v1::WatchJobRequest(), vera).ok());
  EXPECT_EQ(vera.seen.size(), 5u);
  v1::WatchJobRequest one;
  one.set_job_id("j-bob");
  CollectSink denied;
  EXPECT_EQ(authz_.Watch("Bearer alice-secret", one, denied).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(denied.seen.empty());
}

TEST_F(AuthzTest, WithoutCredentialsEveryoneIsAnAdmin) {
  TokenAuth off;
  Authorizer open(off, service_);
  v1::SubmitJobResponse resp;
  EXPECT_TRUE(open.Call("", "SubmitJob", &DhpService::SubmitJob, v1::SubmitJobRequest(), &resp)
                  .ok());
  EXPECT_EQ(service_.last_submit.owner(), "");
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(open.Call("", "Heartbeat", &DhpService::Heartbeat, v1::HeartbeatRequest(), &beat)
                  .ok());
  EXPECT_EQ(beat.ranks(0).credential(), "");  // no rank tokens without auth
}

TEST_F(AuthzTest, EveryMethodOfTheTableHasAnAccess) {
  // Each row's access is one of the six, and the user-facing reads are open to viewers.
  for (const MethodInfo& m : kMethods) {
    EXPECT_NE(AccessName(m.access), "?") << m.name;
    const bool read = m.verb == "GET";
    EXPECT_EQ(read, m.access == Access::kRead) << m.name;
  }
}

}  // namespace
}  // namespace dhp::api

namespace dhp::api {
namespace {

TEST_F(AuthzTest, ExportsAreTheirJobOwners) {
  v1::ExportCheckpointRequest exp;
  exp.set_job_id("j-bob");
  EXPECT_EQ(As("alice-secret", "ExportCheckpoint", &DhpService::ExportCheckpoint, exp).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(As("bob-secret", "ExportCheckpoint", &DhpService::ExportCheckpoint, exp).ok());
  EXPECT_EQ(As("vera-secret", "ExportCheckpoint", &DhpService::ExportCheckpoint, exp).code(),
            absl::StatusCode::kPermissionDenied);  // writes files: not for viewers

  // GetExport names only the export: the answer's job decides, and a refusal leaks nothing.
  service_.job_of_export = {{"x-bob", "j-bob"}};
  v1::GetExportRequest get;
  get.set_id("x-bob");
  v1::GetExportResponse resp;
  absl::Status s = authz_.Call("Bearer alice-secret", "GetExport", &DhpService::GetExport, get,
                               &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("does not own job j-bob"), std::string::npos) << s;
  EXPECT_FALSE(resp.has_export_());
  EXPECT_TRUE(As("bob-secret", "GetExport", &DhpService::GetExport, get).ok());
  EXPECT_TRUE(As("vera-secret", "GetExport", &DhpService::GetExport, get).ok());

  v1::ListExportsRequest list;
  list.set_job_id("j-bob");
  EXPECT_EQ(As("alice-secret", "ListExports", &DhpService::ListExports, list).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(As("bob-secret", "ListExports", &DhpService::ListExports, list).ok());
}

}  // namespace
}  // namespace dhp::api
