#include "common/proto_yaml.h"

#include <chrono>
#include <limits>
#include <string>

#include "dhp/v1/job.pb.h"
#include "dhp/v1/job_spec.pb.h"
#include "dhp/v1/node.pb.h"
#include "dhp/v1/service.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;

// The error message of a parse that must fail (and fail with INVALID_ARGUMENT).
std::string ParseError(const std::string& text, google::protobuf::Message* msg,
                       const std::string& root = "") {
  absl::Status status = ParseProtoYaml(text, msg, root);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

std::string SpecError(const std::string& text) {
  v1::JobSpec spec;
  return ParseError(text, &spec);
}

v1::JobSpec FullSpec() {
  v1::JobSpec spec;
  spec.set_name("demo");
  (*spec.mutable_labels())["team"] = "vlm";
  (*spec.mutable_labels())["tier"] = "true";  // a string that looks like a bool
  (*spec.mutable_labels())["empty"] = "";
  spec.set_priority(-3);
  spec.mutable_model()->set_preset("qwen2_5_vl_7b");
  spec.mutable_vision()->set_parallelism(v1::PARALLELISM_SEQUENCE);
  spec.mutable_vision()->set_degree(4);
  spec.mutable_vision()->set_zero_stage(0);  // present optional zero: must survive
  spec.mutable_vision()->set_activation_checkpointing(true);
  spec.mutable_vision()->set_dtype(v1::DTYPE_BF16);
  spec.mutable_text()->set_parallelism(v1::PARALLELISM_TENSOR);
  spec.mutable_text()->set_degree(4);
  spec.set_placement(v1::PLACEMENT_SEPARATE);
  spec.mutable_training()->set_learning_rate(1e-5);
  spec.mutable_training()->set_weight_decay(0.0);  // present optional zero double
  spec.mutable_training()->set_max_steps(9000000000LL);
  spec.mutable_training()->set_seed(18446744073709551615ULL);
  spec.mutable_data()->add_datasets("a");
  spec.mutable_data()->add_datasets("123");  // a string that looks like a number
  auto& registry = *spec.mutable_data()->mutable_registry();
  registry["a"].set_annotation_path("/data/a.jsonl");
  registry["a"].set_weight(0.1);
  registry["123"].set_annotation_path("b: c # not a comment");
  spec.mutable_data()->set_max_pixels(12845056);
  spec.mutable_checkpoint();  // present but empty
  return spec;
}

TEST(ProtoYamlTest, YamlRoundTripOfFullSpec) {
  const v1::JobSpec spec = FullSpec();
  const std::string yaml = ProtoToYaml(spec);
  v1::JobSpec back;
  ASSERT_TRUE(ParseProtoYaml(yaml, &back).ok()) << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, back)) << yaml << "\n" << back.DebugString();
  EXPECT_TRUE(back.vision().has_zero_stage());
  EXPECT_EQ(back.vision().zero_stage(), 0);
  EXPECT_TRUE(back.training().has_weight_decay());
  EXPECT_FALSE(back.training().has_batch_size());
  EXPECT_TRUE(back.has_checkpoint());
  EXPECT_FALSE(back.has_restart());
}

TEST(ProtoYamlTest, YamlOutputIsShortAndReadable) {
  const std::string yaml = ProtoToYaml(FullSpec());
  EXPECT_NE(yaml.find("parallelism: sequence\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("zero_stage: 0\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("learning_rate: 1e-05\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("tier: \"true\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("- \"123\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("checkpoint:\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("batch_size"), std::string::npos) << yaml;  // unset optional
  EXPECT_EQ(yaml.find("restart"), std::string::npos) << yaml;     // unset message
  // A scalar without presence is printed also when zero, as in JSON (rank 0 has "rank: 0").
  EXPECT_NE(yaml.find("epochs: 0\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("PARALLELISM_"), std::string::npos) << yaml;
  // Map keys come out sorted.
  EXPECT_LT(yaml.find("empty:"), yaml.find("team:")) << yaml;
  EXPECT_LT(yaml.find("team:"), yaml.find("tier:")) << yaml;
}

TEST(ProtoYamlTest, TrickyStringsAndDoublesRoundTrip) {
  const char* const strings[] = {"null", "~", "-", "- x", "#c", "a: b", "'q'", "\"dq\"",
                                 " lead", "trail ", "multi\nline\n", "tab\there", "back\\slash",
                                 "caf\xc3\xa9", "1e5", "-.inf", "0x10", "[x]", "{y}", "*alias",
                                 "&anchor", "!tag", "%pct", "@at", "`tick", "|", ">", "?"};
  const double doubles[] = {0.1 + 0.2, 1e300, 5e-324, -0.5, 3.0, 1e-5,
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity()};
  v1::JobSpec spec;
  for (const char* s : strings) {
    (*spec.mutable_labels())[s] = s;
    spec.mutable_data()->add_datasets(s);
  }
  int i = 0;
  for (double d : doubles) {
    (*spec.mutable_data()->mutable_registry())[std::to_string(i++)].set_weight(d);
  }
  const std::string yaml = ProtoToYaml(spec);
  v1::JobSpec back;
  ASSERT_TRUE(ParseProtoYaml(yaml, &back).ok()) << ParseProtoYaml(yaml, &back) << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, back)) << yaml << "\n" << back.DebugString();
}

// Rank 0 had no rank field in either output: a reader could not tell it from a missing one.
TEST(ProtoYamlTest, ZeroValuedFieldsArePrinted) {
  v1::RankProgress rank;
  rank.set_node_id("n-1");
  EXPECT_EQ(ProtoToJson(rank),
            R"({"rank":0,"node_id":"n-1","step":"0","report_age_seconds":0,"waiting_on":"",)"
            R"("metrics":{},"has_vision":false,"has_text":false})");
  const std::string yaml = ProtoToYaml(rank);
  EXPECT_EQ(yaml.rfind("rank: 0\nnode_id: n-1\nstep: 0\n", 0), 0u) << yaml;
}

TEST(ProtoYamlTest, EmptyMessageAndEmptyDocument) {
  EXPECT_EQ(ProtoToYaml(v1::JobSpec()), "name: \"\"\npriority: 0\nplacement: unspecified\n");
  EXPECT_EQ(ProtoToYaml(v1::GetJobRequest()), "job_id: \"\"\n");
  EXPECT_EQ(ProtoToYaml(v1::KvWaitResponse()), "{}\n");
  v1::JobSpec spec;
  spec.set_name("stale");
  ASSERT_TRUE(ParseProtoYaml("", &spec).ok());
  EXPECT_EQ(spec.name(), "");  // cleared first
  ASSERT_TRUE(ParseProtoYaml("# only a comment\n", &spec).ok());
  ASSERT_TRUE(ParseProtoYaml("{}", &spec).ok());
  EXPECT_EQ(spec.ByteSizeLong(), 0u);
}

TEST(ProtoYamlTest, JsonInputWithCamelCaseNamesAndStrings) {
  const std::string json = R"({
    "name": "j",
    "dataParallelSize": 2,
    "vision": {"parallelism": "PARALLELISM_SEQUENCE", "zeroStage": "1", "degree": 2},
    "text": {"parallelism": 3, "dtype": "Bf16"},
    "training": {"maxSteps": "9007199254740993", "learningRate": 2.5e-4, "seed": "7"},
    "data": {"datasets": ["x", "y"],
             "registry": {"x": {"annotationPath": "x.jsonl", "weight": 2},
                          "y": {"annotation_path": "y.json"}},
             "maxPixels": "50176"},
    "labels": {"k": "v"}
  })";
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml(json, &spec).ok()) << ParseProtoYaml(json, &spec);
  EXPECT_EQ(spec.data_parallel_size(), 2);
  EXPECT_EQ(spec.vision().parallelism(), v1::PARALLELISM_SEQUENCE);
  EXPECT_EQ(spec.vision().zero_stage(), 1);
  EXPECT_EQ(spec.text().parallelism(), v1::PARALLELISM_TENSOR);
  EXPECT_EQ(spec.text().dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(spec.training().max_steps(), 9007199254740993LL);  // exact, beyond 2^53
  EXPECT_DOUBLE_EQ(spec.training().learning_rate(), 2.5e-4);
  EXPECT_EQ(spec.training().seed(), 7u);
  ASSERT_EQ(spec.data().datasets_size(), 2);
  EXPECT_EQ(spec.data().datasets(1), "y");
  EXPECT_EQ(spec.data().registry().at("x").annotation_path(), "x.jsonl");
  EXPECT_DOUBLE_EQ(spec.data().registry().at("x").weight(), 2.0);
  EXPECT_FALSE(spec.data().registry().at("y").has_weight());
  EXPECT_EQ(spec.data().max_pixels(), 50176);
  EXPECT_EQ(spec.labels().at("k"), "v");
}

TEST(ProtoYamlTest, JsonRoundTrip) {
  const v1::JobSpec spec = FullSpec();
  const std::string json = ProtoToJson(spec);
  EXPECT_NE(json.find("\"annotation_path\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"zero_stage\":0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"PARALLELISM_SEQUENCE\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_steps\":\"9000000000\""), std::string::npos) << json;
  EXPECT_EQ(json.find("dataParallelSize"), std::string::npos) << json;
  v1::JobSpec back;
  ASSERT_TRUE(ParseProtoYaml(json, &back).ok()) << json;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, back)) << json;
  const std::string pretty = ProtoToJson(spec, /*pretty=*/true);
  EXPECT_NE(pretty.find('\n'), std::string::npos);
  ASSERT_TRUE(ParseProtoYaml(pretty, &back).ok()) << pretty;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, back));
}

TEST(ProtoYamlTest, EnumsByShortFullNameAnyCaseOrNumber) {
  for (const char* value : {"tensor", "TENSOR", "Tensor", "PARALLELISM_TENSOR",
                            "parallelism_tensor", "3"}) {
    v1::JobSpec spec;
    ASSERT_TRUE(ParseProtoYaml(std::string("text: {parallelism: ") + value + "}", &spec).ok())
        << value;
    EXPECT_EQ(spec.text().parallelism(), v1::PARALLELISM_TENSOR) << value;
  }
}

TEST(ProtoYamlTest, TimestampsRepeatedMessagesAndInt64) {
  v1::Node node;
  node.set_id("n1");
  auto* gpu = node.mutable_resources()->add_gpus();
  gpu->set_index(0);
  gpu->set_memory_bytes(85899345920LL);
  node.mutable_resources()->add_gpus()->set_index(1);
  node.set_state(v1::NODE_STATE_READY);
  ASSERT_TRUE(TimeUtil::FromString("2024-05-01T12:00:00.250Z", node.mutable_register_time()));
  const std::string yaml = ProtoToYaml(node);
  EXPECT_NE(yaml.find("register_time: 2024-05-01T12:00:00.250Z"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("state: ready"), std::string::npos) << yaml;
  v1::Node back;
  ASSERT_TRUE(ParseProtoYaml(yaml, &back).ok()) << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << yaml;

  v1::Job job;
  ASSERT_TRUE(ParseProtoYaml("create_time: \"2024-01-02T03:04:05+01:00\"\nlatestStep: \"12\"",
                             &job)
                  .ok());
  EXPECT_EQ(TimeUtil::ToString(job.create_time()), "2024-01-02T02:04:05Z");
  EXPECT_EQ(job.latest_step(), 12);
}

TEST(ProtoYamlTest, NullMeansUnset) {
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml("name: ~\nvision:\ntraining: {batch_size: null}\n", &spec).ok());
  EXPECT_EQ(spec.name(), "");
  EXPECT_FALSE(spec.has_vision());
  EXPECT_FALSE(spec.training().has_batch_size());
}

TEST(ProtoYamlTest, UnknownKeyNamesPathAndKnownKeys) {
  EXPECT_EQ(SpecError("vision:\n  degre: 2\n"),
            "vision.degre: unknown key; known keys: parallelism, degree, zero_stage, "
            "activation_checkpointing, dtype");
  EXPECT_EQ(SpecError("data:\n  registry:\n    shapes:\n      image_rot: x\n"),
            "data.registry.shapes.image_rot: unknown key; known keys: annotation_path, "
            "image_root, weight");
  EXPECT_EQ(SpecError("nme: x"),
            "nme: unknown key; known keys: name, labels, priority, model, vision, text, "
            "data_parallel_size, placement, training, data, checkpoint, restart, elastic");
}

TEST(ProtoYamlTest, RootPrefixesPaths) {
  v1::JobSpec spec;
  EXPECT_EQ(ParseError("model: {presett: x}", &spec, "spec"),
            "spec.model.presett: unknown key; known keys: preset, weights_path");
}

TEST(ProtoYamlTest, TypeErrorsSayWhatWasExpected) {
  EXPECT_EQ(SpecError("vision: {degree: two}"),
            "vision.degree: expected an integer, got \"two\"");
  EXPECT_EQ(SpecError("vision: {degree: 2.5}"), "vision.degree: expected an integer, got \"2.5\"");
  EXPECT_EQ(SpecError("vision: {activation_checkpointing: yes}"),
            "vision.activation_checkpointing: expected true or false, got \"yes\"");
  EXPECT_EQ(SpecError("training: {learning_rate: fast}"),
            "training.learning_rate: expected a number, got \"fast\"");
  EXPECT_EQ(SpecError("vision: [1, 2]"), "vision: expected a mapping, got a sequence");
  EXPECT_EQ(SpecError("name: {a: 1}"), "name: expected a string, got a mapping");
  EXPECT_EQ(SpecError("data: {datasets: shapes}"),
            "data.datasets: expected a sequence, got \"shapes\"");
  EXPECT_EQ(SpecError("data: {datasets: [a, [b]]}"),
            "data.datasets[1]: expected a string, got a sequence");
  EXPECT_EQ(SpecError("- a\n- b\n"), "expected a mapping, got a sequence");
  v1::Job job;
  EXPECT_EQ(ParseError("create_time: yesterday", &job),
            "create_time: expected an RFC 3339 timestamp like \"2024-05-01T12:00:00Z\", got "
            "\"yesterday\"");
}

TEST(ProtoYamlTest, RangeChecks) {
  EXPECT_EQ(SpecError("vision: {degree: 2147483648}"),
            "vision.degree: 2147483648 is out of range for int32 (-2147483648 to 2147483647)");
  EXPECT_EQ(SpecError("priority: -2147483649"),
            "priority: -2147483649 is out of range for int32 (-2147483648 to 2147483647)");
  EXPECT_EQ(SpecError("training: {seed: -1}"),
            "training.seed: -1 is out of range for uint64 (0 to 18446744073709551615)");
  EXPECT_EQ(SpecError("training: {max_steps: \"99999999999999999999\"}"),
            "training.max_steps: 99999999999999999999 is out of range for int64 "
            "(-9223372036854775808 to 9223372036854775807)");
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml("vision: {degree: -2147483648}\ntraining: {seed: "
                             "18446744073709551615}",
                             &spec)
                  .ok());
  EXPECT_EQ(spec.training().seed(), 18446744073709551615ULL);
}

TEST(ProtoYamlTest, BadEnum) {
  EXPECT_EQ(SpecError("vision: {parallelism: seq}"),
            "vision.parallelism: expected one of none, sequence, tensor, got \"seq\"");
  EXPECT_EQ(SpecError("placement: 7"),
            "placement: expected one of collocate, separate, got \"7\"");
}

TEST(ProtoYamlTest, DuplicateKeys) {
  EXPECT_EQ(SpecError("name: a\nname: b\n"), "name: duplicate key");
  EXPECT_EQ(SpecError("vision:\n  zero_stage: 1\n  zeroStage: 0\n"),
            "vision.zeroStage: duplicate key (same field as zero_stage)");
  EXPECT_EQ(SpecError("labels: {a: x, a: y}"), "labels.a: duplicate key");
  EXPECT_EQ(SpecError(R"({"name": "a", "name": "b"})"), "name: duplicate key");
}

TEST(ProtoYamlTest, SeveralErrorsAreReportedTogether) {
  EXPECT_EQ(SpecError("nme: x\nvision: {degree: two, dtype: fp64}\n"),
            "nme: unknown key; known keys: name, labels, priority, model, vision, text, "
            "data_parallel_size, placement, training, data, checkpoint, restart, elastic; "
            "vision.degree: expected an integer, got \"two\"; "
            "vision.dtype: expected one of fp32, bf16, fp16, got \"fp64\"");
}

// Found by fuzz/spec_reader_fuzzer: yaml-cpp 0.7 allocated without bound on a flow entry
// outside a flow collection (YAML::LoadAll(",") ran out of memory). libyaml reads the text
// (common/yaml_syntax.h): each of these is a prompt 400, not a dead controller.
TEST(ProtoYamlTest, StrayFlowEntriesAreRefusedAtOnce) {
  for (const char* text : {",", "[a],", "{a: 1},", "- a\n,", "name: j\n,\n"}) {
    const std::string error = SpecError(text);
    EXPECT_EQ(error.rfind("malformed YAML at line ", 0), 0u) << text << ": " << error;
  }
  EXPECT_EQ(SpecError(","),
            "malformed YAML at line 1, column 1: did not find expected node content (while "
            "parsing a block node)");
}

// Found by fuzz/spec_reader_fuzzer: text libyaml reads as one scalar ("s ,") where yaml-cpp saw a
// scalar and then a stray ',' it never consumed (YAML::LoadAll looped on it without end). The
// reader reads it as libyaml does, at once.
TEST(ProtoYamlTest, TextYamlCppMisreadIsReadAsLibyamlReadsIt) {
  EXPECT_EQ(SpecError("&a s\n,"), "expected a mapping, got \"s ,\"");
  EXPECT_EQ(SpecError("&anchor scalar\n, more"), "expected a mapping, got \"scalar , more\"");
}

TEST(ProtoYamlTest, AnAliasNamesAnAnchorDefinedBeforeIt) {
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml("name: &n job\nlabels: {a: *n, b: *n}\n", &spec).ok());
  EXPECT_EQ(spec.labels().at("a"), "job");
  EXPECT_EQ(spec.labels().at("b"), "job");
  EXPECT_EQ(SpecError("name: *nope\n"),
            "malformed YAML at line 1, column 7: *nope names no anchor defined before it");
  // An anchor counts from its node's end: no node can hold itself.
  EXPECT_EQ(SpecError("labels: &l {a: *l}\n"),
            "malformed YAML at line 1, column 16: *l names no anchor defined before it");
  EXPECT_EQ(SpecError("data: {datasets: &d [x, *d]}\n"),
            "malformed YAML at line 1, column 25: *d names no anchor defined before it");
  const std::string long_name(100, 'a');
  EXPECT_EQ(SpecError("name: *" + long_name + "\n"),
            "malformed YAML at line 1, column 7: *" + std::string(80, 'a') +
                "... names no anchor defined before it");
}

// YAML's null is a plain scalar; quoted, the same text is a string.
TEST(ProtoYamlTest, OnlyPlainNullsAreNull) {
  for (const char* null : {"~", "null", "Null", "NULL", ""}) {
    v1::JobSpec spec;
    ASSERT_TRUE(ParseProtoYaml(std::string("name: ") + null + "\n", &spec).ok()) << null;
    EXPECT_EQ(spec.name(), "") << null;
  }
  for (const char* text : {"'~'", "\"null\"", "!!str null", "nULL", "none"}) {
    v1::JobSpec spec;
    ASSERT_TRUE(ParseProtoYaml(std::string("name: ") + text + "\n", &spec).ok()) << text;
    EXPECT_NE(spec.name(), "") << text;
  }
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml("# only a comment\n", &spec).ok());
  ASSERT_TRUE(ParseProtoYaml("", &spec).ok());
  EXPECT_EQ(SpecError("'null'"), "expected a mapping, got \"null\"");
}

// Found by an outside client: libyaml's cost grows with the square of the nesting depth ('['
// times 100,000 took 14 s; a 4 MiB body allows 40 times that). Past 64 levels the reader stops
// at once, flow or block, well-formed or not.
TEST(ProtoYamlTest, NestingPast64LevelsIsRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(SpecError(std::string(4 << 20, '[')),
            "malformed YAML at line 1: nests deeper than 64 levels");
  std::string block = "labels:\n";
  for (int i = 1; i <= 70; ++i) block += std::string(2 * i, ' ') + "k" + std::to_string(i) + ":\n";
  EXPECT_EQ(SpecError(block), "malformed YAML at line 65: nests deeper than 64 levels");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // 64 levels are still read (and refused for what they hold, not for their depth).
  const std::string flow = "labels: " + std::string(63, '[') + std::string(63, ']');
  EXPECT_EQ(SpecError(flow).find("nests deeper"), std::string::npos) << SpecError(flow);
}

TEST(ProtoYamlTest, MalformedYamlGivesLineAndColumn) {
  EXPECT_EQ(
      SpecError("name: a\nvision: {degree: 2\n"),
      "malformed YAML at line 3, column 1: did not find expected ',' or '}' (while parsing a flow "
      "mapping)");
  EXPECT_EQ(SpecError("name: a\n  b: 2\n"),
            "malformed YAML at line 2, column 4: mapping values are not allowed in this context");
  v1::JobSpec spec;
  EXPECT_EQ(ParseError("name: a\n---\nname: b\n", &spec).rfind(
                "expected one YAML document, got more (a '---' separator", 0),
            0u);
}

// Ill-formed UTF-8 is refused before anything is parsed: a protobuf string holding it would not
// serialise, and a stored one would not parse again (found: a REST submission with \xff in model.weights_path was stored, and
// every later job listing failed with DATA_LOSS).
TEST(ProtoYamlTest, IllFormedUtf8IsRefused) {
  // The message names the field where the bytes are, when the rest of the text reads.
  EXPECT_EQ(SpecError("name: a\nmodel: {weights_path: \"x\xffy\"}\n"),
            "model.weights_path: not valid UTF-8: byte 0xFF at line 2, column 25 (offset 32)");
  EXPECT_EQ(SpecError("name: \xc3"),
            "name: not valid UTF-8: byte 0xC3 at line 1, column 7 (offset 6)");
  EXPECT_EQ(SpecError("name: \xc0\xaf"),  // overlong "/"
            "name: not valid UTF-8: byte 0xC0 at line 1, column 7 (offset 6)");
  EXPECT_EQ(SpecError("name: \xed\xa0\x80"),  // a surrogate
            "name: not valid UTF-8: byte 0xED at line 1, column 7 (offset 6)");
  EXPECT_EQ(SpecError("name: \xf4\x90\x80\x80"),  // above U+10FFFF
            "name: not valid UTF-8: byte 0xF4 at line 1, column 7 (offset 6)");
  EXPECT_EQ(SpecError("name: x\nlabels: {owner: \"ab\xff" "cd\"}\n"),
            "labels.owner: not valid UTF-8: byte 0xFF at line 2, column 20 (offset 27)");
  EXPECT_EQ(SpecError("labels: {\"o\xffk\": v}\n"),
            "labels.o\xEF\xBF\xBDk (the key): not valid UTF-8: byte 0xFF at line 1, column 12 "
            "(offset 11)");
  v1::JobSpec root_spec;
  EXPECT_EQ(ParseError("data: {datasets: [a, \"b\xfe\"]}", &root_spec, "spec"),
            "spec.data.datasets[1]: not valid UTF-8: byte 0xFE at line 1, column 24 (offset 23)");
  // Where the rest does not read (an unknown key, a comment), the position alone.
  EXPECT_EQ(SpecError("nmae: \xff\n"),
            "not valid UTF-8: byte 0xFF at line 1, column 7 (offset 6)");
  EXPECT_EQ(SpecError("name: a # \xff\n"),
            "not valid UTF-8: byte 0xFF at line 1, column 11 (offset 10)");
  // A lone surrogate escape is refused by the YAML reader itself (the string check behind it
  // stays for any other way in).
  EXPECT_EQ(
      SpecError(R"({"model": {"weights_path": "a\udcffb"}})"),
      "malformed YAML at line 1, column 32: found invalid Unicode character escape code (while "
      "parsing a quoted scalar)");
  EXPECT_EQ(
      SpecError("labels: {\"\\udcff\": x}"),
      "malformed YAML at line 1, column 13: found invalid Unicode character escape code (while "
      "parsing a quoted scalar)");
  // Well-formed text of every length passes.
  v1::JobSpec spec;
  const std::string fine = "h\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80";
  ASSERT_TRUE(ParseProtoYaml("name: \"" + fine + "\"\n", &spec).ok());
  EXPECT_EQ(spec.name(), fine);
}

// Aliases repeat their anchor's subtree: the reader's work is bounded by the size of the text,
// so a small document cannot stand for a huge one (found: an 18.9 KB body with a reused anchor
// took 1.1 s and 370 MB and gave an 86.8 MB error message).
TEST(ProtoYamlTest, NestedAliasesAreBoundedByTheTextSize) {
  // 10^3 jobs x 10^3 registry entries x 2 fields = 2 * 10^6 values from 20 KB.
  std::string text = "jobs:\n  - &j\n    spec:\n      data:\n        registry:\n";
  text += "          r0: &d {annotation_path: a, image_root: b}\n";
  for (int i = 1; i < 1000; ++i) text += "          r" + std::to_string(i) + ": *d\n";
  for (int i = 1; i < 1000; ++i) text += "  - *j\n";
  v1::ListJobsResponse list;
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ParseError(text, &list);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(list.jobs_size(), 0);  // nothing half-read is left behind
  EXPECT_NE(error.find("the document stands for more than " +
                       std::to_string(10 * text.size()) + " nodes and characters"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("aliases (*name) repeat their anchor's whole content"), std::string::npos);

  // A few aliases of a small anchor are fine.
  ASSERT_TRUE(ParseProtoYaml("jobs: [&j {id: a}, *j, *j]", &list).ok());
  EXPECT_EQ(list.jobs_size(), 3);
  EXPECT_EQ(list.jobs(2).id(), "a");
}

TEST(ProtoYamlTest, AliasesOfLongStringsAreBoundedByTheTextSize) {
  // 800 labels of 9,000 bytes each (7.2 MB of spec) from 18 KB: it used to be accepted.
  std::string text = "name: x\nlabels:\n  l0: &s " + std::string(9000, 'v') + "\n";
  for (int i = 1; i < 800; ++i) text += "  l" + std::to_string(i) + ": *s\n";
  const std::string error = SpecError(text);
  EXPECT_NE(error.find("the document stands for more than"), std::string::npos) << error;
  // Long labels written out are allowed their work (100 of them: 900 KB).
  std::string long_text = "name: x\nlabels:\n";
  for (int i = 0; i < 100; ++i) {
    long_text += "  l" + std::to_string(i) + ": " + std::string(9000, 'v') + "\n";
  }
  v1::JobSpec spec;
  ASSERT_TRUE(ParseProtoYaml(long_text, &spec).ok());
  EXPECT_EQ(spec.labels_size(), 100);
}

TEST(ProtoYamlTest, ErrorTextIsBounded) {
  // The issue's shape: 1,000 unknown keys behind one anchor, repeated by 800 aliases.
  std::string anchor = "{";
  for (int i = 0; i < 1000; ++i) anchor += (i ? ", b" : "b") + std::to_string(i) + ": 1";
  anchor += "}";
  std::string text = "name: x\ndata:\n  registry:\n    k0: &x " + anchor + "\n";
  for (int i = 1; i < 800; ++i) text += "    k" + std::to_string(i) + ": *x\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string error = SpecError(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_LE(error.size(), 4096u);
  EXPECT_EQ(error.rfind("data.registry.k0.b0: unknown key; known keys: annotation_path, ", 0), 0u)
      << error.substr(0, 200);
  EXPECT_NE(error.find("; ... (more errors not shown)"), std::string::npos) << error;

  // Without aliases too: 5,000 unknown keys.
  std::string many = "{";
  for (int i = 0; i < 5000; ++i) many += (i ? ", x" : "x") + std::to_string(i) + ": 1";
  const std::string many_error = SpecError(many + "}");
  EXPECT_LE(many_error.size(), 4096u);
  EXPECT_NE(many_error.find("(more errors not shown)"), std::string::npos);
}

TEST(ProtoYamlTest, LongValuesAndKeysAreCutInMessages) {
  const std::string long_value(100000, 'z');
  std::string error = SpecError("priority: " + long_value + "\n");
  EXPECT_EQ(error, "priority: expected an integer, got \"" + std::string(80, 'z') + "...\"");
  error = SpecError(std::string(1000, 'z') + ": 1\n");  // YAML keys have at most 1024
  EXPECT_EQ(error.rfind(std::string(80, 'z') + "...: unknown key; known keys: name,", 0), 0u)
      << error.substr(0, 200);
  // Cut on a character boundary: 79 ASCII bytes, then a 2-byte character across byte 80.
  error = SpecError("priority: " + std::string(79, 'a') + "\xc3\xa9\xc3\xa9\n");
  EXPECT_EQ(error, "priority: expected an integer, got \"" + std::string(79, 'a') + "...\"");
}

}  // namespace
}  // namespace dhp
