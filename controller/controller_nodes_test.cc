// Tests the Controller's node methods as agents and the API call them: a stopping agent's node
// (a heartbeat with `stopping`) gets no new ranks while another READY node does, shows as
// stopping in ListNodes, and is placed on again once an agent registers it anew.
#include <memory>
#include <string>

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

}  // namespace
}  // namespace dhp::controller
