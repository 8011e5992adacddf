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

TEST(Utf8Test, CutUtf8KeepsWholeCharacters) {
  EXPECT_EQ(CutUtf8("abc", 3), "abc");
  EXPECT_EQ(CutUtf8("abcd", 3), "abc...");
  EXPECT_EQ(CutUtf8("a\xe4\xb8\xad", 2), "a...");  // not half of the character
  EXPECT_EQ(CutUtf8("a\xe4\xb8\xad", 4), "a\xe4\xb8\xad");
  EXPECT_EQ(CutUtf8("\xe4\xb8\xadz", 3), "\xe4\xb8\xad...");
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

  // Leaving out a field the caller checked already: the spec's bad label is skipped, the
  // job's own fields are not.
  const auto* spec = v1::Job::descriptor()->FindFieldByName("spec");
  EXPECT_EQ(InvalidUtf8Field(job, spec), "");
  job.set_owner("\xc0");
  EXPECT_EQ(InvalidUtf8Field(job, spec),
            "owner: not valid UTF-8: byte 0xC0 at line 1, column 1 (offset 0)");

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

// Requests as gRPC hands them over: bytes that protobuf's parser refuses because a string field
// holds ill-formed UTF-8. The check names the field from the encoding alone.
TEST(ProtoUtf8Test, NamesTheFieldInAnEncodingTheParserRefuses) {
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_id("n1");
  reg.mutable_node()->set_hostname("h\xffost");
  const std::string wire = reg.SerializeAsString();
  ASSERT_FALSE(v1::RegisterNodeRequest().ParseFromString(wire));
  EXPECT_EQ(InvalidUtf8InEncoding(wire, *v1::RegisterNodeRequest::descriptor()),
            "node.hostname: not valid UTF-8: byte 0xFF at line 1, column 2 (offset 1)");

  v1::AppendLogsRequest logs;  // repeated messages: the element's index; bytes are not text
  logs.add_chunks()->set_data("\xff\xfe raw");
  logs.add_chunks()->set_job_id("ok");
  logs.add_chunks()->set_job_id("j\xc3");
  EXPECT_EQ(InvalidUtf8InEncoding(logs.SerializeAsString(), *v1::AppendLogsRequest::descriptor()),
            "chunks[2].job_id: not valid UTF-8: byte 0xC3 at line 1, column 2 (offset 1)");

  v1::SubmitJobRequest submit;  // a map entry is named by its index
  (*submit.mutable_spec()->mutable_labels())["team"] = "x\xffy";
  EXPECT_EQ(InvalidUtf8InEncoding(submit.SerializeAsString(), *v1::SubmitJobRequest::descriptor()),
            "spec.labels[0].value: not valid UTF-8: byte 0xFF at line 1, column 2 (offset 1)");
}

TEST(ProtoUtf8Test, AnEncodingWithWellFormedTextOrNoFramingNamesNothing) {
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_hostname("h\xc3\xa9");
  EXPECT_EQ(InvalidUtf8InEncoding(reg.SerializeAsString(), *v1::RegisterNodeRequest::descriptor()),
            "");
  // Not protobuf at all (a truncated varint), and a length running past the end.
  EXPECT_EQ(InvalidUtf8InEncoding("\xff\xff\xff\xff", *v1::RegisterNodeRequest::descriptor()), "");
  EXPECT_EQ(InvalidUtf8InEncoding("\x0a\x7f" "ab", *v1::RegisterNodeRequest::descriptor()), "");
  // A field number this build does not know, holding bad bytes, is skipped as the parser skips it.
  EXPECT_EQ(InvalidUtf8InEncoding("\xfa\x3e\x01\xff", *v1::RegisterNodeRequest::descriptor()), "");
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
  // A key that looks like an index is still a key: joined with a dot.
  job.mutable_spec()->mutable_data()->clear_registry();
  (*job.mutable_spec()->mutable_data()->mutable_registry())["[0]"].set_image_root("<here>");
  EXPECT_EQ(FieldContaining(job, "<here>"), "spec.data.registry.[0].image_root");
  (*job.mutable_spec()->mutable_labels())["<here>"] = "v";
  EXPECT_EQ(FieldContaining(job, "<here>"), "spec.labels.<here> (the key)");
}

}  // namespace
}  // namespace dhp
