#include "common/proto_utf8.h"

#include <string>

#include "common/utf8.h"
#include "dhp/v1/job.pb.h"
#include "dhp/v1/node.pb.h"
#include "dhp/v1/service.pb.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

TEST(Utf8Test, ReplaceAndEscapeTouchOnlyIllFormedBytes) {
  const std::string text =
      "a\xff"
      "b\xc3\xa9"
      "c\xed\xa0\x80";
  EXPECT_EQ(ReplaceInvalidUtf8(text, "?"),
            "a?b\xc3\xa9"
            "c???");
  EXPECT_EQ(EscapeInvalidUtf8(text),
            "a\\xFFb\xc3\xa9"
            "c\\xED\\xA0\\x80");
  EXPECT_EQ(EscapeInvalidUtf8("plain \xe4\xb8\xad"), "plain \xe4\xb8\xad");
  EXPECT_EQ(EscapeInvalidUtf8(""), "");
  EXPECT_EQ(EscapeInvalidUtf8("\xc3"), "\\xC3");  // truncated at the end
}

TEST(ProtoUtf8Test, WellFormedMessagesPass) {
  v1::Job job;
  job.set_id("j-1");
  job.mutable_spec()->set_name("h\xc3\xa9");
  (*job.mutable_spec()->mutable_labels())["team"] = "\xe4\xb8\xad";
  job.mutable_spec()->mutable_data()->add_datasets("a");
  EXPECT_EQ(InvalidUtf8Field(job), "");
  EXPECT_EQ(InvalidUtf8Field(v1::Job()), "");
}

TEST(ProtoUtf8Test, NamesTheFieldWithIllFormedText) {
  v1::Job job;
  job.set_id("j-1");
  job.mutable_spec()->set_name("ok");
  (*job.mutable_spec()->mutable_labels())["owner"] =
      "ab\xff"
      "cd";
  EXPECT_EQ(InvalidUtf8Field(job),
            "spec.labels.owner: not valid UTF-8: byte 0xFF at line 1, column 3 (offset 2)");

  v1::Job key;
  (*key.mutable_spec()->mutable_labels())["o\xffk"] = "v";
  EXPECT_EQ(InvalidUtf8Field(key),
            "spec.labels.o\\xFFk (the key): not valid UTF-8: byte 0xFF at "
            "line 1, column 2 (offset 1)");

  v1::Node node;
  node.set_hostname("h\xffost");
  EXPECT_EQ(InvalidUtf8Field(node),
            "hostname: not valid UTF-8: byte 0xFF at line 1, column 2 "
            "(offset 1)");

  v1::Run run;
  run.add_placement()->set_node_id("fine");
  run.add_placement()->set_node_id("x\xc3");
  EXPECT_EQ(InvalidUtf8Field(run),
            "placement[1].node_id: not valid UTF-8: byte 0xC3 at line 1, "
            "column 2 (offset 1)");

  v1::Event event;
  event.set_reason("x\xffy");
  EXPECT_EQ(InvalidUtf8Field(event).rfind("reason: not valid UTF-8: byte 0xFF", 0), 0u);
}

TEST(ProtoUtf8Test, BytesFieldsAreNotText) {
  v1::LogChunk chunk;
  chunk.set_job_id("j-1");
  chunk.set_data("\xff\xfe raw output");
  EXPECT_EQ(InvalidUtf8Field(chunk), "");
  chunk.set_job_id("j\xff");
  EXPECT_EQ(InvalidUtf8Field(chunk).rfind("job_id: not valid UTF-8", 0), 0u);
}

TEST(ProtoUtf8Test, FieldContainingFindsTheFirstHolder) {
  v1::Job job;
  job.set_id("j-1");
  job.mutable_spec()->mutable_data()->add_datasets("a");
  job.mutable_spec()->mutable_data()->add_datasets("b<here>");
  EXPECT_EQ(FieldContaining(job, "<here>"), "spec.data.datasets[1]");
  EXPECT_EQ(FieldContaining(job, "nowhere"), "");
  (*job.mutable_spec()->mutable_data()->mutable_registry())["r"].set_image_root("<here>");
  EXPECT_EQ(FieldContaining(job, "<here>"), "spec.data.datasets[1]");
  job.mutable_spec()->mutable_data()->clear_datasets();
  EXPECT_EQ(FieldContaining(job, "<here>"), "spec.data.registry.r.image_root");
}

}  // namespace
}  // namespace dhp
