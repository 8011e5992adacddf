// Tests the Controller's node methods as agents and the API call them: a stopping agent's node
// (a heartbeat with `stopping`) gets no new ranks while another READY node does, shows as
// stopping in ListNodes, and is placed on again once an agent registers it anew; a relay's batch
// of heartbeats is answered as each alone.
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/controller_test_fixture.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

class ControllerNodesTest : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    options_ = ControllerOptions();
    StartController();
  }
  // One heartbeat of `id` (reporting no ranks); returns how many ranks it is told to run.
  int Beat(const std::string& id, bool stopping = false) {
    v1::HeartbeatRequest req;
    req.set_node_id(id);
    req.set_stopping(stopping);
    v1::HeartbeatResponse resp;
    absl::Status s = controller_->Heartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.ranks_size();
  }
  v1::Node Listed(const std::string& id) {
    v1::ListNodesResponse resp;
    EXPECT_TRUE(controller_->ListNodes(v1::ListNodesRequest(), &resp).ok());
    for (const v1::Node& n : resp.nodes()) {
      if (n.id() == id) return n;
    }
    ADD_FAILURE() << "node " << id << " not listed";
    return v1::Node();
  }
};

TEST_F(ControllerNodesTest, AStoppingAgentsNodeGetsNoNewRanksUntilItRegistersAgain) {
  ASSERT_TRUE(Register("n1").ok());
  ASSERT_TRUE(Register("n2").ok());
  ASSERT_EQ(Beat("n1", /*stopping=*/true), 0);  // n1's agent got SIGTERM
  const v1::Node stopping = Listed("n1");
  EXPECT_TRUE(stopping.stopping());
  EXPECT_TRUE(stopping.has_stopping_time());
  EXPECT_EQ(stopping.state(), v1::NODE_STATE_READY);
  EXPECT_FALSE(stopping.cordoned());  // not the operator's cordon
  // Three one-rank jobs, four CPU slots: only n2's two are used; the third job waits.
  for (int i = 0; i < 3; ++i) Submit();
  EXPECT_EQ(Beat("n1", true), 0);
  EXPECT_EQ(Beat("n2"), 2);
  // A new agent on n1 registers: it is not stopping, and the waiting job goes there.
  ASSERT_TRUE(Register("n1").ok());
  EXPECT_FALSE(Listed("n1").stopping());
  EXPECT_EQ(Beat("n1"), 1);
}

// ListNodes pages by id: every node once, in order, each page at most page_size, the last page
// without a token; a node removed or added between pages does not upset the walk.
TEST_F(ControllerNodesTest, ListNodesPagesByIdWithATokenNamingTheLastNode) {
  for (const char* id : {"n-c", "n-a", "n-z", "n-b", "n-e"}) ASSERT_TRUE(Register(id).ok());
  v1::ListNodesRequest req;
  req.set_page_size(2);
  std::vector<std::string> pages;
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    v1::ListNodesResponse resp;
    ASSERT_TRUE(controller_->ListNodes(req, &resp).ok());
    std::string page;
    for (const v1::Node& n : resp.nodes()) page += n.id() + " ";
    pages.push_back(page);
    for (const v1::Node& n : resp.nodes()) ids.push_back(n.id());
    if (i == 0) ASSERT_TRUE(Register("n-bb").ok());  // lands after the first page: listed
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(pages, (std::vector<std::string>{"n-a n-b ", "n-bb n-c ", "n-e n-z "}));
  EXPECT_EQ(ids.size(), 6u);

  v1::ListNodesResponse all;  // page_size 0: the default page holds all six, with no token
  ASSERT_TRUE(controller_->ListNodes(v1::ListNodesRequest(), &all).ok());
  EXPECT_EQ(all.nodes_size(), 6);
  EXPECT_EQ(all.next_page_token(), "");
}

TEST_F(ControllerNodesTest, ListNodesRefusesABadPageSizeOrToken) {
  ASSERT_TRUE(Register("n1").ok());
  v1::ListNodesResponse resp;
  v1::ListNodesRequest req;
  req.set_page_size(1001);
  absl::Status s = controller_->ListNodes(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "page_size: 1001 must be in 0..1000 (0: default 1000)");
  req.set_page_size(-1);
  EXPECT_EQ(controller_->ListNodes(req, &resp).code(), absl::StatusCode::kInvalidArgument);
  req.set_page_size(0);
  for (const char* token : {"p12", "n", "nzz", "n123", "\xff"}) {
    req.set_page_token(token);
    s = controller_->ListNodes(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << token;
    EXPECT_NE(s.message().find("is not a token returned by ListNodes"), std::string::npos) << s;
  }
  EXPECT_EQ(resp.nodes_size(), 0);
}

// A relay's batch is answered as each heartbeat alone would be, in order: the unknown node's
// NOT_FOUND stands in its place without stopping the others; past the limit nothing is applied.
TEST_F(ControllerNodesTest, ABatchOfHeartbeatsIsAnsweredAsEachHeartbeatAlone) {
  ASSERT_TRUE(Register("n1").ok());
  ASSERT_TRUE(Register("n2").ok());
  for (int i = 0; i < 3; ++i) Submit();  // one-rank jobs: n1 gets two, n2 one (or the reverse)
  v1::HeartbeatBatchRequest batch;
  for (const char* id : {"n1", "gone", "n2"}) {
    batch.add_heartbeats()->mutable_heartbeat()->set_node_id(id);
  }
  v1::HeartbeatBatchResponse resp;
  ASSERT_TRUE(controller_->HeartbeatBatch(batch, &resp).ok());
  ASSERT_EQ(resp.answers_size(), 3);
  EXPECT_EQ(resp.answers(0).code(), 0);
  EXPECT_EQ(resp.answers(1).code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(resp.answers(1).message().find("gone"), std::string::npos)
      << resp.answers(1).message();
  EXPECT_FALSE(resp.answers(1).has_response());
  EXPECT_EQ(resp.answers(2).code(), 0);
  EXPECT_EQ(resp.answers(0).response().ranks_size() + resp.answers(2).response().ranks_size(), 3);
  // The same wanted sets as a heartbeat of each alone gets next.
  EXPECT_EQ(Beat("n1"), resp.answers(0).response().ranks_size());
  EXPECT_EQ(Beat("n2"), resp.answers(2).response().ranks_size());

  // 1,025 heartbeats saying "stopping": refused whole, and n1 is not stopping.
  v1::HeartbeatBatchRequest big;
  for (int i = 0; i <= api::kMaxHeartbeatBatch; ++i) {
    v1::HeartbeatRequest* hb = big.add_heartbeats()->mutable_heartbeat();
    hb->set_node_id("n1");
    hb->set_stopping(true);
  }
  v1::HeartbeatBatchResponse refused;
  absl::Status s = controller_->HeartbeatBatch(big, &refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "heartbeats: 1025; a batch holds at most 1024");
  EXPECT_EQ(refused.answers_size(), 0);
  EXPECT_FALSE(Listed("n1").stopping());
}

// Heartbeats no agent sends (found by an outside client, stop 48): each is INVALID_ARGUMENT
// naming the field, alone or in a batch, and changes nothing. A batch's answer does not quote
// a 10 MB node id back.
TEST_F(ControllerNodesTest, HeartbeatsOfImpossibleRanksOrIdsAreRefusedNamingTheField) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  auto rank = [&](v1::HeartbeatRequest& hb, int state) {
    v1::RankStatus* st = hb.add_ranks();
    st->set_job_id(job.id());
    st->set_attempt(1);
    st->set_world_rank(0);
    st->set_state(static_cast<v1::RankProcessState>(state));
  };
  v1::GetJobRequest get_before;
  get_before.set_job_id(job.id());
  v1::GetJobResponse got_before;
  ASSERT_TRUE(controller_->GetJob(get_before, &got_before).ok());
  const v1::JobState before = got_before.job().state();
  std::vector<std::pair<v1::HeartbeatRequest, std::string>> bad(3);
  bad[0].first.set_node_id("n1");
  rank(bad[0].first, 99);
  bad[0].second = "ranks[0].state: 99 is not a RankProcessState";
  bad[1].first.set_node_id("n1");
  for (int i = 0; i <= kMaxHeartbeatRanks; ++i) rank(bad[1].first, 0);
  bad[1].second = "ranks: 4097; a heartbeat reports at most 4096";
  bad[2].first.set_node_id(std::string(10 << 20, 'n'));
  bad[2].second = "node_id: longer than 253 characters";
  v1::HeartbeatBatchRequest batch;
  for (const auto& [hb, message] : bad) {
    v1::HeartbeatResponse resp;
    absl::Status s = controller_->Heartbeat(hb, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(s.message(), message);
    *batch.add_heartbeats()->mutable_heartbeat() = hb;
  }
  v1::HeartbeatBatchResponse answered;
  ASSERT_TRUE(controller_->HeartbeatBatch(batch, &answered).ok());
  ASSERT_EQ(answered.answers_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(answered.answers(i).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(answered.answers(i).message(), bad[i].second);
  }
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::GetJobResponse got;
  ASSERT_TRUE(controller_->GetJob(get, &got).ok());
  EXPECT_EQ(got.job().state(), before);  // no rank reported, running or failed
  EXPECT_LE(answered.ByteSizeLong(), 1000u);
}

}  // namespace
}  // namespace dhp::controller
