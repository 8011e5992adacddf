#include "common/proto_wire_budget.h"

#include <string>

#include "dhp/v1/service.pb.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

int64_t Count(const std::string& wire, const google::protobuf::Descriptor& type, int64_t limit) {
  google::protobuf::io::ArrayInputStream in(wire.data(), static_cast<int>(wire.size()));
  return CountWireElements(&in, type, limit);
}

TEST(ProtoWireBudgetTest, CountsMessagesAndStringsAtEveryDepth) {
  v1::HeartbeatBatchRequest batch;
  for (int i = 0; i < 3; ++i) {
    v1::HeartbeatRequest* hb = batch.add_heartbeats()->mutable_heartbeat();
    hb->set_node_id("n" + std::to_string(i));  // a string: 1
    for (int r = 0; r < 2; ++r) hb->add_ranks()->set_job_id("j");  // 2 ranks + 2 strings
    hb->add_progress();  // an empty report: still 1
  }
  // Per entry: the RelayedHeartbeat, its heartbeat, node_id, 2 ranks, 2 job_ids, 1 report = 8.
  EXPECT_EQ(Count(batch.SerializeAsString(), *batch.GetDescriptor(), 1000), 24);
}

TEST(ProtoWireBudgetTest, CountsEveryMapEntryAndItsKeyInEveryReport) {
  // The same fields met many times over, in types where a field number means different things
  // (HeartbeatRequest's 1 is a string, HeartbeatBatchRequest's a message): what the count
  // remembers of each (type, field) must not leak from one type to another.
  v1::HeartbeatBatchRequest batch;
  for (int i = 0; i < 25; ++i) {
    v1::HeartbeatRequest* hb = batch.add_heartbeats()->mutable_heartbeat();
    hb->set_node_id("n" + std::to_string(i));
    for (int r = 0; r < 8; ++r) {
      v1::ReportProgressRequest* report = hb->add_progress();
      report->set_job_id("j");
      for (int k = 0; k < 24; ++k) (*report->mutable_metrics())["key" + std::to_string(k)] = k;
    }
  }
  // Per heartbeat: 2 + node_id + 8 x (report + job_id + 24 x (entry + key)) = 3 + 8 x 50.
  EXPECT_EQ(Count(batch.SerializeAsString(), *batch.GetDescriptor(), 100000), 25 * (3 + 8 * 50));
}

TEST(ProtoWireBudgetTest, StopsOncePastTheLimitWithoutReadingTheRest) {
  v1::HeartbeatRequest hb;
  for (int i = 0; i < 100000; ++i) hb.add_progress();
  const std::string wire = hb.SerializeAsString();
  EXPECT_EQ(wire.size(), 200000u);  // 2 bytes a report
  EXPECT_EQ(Count(wire, *hb.GetDescriptor(), 1000000), 100000);
  EXPECT_EQ(Count(wire, *hb.GetDescriptor(), 5000), 5001);
}

TEST(ProtoWireBudgetTest, ScalarsAndUnknownFieldsAreNotLookedInto) {
  v1::HeartbeatRequest hb;
  hb.set_stopping(true);  // a varint: not counted
  std::string wire = hb.SerializeAsString();
  // Field 999, length-delimited, holding what would be 3 messages if it were looked into.
  const std::string inner = std::string("\x0a\x00\x0a\x00\x0a\x00", 6);
  wire += std::string("\xba\x3e", 2) + static_cast<char>(inner.size()) + inner;
  EXPECT_EQ(Count(wire, *hb.GetDescriptor(), 100), 1);
}

TEST(ProtoWireBudgetTest, MalformedBytesEndTheCount) {
  v1::HeartbeatRequest hb;
  // A rank of 5 bytes with 1 there, which starts a string: 2, then the end.
  EXPECT_EQ(Count(std::string("\x12\x05\x0a", 3), *hb.GetDescriptor(), 100), 2);
  EXPECT_EQ(Count(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),
                  *hb.GetDescriptor(), 100),
            0);  // a tag that never ends
  std::string deep;
  for (int i = 0; i < 200; ++i) deep = std::string("\x0b", 1) + deep + std::string("\x0c", 1);
  EXPECT_LE(Count(deep, *hb.GetDescriptor(), 1000), 102);  // groups past protobuf's depth
}

}  // namespace
}  // namespace dhp
