#include "worker/ckpt/rank_state_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace dhp::ckpt {
namespace {

using Metadata = std::map<std::string, std::string>;

RankStateMeta Sample() {
  RankStateMeta m;
  m.job_id = "j-0123";
  m.attempt = 2;
  m.step = 50;
  m.world_size = 4;
  m.world_rank = 3;
  m.layout = "vision 2 (sp) x text 2 x dp 1, collocated";
  m.data_epoch = 1;
  m.data_offset = 7;
  m.spec_json = R"({"name":"tiny-cpu"})";
  return m;
}

void ExpectEqual(const RankStateMeta& a, const RankStateMeta& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.world_rank, b.world_rank);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.data_epoch, b.data_epoch);
  EXPECT_EQ(a.data_offset, b.data_offset);
  EXPECT_EQ(a.spec_json, b.spec_json);
}

// The keys and values on disk: existing checkpoints, dhp-ckpt export and
// tests/multiprocess_parity_test.py read these names, so they are spelled out here.
TEST(RankStateFormatTest, WritesTheDocumentedKeys) {
  const Metadata expected = {
      {"dhp.format", "dhp-rank-state/1"},
      {"dhp.job_id", "j-0123"},
      {"dhp.attempt", "2"},
      {"dhp.step", "50"},
      {"dhp.world_size", "4"},
      {"dhp.world_rank", "3"},
      {"dhp.layout", "vision 2 (sp) x text 2 x dp 1, collocated"},
      {"dhp.data.epoch", "1"},
      {"dhp.data.offset", "7"},
      {"dhp.spec", R"({"name":"tiny-cpu"})"},
  };
  EXPECT_EQ(Sample().ToMetadata(), expected);
  EXPECT_EQ(Sample().ExportMetadata("tiny"),
            (Metadata{{"dhp.job_id", "j-0123"},
                      {"dhp.step", "50"},
                      {"dhp.model", "tiny"},
                      {"dhp.layout", "vision 2 (sp) x text 2 x dp 1, collocated"}}));
}

TEST(RankStateFormatTest, RoundTripsEveryField) {
  RankStateMeta big = Sample();
  big.step = int64_t{1} << 40;
  big.data_epoch = int64_t{3} << 33;
  big.data_offset = (int64_t{1} << 62) + 5;
  big.world_size = 1024;
  big.world_rank = 1023;
  for (const RankStateMeta& m : {Sample(), big, RankStateMeta{}}) {
    absl::StatusOr<RankStateMeta> back = RankStateMeta::FromMetadata(m.ToMetadata(), "f");
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectEqual(*back, m);
  }
}

TEST(RankStateFormatTest, TheSpecIsOptionalAndUnknownKeysAreIgnored) {
  RankStateMeta m = Sample();
  m.spec_json.clear();
  Metadata md = m.ToMetadata();
  EXPECT_EQ(md.count("dhp.spec"), 0u);  // a shard of a dhp-rank older than dhp.spec
  md["dhp.something_new"] = "x";
  md["format"] = "pt";
  absl::StatusOr<RankStateMeta> back = RankStateMeta::FromMetadata(md, "f");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectEqual(*back, m);
}

TEST(RankStateFormatTest, AnotherFormatIsRefusedNamingFileKeyAndValue) {
  Metadata md = Sample().ToMetadata();
  md["dhp.format"] = "dhp-rank-state/2";
  absl::StatusOr<RankStateMeta> r =
      RankStateMeta::FromMetadata(md, "/ckpt/rank-00003.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "/ckpt/rank-00003.safetensors is not a dhp rank state: metadata dhp.format is "
            "\"dhp-rank-state/2\", expected \"dhp-rank-state/1\"");

  md.erase("dhp.format");
  r = RankStateMeta::FromMetadata(md, "/ckpt/rank-00003.safetensors");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "/ckpt/rank-00003.safetensors is not a dhp rank state: metadata dhp.format is missing");

  // Not a rank state at all (an exported file): the format is what is reported.
  r = RankStateMeta::FromMetadata(Sample().ExportMetadata("tiny"), "out.safetensors");
  EXPECT_THAT(std::string(r.status().message()), testing::HasSubstr("dhp.format is missing"));
}

TEST(RankStateFormatTest, AMissingKeyIsNamed) {
  for (const char* key : {"dhp.job_id", "dhp.attempt", "dhp.step", "dhp.world_size",
                          "dhp.world_rank", "dhp.layout", "dhp.data.epoch", "dhp.data.offset"}) {
    Metadata md = Sample().ToMetadata();
    md.erase(key);
    absl::StatusOr<RankStateMeta> r = RankStateMeta::FromMetadata(md, "/ckpt/r.safetensors");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(r.status().message(),
              std::string("/ckpt/r.safetensors: metadata ") + key + " is missing");
  }
}

TEST(RankStateFormatTest, ANonIntegerIsNamedWithItsValue) {
  for (const auto& [key, value] :
       std::multimap<std::string, std::string>{{"dhp.step", "fifty"},
                                               {"dhp.step", "5.0"},
                                               {"dhp.attempt", ""},
                                               {"dhp.world_size", "4 ranks"},
                                               {"dhp.world_rank", "-"},
                                               {"dhp.world_rank", "99999999999"},  // > int
                                               {"dhp.data.epoch", "0x1"},
                                               {"dhp.data.offset", "1e3"}}) {
    Metadata md = Sample().ToMetadata();
    md[key] = value;
    absl::StatusOr<RankStateMeta> r = RankStateMeta::FromMetadata(md, "/ckpt/r.safetensors");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_EQ(r.status().message(),
              "/ckpt/r.safetensors: metadata " + key + " \"" + value + "\" is not an integer");
  }
}

TEST(RankStateFormatTest, AnotherRanksShardIsRefused) {
  const RankStateMeta m = Sample();  // world rank 3
  EXPECT_TRUE(m.CheckWorldRank(3, "f").ok());
  absl::Status s = m.CheckWorldRank(1, "/ckpt/rank-00001.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "/ckpt/rank-00001.safetensors is not world rank 1's dhp rank state: metadata "
            "dhp.world_rank is 3");
}

TEST(RankStateFormatTest, ShardsOfOneCheckpointAgreeOnStepLayoutAndJob) {
  const RankStateMeta a = Sample();
  RankStateMeta b = Sample();
  b.world_rank = 0;
  b.attempt = 1;  // neither the rank nor the attempt is compared
  EXPECT_TRUE(b.CheckSameCheckpoint("b", a, "a").ok());

  b.step = 49;
  absl::Status s =
      b.CheckSameCheckpoint("/c/rank-00000.safetensors", a, "/c/rank-00003.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "/c/rank-00000.safetensors has dhp.step \"49\", /c/rank-00003.safetensors \"50\"");

  b = Sample();
  b.layout = "vision 1 (sp) x text 4 x dp 1, collocated";
  EXPECT_EQ(b.CheckSameCheckpoint("b", a, "a").message(),
            "b has dhp.layout \"vision 1 (sp) x text 4 x dp 1, collocated\", a \"vision 2 (sp) "
            "x text 2 x dp 1, collocated\"");

  b = Sample();
  b.job_id = "j-other";
  EXPECT_EQ(b.CheckSameCheckpoint("b", a, "a").message(),
            "b has dhp.job_id \"j-other\", a \"j-0123\"");
}

}  // namespace
}  // namespace dhp::ckpt
