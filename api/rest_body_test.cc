#include "api/rest_body.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/service.h"
#include "dhp/v1/service.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dhp::api {
namespace {

// The message of a parse that must fail with INVALID_ARGUMENT.
template <typename Message>
std::string Error(const std::string& body) {
  Message msg;
  absl::Status s = ParseJsonBody(body, &msg);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(s.message());
}

std::string SubmitError(const std::string& body) { return Error<v1::SubmitJobRequest>(body); }

TEST(BodyFormatTest, JsonYamlOrRefused) {
  EXPECT_EQ(*BodyFormatOf("", false), BodyFormat::kJson);  // no Content-Type
  EXPECT_EQ(*BodyFormatOf(std::string_view(), false), BodyFormat::kJson);
  EXPECT_EQ(*BodyFormatOf("*/*", false), BodyFormat::kJson);
  EXPECT_EQ(*BodyFormatOf("application/json", false), BodyFormat::kJson);
  EXPECT_EQ(*BodyFormatOf("Application/JSON; charset=UTF-8", false), BodyFormat::kJson);
  EXPECT_EQ(*BodyFormatOf("application/merge-patch+json", false), BodyFormat::kJson);
  EXPECT_EQ(*BodyFormatOf("application/yaml", true), BodyFormat::kYaml);
  EXPECT_EQ(*BodyFormatOf("text/yaml; charset=\"utf-8\"", true), BodyFormat::kYaml);
  EXPECT_EQ(*BodyFormatOf("application/x-yaml", true), BodyFormat::kYaml);

  absl::StatusOr<BodyFormat> f = BodyFormatOf("text/plain", true);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "Content-Type text/plain is not accepted here; send JSON (Content-Type: "
            "application/json) or a YAML job spec (Content-Type: application/yaml)");
  f = BodyFormatOf("application/x-www-form-urlencoded", false);  // curl -d without -H
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "Content-Type application/x-www-form-urlencoded is not accepted here; send JSON "
            "(Content-Type: application/json)");
  f = BodyFormatOf("application/yaml", false);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "Content-Type application/yaml is not accepted here; send JSON (Content-Type: "
            "application/json); YAML is taken only for job specs (POST /v1/jobs)");
  f = BodyFormatOf("application/json; charset=latin1", false);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "Content-Type application/json; charset=latin1: request bodies are UTF-8; send "
            "charset=utf-8 or no charset");
}

TEST(ParseJsonBodyTest, TheProtoJsonMapping) {
  v1::SubmitJobRequest req;
  ASSERT_TRUE(ParseJsonBody(R"({"spec": {"name": "x", "labels": {"a": "b"},
      "vision": {"parallelism": "PARALLELISM_SEQUENCE", "degree": "2"},
      "training": {"maxSteps": "9000000000"}}, "dryRun": true})",
                            &req)
                  .ok());
  EXPECT_EQ(req.spec().name(), "x");
  EXPECT_EQ(req.spec().labels().at("a"), "b");
  EXPECT_EQ(req.spec().vision().parallelism(), v1::PARALLELISM_SEQUENCE);
  EXPECT_EQ(req.spec().vision().degree(), 2);
  EXPECT_EQ(req.spec().training().max_steps(), 9000000000LL);
  EXPECT_TRUE(req.dry_run());

  // Empty bodies are empty messages (POST :cancel, :resume, :heartbeat without a body).
  ASSERT_TRUE(ParseJsonBody("", &req).ok());
  EXPECT_FALSE(req.has_spec());
  ASSERT_TRUE(ParseJsonBody(" \n", &req).ok());

  v1::AppendLogsRequest logs;
  ASSERT_TRUE(ParseJsonBody(R"({"chunks": [{"data": "/w=="}]})", &logs).ok());
  EXPECT_EQ(logs.chunks(0).data(), "\xff");  // bytes are base64, and may be anything
}

TEST(ParseJsonBodyTest, ErrorsNameTheField) {
  EXPECT_EQ(SubmitError(R"({"spec": {"name": "x", "vision": {"degre": 2}}})"),
            "request body (JSON): spec.vision.degre: unknown key; known keys: parallelism, "
            "degree, zero_stage, activation_checkpointing, dtype");
  EXPECT_EQ(SubmitError(R"({"nam": 1})"),
            "request body (JSON): nam: unknown key; known keys: spec, spec_text, dry_run, owner");
  EXPECT_EQ(SubmitError(R"({"spec": {"data": {"registry": {"k": {"bad": 1}}}}})"),
            "request body (JSON): spec.data.registry[0].value.bad: unknown key; known keys: "
            "annotation_path, image_root, weight");
  EXPECT_EQ(SubmitError(R"({"spec": {"vision": {"degree": 3.5}}})"),
            "request body (JSON): spec.vision.degree: expected a JSON value for a int32, got 3.5");
  EXPECT_EQ(SubmitError(R"({"spec": {"vision": {"parallelism": "sequence"}}})"),
            "request body (JSON): spec.vision.parallelism: expected one of "
            "PARALLELISM_UNSPECIFIED, PARALLELISM_NONE, PARALLELISM_SEQUENCE, PARALLELISM_TENSOR "
            "(JSON takes an enum's full name or number), got \"sequence\"");
  EXPECT_EQ(SubmitError(R"({"spec": )"),
            "request body (JSON): malformed JSON at line 1, column 10: syntax error while "
            "parsing value - unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(SubmitError("name: x\n"),
            "request body (JSON): malformed JSON at line 1, column 2: syntax error while parsing "
            "value - invalid literal; last read: 'na'");
  EXPECT_EQ(SubmitError("[1]"),
            "request body (JSON): malformed JSON: Root element must be a "
            "message.");
  EXPECT_EQ(SubmitError(R"({"spec_text": "a"} trailing)"),
            "request body (JSON): malformed JSON at line 1, column 22: syntax error while "
            "parsing value - invalid literal; last read: '\"a\"} tra'; expected end of input");
}

// protobuf's JSON parser refuses ill-formed UTF-8 and lone surrogates itself; the body's
// bytes are checked first so that the message names the field and the byte.
TEST(ParseJsonBodyTest, TextThatIsNotUtf8IsRefusedNamingTheField) {
  EXPECT_EQ(Error<v1::RegisterNodeRequest>("{\"node\": {\"hostname\": \"h\xffost\"}}"),
            "request body (JSON): node.hostname: not valid UTF-8: byte 0xFF at line 1, column 25 "
            "(offset 24)");
  EXPECT_EQ(Error<v1::CancelJobRequest>("{\"reason\": \"x\xffy\"}"),
            "request body (JSON): reason: not valid UTF-8: byte 0xFF at line 1, column 14 "
            "(offset 13)");
  EXPECT_EQ(SubmitError("{\"spec\": {\"labels\": {\"team\": \"ab\xff"
                        "cd\"}}}"),
            "request body (JSON): spec.labels.team: not valid UTF-8: byte 0xFF at line 1, "
            "column 33 (offset 32)");
  EXPECT_EQ(SubmitError("{\"spec\": {\"labels\": {\"t\xc3\": \"v\"}}}"),
            "request body (JSON): spec.labels.t\xEF\xBF\xBD (the key): not valid UTF-8: byte "
            "0xC3 at line 1, column 24 (offset 23)");
  EXPECT_EQ(SubmitError("{\"spec_text\": \"name: x\xed\xa0\x80\"}"),  // a surrogate
            "request body (JSON): spec_text: not valid UTF-8: byte 0xED at line 1, column 23 "
            "(offset 22)");
  // Where the rest does not parse: the position alone.
  EXPECT_EQ(SubmitError("{\"nope\": \"\xff\"}"),
            "request body (JSON): not valid UTF-8: byte 0xFF at line 1, column 11 (offset 10)");
  // Escapes that stand for no character.
  EXPECT_EQ(SubmitError(R"({"spec_text": "a\udcffb"})")
                .rfind("request body (JSON): malformed JSON at line 1, column 22: syntax error "
                       "while parsing value - invalid string: surrogate U+DC00..U+DFFF must "
                       "follow U+D800..U+DBFF", 0),
            0u);
  EXPECT_EQ(SubmitError(R"({"spec_text": "a\ud800b"})")
                .rfind("request body (JSON): malformed JSON at line 1, column 23: syntax error "
                       "while parsing value - invalid string: surrogate U+D800..U+DBFF must be "
                       "followed by U+DC00..U+DFFF", 0),
            0u);
  // Well-formed text of every length passes.
  v1::CancelJobRequest cancel;
  ASSERT_TRUE(
      ParseJsonBody("{\"reason\": \"h\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"}", &cancel).ok());
  EXPECT_EQ(cancel.reason(), "h\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
}

// What ParseJsonBody relies on: protobuf's own JSON parser (3.21) refuses ill-formed UTF-8 and
// escapes that stand for no character in string fields, so nothing it accepts could fail to
// serialise; the explicit check before it is for the message, not for safety.
TEST(ParseJsonBodyTest, ProtobufsJsonParserRefusesIllFormedUtf8) {
  for (const std::string& body :
       {std::string("{\"reason\": \"x\xffy\"}"), std::string("{\"reason\": \"\xc3\"}"),
        std::string("{\"reason\": \"\xed\xa0\x80\"}"), std::string(R"({"reason": "\udcff"})"),
        std::string(R"({"reason": "\ud800"})"), std::string("{\"re\xffason\": \"x\"}")}) {
    v1::CancelJobRequest req;
    EXPECT_FALSE(google::protobuf::util::JsonStringToMessage(body, &req).ok()) << body;
  }
  v1::CancelJobRequest req;
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(R"({"reason": "\ud83d\ude00"})", &req).ok());
  EXPECT_EQ(req.reason(), "\xf0\x9f\x98\x80");
}

TEST(ParseJsonBodyTest, MessagesAreBounded) {
  const std::string key(100000, 'k');
  const std::string error = SubmitError("{\"" + key + "\": 1}");
  EXPECT_EQ(error.rfind("request body (JSON): " + std::string(80, 'k') + "...: unknown key", 0),
            0u);
  EXPECT_LT(error.size(), 300u);
  const std::string value(100000, '9');
  EXPECT_LT(SubmitError("{\"spec\": {\"priority\": " + value + "}}").size(), 4200u);
}

// Found by schemathesis: protobuf's parser read {"ranks": {}} as one element, and
// {"ranks": [[null, null]]} as a list. Repeated fields take arrays, messages and maps objects,
// and no element is an array; brackets inside strings are text.
TEST(ParseJsonBodyTest, ShapesTheMappingDoesNotAllowAreRefused) {
  EXPECT_EQ(Error<v1::HeartbeatRequest>(R"({"ranks": {}})"),
            "request body (JSON): ranks: expected an array, got an object");
  EXPECT_EQ(Error<v1::HeartbeatRequest>(R"({"ranks": [[null, null]]})"),
            "request body (JSON): ranks[0]: expected a single value, got an array");
  EXPECT_EQ(Error<v1::KvWaitRequest>(R"({"keys": ["a", ["b"]]})"),
            "request body (JSON): keys[1]: expected a single value, got an array");
  EXPECT_EQ(Error<v1::KvWaitRequest>(R"({"keys": "a"})"),
            "request body (JSON): keys: expected an array, got a string");
  EXPECT_EQ(Error<v1::RegisterNodeRequest>(R"({"node": {"resources": {"gpus": [1]}}})"),
            "request body (JSON): node.resources.gpus[0]: expected an object, got a number");
  EXPECT_EQ(SubmitError(R"({"spec": {"labels": []}})"),
            "request body (JSON): spec.labels: expected an object, got an array");
  EXPECT_EQ(SubmitError(R"({"spec": [{}]})"),
            "request body (JSON): spec: expected a single value, got an array");
  // protobuf read a null map value as 0 (schemathesis sent one in a relayed report).
  EXPECT_EQ(Error<v1::HeartbeatRequest>(R"({"progress": [{"metrics": {"x": null}}]})"),
            "request body (JSON): progress[0].metrics.x: a map value must not be null");
  EXPECT_EQ(Error<v1::ReportProgressRequest>(R"({"metrics": {"lr": 1, "x": null}})"),
            "request body (JSON): metrics.x: a map value must not be null");
  EXPECT_EQ(SubmitError(R"({"spec": {"labels": {"team": null}}})"),
            "request body (JSON): spec.labels.team: a map value must not be null");
  v1::KvWaitRequest wait;
  ASSERT_TRUE(ParseJsonBody(R"({"keys": ["[[", "\"[[", "]{["]})", &wait).ok());
  ASSERT_EQ(wait.keys_size(), 3);
  EXPECT_EQ(wait.keys(1), "\"[[");
  // protobuf skips a null element (the OpenAPI document allows null elements, so).
  v1::HeartbeatRequest beat;
  ASSERT_TRUE(ParseJsonBody(R"({"ranks": [null, {"job_id": "j"}]})", &beat).ok());
  ASSERT_EQ(beat.ranks_size(), 1);
  EXPECT_EQ(beat.ranks(0).job_id(), "j");
  // protobuf took 100,000 nested arrays in a repeated string field as an empty list.
  const std::string deep = R"({"keys": )" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_EQ(Error<v1::KvWaitRequest>(deep),
            "request body (JSON): arrays and objects nest more than 64 deep; at most 64 are "
            "read");
}


// protobuf's own parser (3.21) took all of these, and kept the last of a key given twice.
TEST(ParseJsonBodyTest, OnlyJsonByRfc8259IsRead) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({'spec_text': 'a'})", "line 1, column 2: syntax error while parsing object key"},
      {R"({spec_text: "a"})", "line 1, column 2: syntax error while parsing object key"},
      {R"({"spec_text": "a",})", "line 1, column 19: syntax error while parsing object key"},
      {R"({"spec": {"labels": {"a": "b",}}})", "line 1, column 31: syntax error"},
      {"// a comment\n{}", "line 1, column 1: syntax error while parsing value"},
      {R"({"dry_run": True})", "line 1, column 13: syntax error while parsing value"},
      {R"({"spec": {"vision": {"degree": 0x10}}})", "line 1, column 33: syntax error"},
      {R"({"spec": {"vision": {"degree": NaN}}})", "line 1, column 32: syntax error"},
  };
  for (const auto& [body, why] : cases) {
    EXPECT_EQ(SubmitError(body).rfind(absl::StrCat("request body (JSON): malformed JSON at ", why),
                                      0),
              0u)
        << body << " -> " << SubmitError(body);
  }
  EXPECT_EQ(SubmitError(R"({"spec": {"vision": {"degree": 1e999}}})"),
            "request body (JSON): malformed JSON: number overflow parsing '1e999'");
  EXPECT_EQ(SubmitError(R"({"spec": {"name": "a", "name": "b"}})"),
            "request body (JSON): spec.name: the key is given twice in one object; give each "
            "key once");
  EXPECT_EQ(SubmitError(R"({"spec": {"labels": {"team": "a", "team": "b"}}})"),
            "request body (JSON): spec.labels.team: the key is given twice in one object; give "
            "each key once");
  EXPECT_EQ(Error<v1::HeartbeatRequest>(
                R"({"ranks": [{"job_id": "j"}, {"pid": 1, "pid": 2}]})"),
            "request body (JSON): ranks[1].pid: the key is given twice in one object; give "
            "each key once");
  // The same key in two objects is two keys.
  v1::HeartbeatRequest beat;
  ASSERT_TRUE(ParseJsonBody(R"({"ranks": [{"pid": 1}, {"pid": 2}]})", &beat).ok());
  EXPECT_EQ(beat.ranks(1).pid(), 2);
}

// A field may be named by its proto name or its JSON name, not both: protobuf would keep the one
// it read last, so {"dry_run": true, "dryRun": false} submitted a real job.
TEST(ParseJsonBodyTest, AFieldNamedTwiceByItsTwoNamesIsRefused) {
  EXPECT_EQ(SubmitError(R"({"spec_text": "a", "dryRun": true, "dry_run": false})"),
            "request body (JSON): dry_run: names the same field as dryRun; give a field once, "
            "by its proto name or its JSON name");
  EXPECT_EQ(SubmitError(R"({"spec": {"vision": {"zero_stage": 1, "zeroStage": 1}}})"),
            "request body (JSON): spec.vision.zero_stage: names the same field as zeroStage; "
            "give a field once, by its proto name or its JSON name");
  EXPECT_EQ(Error<v1::HeartbeatRequest>(
                R"({"ranks": [{"job_id": "j"}, {"worldRank": 1, "world_rank": null}]})"),
            "request body (JSON): ranks[1].world_rank: names the same field as worldRank; give "
            "a field once, by its proto name or its JSON name");
  // Map keys are the user's: "team_a" and "teamA" are two labels.
  v1::SubmitJobRequest req;
  ASSERT_TRUE(ParseJsonBody(R"({"spec": {"labels": {"team_a": "1", "teamA": "2"}}})", &req).ok());
  EXPECT_EQ(req.spec().labels().size(), 2u);
  // Either name alone is read.
  ASSERT_TRUE(ParseJsonBody(R"({"dryRun": true})", &req).ok());
  EXPECT_TRUE(req.dry_run());
  ASSERT_TRUE(ParseJsonBody(R"({"dry_run": true})", &req).ok());
  EXPECT_TRUE(req.dry_run());
}

// As many values as a gRPC request's elements (api::kMaxRequestElements): a 4 MiB body of
// empty objects would be 1.4 million messages.
TEST(ParseJsonBodyTest, ABodyOfTooManyValuesIsRefusedBeforeAnyIsBuilt) {
  auto ranks = [](int64_t n) {
    std::string body = R"({"ranks": [)";
    for (int64_t i = 0; i < n; ++i) absl::StrAppend(&body, i == 0 ? "" : ",", "{}");
    return body + "]}";
  };
  v1::HeartbeatRequest beat;
  // The root object and the array are values too.
  ASSERT_TRUE(ParseJsonBody(ranks(kMaxRequestElements - 2), &beat).ok());
  EXPECT_EQ(beat.ranks_size(), kMaxRequestElements - 2);
  const absl::Status s = ParseJsonBody(ranks(kMaxRequestElements - 1), &beat);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "request body (JSON): more than 262144 values (objects, arrays, strings, "
            "numbers...); a request body holds at most 262144");
  EXPECT_EQ(beat.ranks_size(), 0);  // cleared
}

}  // namespace
}  // namespace dhp::api
