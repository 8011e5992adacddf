// ExportCheckpoint against the distributed trainer itself: for several layouts (vision SP and
// vision TP, text TP 2 and 4 (replicated KV heads), data parallelism, collocated and separate),
// ranks as threads over real Gloo build the tiny model, train one step, gather their full
// parameters with the trainer's own collectives (DistTrainer::FullParameters) and write their
// State() as checkpoint shards with a manifest, as dhp-rank and the controller do. The export of
// those shards must equal the gathered parameters bit for bit. Then the errors: no manifest, a
// corrupt shard, another layout's spec, no spec at all; and the dtype conversion. Then the
// Hugging Face directory export of the same checkpoint (hf_export.h): shards under the size limit
// with their index, a tensor larger than the limit alone in its shard, config.json from the preset
// or copied from a model directory with its tokenizer files, a non-empty OUT_DIR refused, and
// nothing left behind when writing fails.
#include "worker/model/param_init.h"
#include "worker/rank/ckpt_export.h"

#include <ATen/ATen.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_layout.h"
#include "common/remove_tree.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "common/proto_yaml.h"
#include "common/spec_validate.h"
#include "dhp/v1/job.pb.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/layers.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/safetensors.h"
#include "worker/model/weights.h"
#include "worker/model/hf_config.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"
#include "worker/rank/hf_export.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

struct LayoutCase {
  std::string name;
  int sv, tt, dp;
  bool separate = false;
  bool vision_tp = false;
};

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/ckpt_export_test";
}

v1::JobSpec SpecFor(const LayoutCase& c) {
  const std::string yaml = absl::StrFormat(
      R"(name: export-test
model: {preset: tiny}
vision: {parallelism: %s, degree: %d}
text: {parallelism: tensor, degree: %d}
data_parallel_size: %d
placement: %s
training: {batch_size: %d, max_steps: 1}
data:
  datasets: [shapes]
  registry: {shapes: {annotation_path: shapes/train.jsonl, image_root: shapes}}
checkpoint: {directory: export-test}
)",
      c.vision_tp ? "tensor" : "sequence", c.sv, c.tt, c.dp, c.separate ? "separate" : "collocate",
      2 * c.dp);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(yaml, {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

Qwen2_5_VL MakeModel() {
  at::manual_seed(7);
  Qwen2_5_VL m(Tiny());
  InitQwenWeights(*m, 0.05);
  return m;
}

PackedBatch MakeBatch(const std::vector<GridThw>& grids, int64_t seed) {
  absl::StatusOr<PackedBatch> b = MakePositionedSyntheticBatch(Tiny(), grids, seed);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : PackedBatch{};
}

// Trains one step of `c` as threads, writes every rank's State() under `dir` with the metadata
// dhp-rank writes (dhp.spec only when `record_spec`) and the manifest; returns the full
// parameters the ranks gathered by collectives.
std::map<std::string, at::Tensor> WriteCheckpoint(const LayoutCase& c, const std::string& dir,
                                                  bool record_spec) {
  at::set_num_threads(1);
  RemoveTree(dir);
  const v1::JobSpec spec = SpecFor(c);
  const comm::Layout layout = LayoutForSpec(spec);
  const int world = layout.WorldSize();
  std::vector<PackedBatch> batches;
  for (int d = 0; d < c.dp; ++d) batches.push_back(MakeBatch({{1, 4, 6}, {1, 8, 4}}, d));
  std::vector<Qwen2_5_VL> models;
  for (int r = 0; r < world; ++r) models.push_back(MakeModel());
  DistTrainerOptions options;
  options.optimizer.weight_decay = 0.1;
  options.schedule.peak = 1e-3;
  options.schedule.warmup_steps = 0;
  options.schedule.max_steps = 1;

  std::mutex mu;  // guards the two below
  std::map<std::string, at::Tensor> full;
  v1::Checkpoint manifest;
  manifest.set_job_id("j-export");
  manifest.set_step(1);
  manifest.set_world_size(world);
  manifest.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  comm::InMemoryKvClient kv;
  comm::RunRanks(world, [&](int rank) {
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, TestGroupOptions());
    ASSERT_TRUE(comms.ok()) << comms.status();
    absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
        DistTrainer::Create(Tiny(), models[rank], *comms->groups, comms->handoff.get(), options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_TRUE((*trainer)->Step(batches).ok());
    absl::StatusOr<DistTrainer::NamedTensors> params = (*trainer)->FullParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    absl::StatusOr<DistTrainer::NamedTensors> state = (*trainer)->State();
    ASSERT_TRUE(state.ok()) << state.status();
    ckpt::RankStateMeta meta;
    meta.job_id = "j-export";
    meta.attempt = 1;
    meta.step = 1;
    meta.world_size = world;
    meta.world_rank = rank;
    meta.layout = layout.DebugString();
    if (record_spec) meta.spec_json = ProtoToJson(spec);
    absl::StatusOr<v1::CheckpointShard> shard = WriteRankStateShard(dir, meta, *state);
    ASSERT_TRUE(shard.ok()) << shard.status();
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, t] : *params) full.emplace(name, t);
    *manifest.add_shards() = *shard;
  });
  manifest.set_path(dir);
  std::ofstream(dir + "/manifest.json") << ProtoToJson(manifest, /*pretty=*/true);
  return full;
}

std::map<std::string, at::Tensor> ReadAll(const std::string& path,
                                          std::map<std::string, std::string>* metadata) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  std::map<std::string, at::Tensor> out;
  if (!f.ok()) return out;
  for (const auto& [name, info] : (*f)->tensors()) out[name] = ReadTensor(**f, info);
  if (metadata != nullptr) *metadata = (*f)->metadata();
  return out;
}

class CkptExportTest : public testing::TestWithParam<LayoutCase> {};

TEST_P(CkptExportTest, ExportEqualsTheGatheredParameters) {
  const LayoutCase c = GetParam();
  const std::string dir = Root() + "/" + c.name;
  const std::map<std::string, at::Tensor> full = WriteCheckpoint(c, dir, /*record_spec=*/true);
  // Every parameter of the single-rank model was gathered (both stages).
  ASSERT_EQ(full.size(), MakeModel()->named_parameters().size());

  CheckpointExportOptions o;
  o.checkpoint_dir = dir;
  o.out_path = dir + ".safetensors";
  absl::StatusOr<CheckpointExportResult> r = ExportCheckpoint(o);  // the spec from dhp.spec
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step, 1);
  EXPECT_EQ(r->job_id, "j-export");
  EXPECT_EQ(r->model, "tiny");
  EXPECT_EQ(r->layout, LayoutForSpec(SpecFor(c)).DebugString());
  EXPECT_EQ(r->tensors, static_cast<int64_t>(full.size()));
  EXPECT_EQ(r->bytes, static_cast<int64_t>(std::filesystem::file_size(o.out_path)));
  std::map<std::string, std::string> metadata;
  const std::map<std::string, at::Tensor> exported = ReadAll(o.out_path, &metadata);
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata[ckpt::rank_state_key::kStep], "1");
  EXPECT_EQ(metadata[ckpt::rank_state_key::kJobId], "j-export");
  EXPECT_EQ(metadata[ckpt::rank_state_key::kModel], "tiny");
  EXPECT_EQ(metadata[ckpt::rank_state_key::kLayout], r->layout);
  ASSERT_EQ(exported.size(), full.size());
  int64_t elements = 0;
  for (const auto& [name, t] : full) {
    auto it = exported.find(name);
    ASSERT_NE(it, exported.end()) << name;
    EXPECT_EQ(it->second.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(it->second, t.cpu())) << name;
    elements += t.numel();
  }
  EXPECT_EQ(r->elements, elements);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CkptExportTest,
    testing::Values(LayoutCase{"sp2_tp2", 2, 2, 1},
                    LayoutCase{"vtp2_tp4_separate", 2, 4, 1, /*separate=*/true, /*vision_tp=*/true},
                    LayoutCase{"sp2_tp1_dp2", 2, 1, 2},
                    LayoutCase{"vtp4_tp2", 4, 2, 1, false, true}),
    [](const testing::TestParamInfo<LayoutCase>& info) { return info.param.name; });

class CkptExportErrorsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    full_ = new std::map<std::string, at::Tensor>(
        WriteCheckpoint(Case(), Dir(), /*record_spec=*/false));
  }
  static void TearDownTestSuite() { delete full_; }
  static LayoutCase Case() { return {"errors", 2, 2, 1}; }
  static std::string Dir() { return Root() + "/errors"; }
  static CheckpointExportOptions Options() {
    CheckpointExportOptions o;
    o.checkpoint_dir = Dir();
    o.out_path = Root() + "/errors.safetensors";
    o.spec = SpecFor(Case());
    return o;
  }
  static std::map<std::string, at::Tensor>* full_;
};
std::map<std::string, at::Tensor>* CkptExportErrorsTest::full_ = nullptr;

TEST_F(CkptExportErrorsTest, GivenSpecAndDtypeConversion) {
  CheckpointExportOptions o = Options();
  o.dtype = at::kBFloat16;
  absl::StatusOr<CheckpointExportResult> r = ExportCheckpoint(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::map<std::string, at::Tensor> exported = ReadAll(o.out_path, nullptr);
  ASSERT_EQ(exported.size(), full_->size());
  for (const auto& [name, t] : *full_) {
    ASSERT_EQ(exported.at(name).scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(exported.at(name), t.to(at::kBFloat16))) << name;
  }
}

TEST_F(CkptExportErrorsTest, WithoutASpecTheShardsMustRecordOne) {
  CheckpointExportOptions o = Options();
  o.out_path = Root() + "/no-spec.safetensors";
  o.spec.reset();
  absl::StatusOr<CheckpointExportResult> r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            Dir() +
                "/rank-00000.safetensors has no dhp.spec metadata (written by an older "
                "dhp-rank): give the job's spec (dhp-ckpt export --spec FILE)");
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

TEST_F(CkptExportErrorsTest, AnotherLayoutsSpecIsRefused) {
  CheckpointExportOptions o = Options();
  o.spec = SpecFor({"other", 2, 1, 1});
  absl::StatusOr<CheckpointExportResult> r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), Dir() + "/rank-00000.safetensors was written by layout \"" +
                                      LayoutForSpec(SpecFor(Case())).DebugString() +
                                      "\"; the spec's layout is \"" +
                                      LayoutForSpec(*o.spec).DebugString() + "\"");
}

TEST_F(CkptExportErrorsTest, MissingManifestAndCorruptShard) {
  const std::string copy = Root() + "/errors-copy";
  RemoveTree(copy);
  std::filesystem::copy(Dir(), copy);
  CheckpointExportOptions o = Options();
  o.checkpoint_dir = copy;
  o.out_path = Root() + "/corrupt.safetensors";
  // A flipped byte in rank 1's shard: the checksum catches it before anything is parsed.
  {
    std::fstream f(copy + "/rank-00001.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    const char b = static_cast<char>(f.get() ^ 0x10);
    f.seekp(-3, std::ios::end);
    f.put(b);
  }
  absl::StatusOr<CheckpointExportResult> r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("rank-00001.safetensors: checksum mismatch"),
            std::string::npos)
      << r.status();
  std::filesystem::remove(copy + "/manifest.json");
  r = ExportCheckpoint(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            copy +
                "/manifest.json is missing: the controller writes it once every rank has "
                "reported its shard; export a COMPLETE checkpoint (dhpctl checkpoints JOB)");
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

// ---- the Hugging Face directory (hf_export.h) ----------------------------------------------

TEST(HfExportPlanTest, ShardsFillUpToTheLimitAndBigTensorsStandAlone) {
  using Shards = std::vector<std::vector<size_t>>;
  EXPECT_EQ(PlanShards({4, 4, 4}, 100), (Shards{{0, 1, 2}}));
  EXPECT_EQ(PlanShards({4, 4, 4}, 8), (Shards{{0, 1}, {2}}));
  // 20 > 10 gets a shard of its own, wherever it comes; the next tensor starts a new one.
  EXPECT_EQ(PlanShards({3, 20, 3, 3, 5}, 10), (Shards{{0}, {1}, {2, 3}, {4}}));
  EXPECT_EQ(PlanShards({20}, 10), (Shards{{0}}));
  EXPECT_EQ(PlanShards({}, 10), Shards{});
}

TEST(HfExportPlanTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("5GB"), 5000000000);
  EXPECT_EQ(*ParseByteSize("500mb"), 500000000);
  EXPECT_EQ(*ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536);
  EXPECT_EQ(*ParseByteSize("1000"), 1000);
  EXPECT_EQ(*ParseByteSize("10B"), 10);
  for (const char* bad : {"", "GB", "5 TB", "-5GB", "0", "1.5GB", "99999999999999GB"}) {
    absl::StatusOr<int64_t> n = ParseByteSize(bad);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseByteSize("5TB").status().message(),
            "max shard size \"5TB\" is not a positive size such as 5GB, 500MB, 2GiB or 1000000 "
            "(bytes)");
}

// The entries of `dir` (not . and ..), sorted.
std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.insert(name);
    }
    closedir(d);
  }
  return out;
}

// Names in Root() that start with `prefix`: what an export may have left behind.
std::vector<std::string> Leftovers(const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& e : Entries(Root())) {
    if (e.rfind(prefix, 0) == 0) out.push_back(e);
  }
  return out;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HfExportTest : public CkptExportErrorsTest {
 protected:
  static HfExportOptions HfOptions(const std::string& name) {
    HfExportOptions o;
    o.checkpoint = Options();
    o.out_dir = Root() + "/" + name;
    RemoveTree(o.out_dir);
    return o;
  }
};

TEST_F(HfExportTest, ShardsUnderTheLimitWithTheirIndex) {
  // 40 KB: the embedding and lm_head (1024 x 64 fp32 = 256 KiB each) and more are over it.
  HfExportOptions o = HfOptions("hf-sharded");
  o.max_shard_bytes = 40000;
  absl::StatusOr<HfExportResult> r = ExportHfDirectory(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->indexed);
  EXPECT_EQ(r->config_source, "preset tiny");
  EXPECT_EQ(r->torch_dtype, "float32");
  EXPECT_TRUE(r->copied.empty());
  EXPECT_EQ(r->checkpoint.tensors, static_cast<int64_t>(full_->size()));
  const size_t n = r->weight_files.size();
  ASSERT_GT(n, 3u);
  std::set<std::string> want = {"config.json", "model.safetensors.index.json"};
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(r->weight_files[i], absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, n));
    want.insert(r->weight_files[i]);
  }
  EXPECT_EQ(Entries(o.out_dir), want);
  EXPECT_EQ(Leftovers("hf-sharded.tmp-"), std::vector<std::string>{});

  // The index: total_size is the tensor bytes; weight_map names every parameter once.
  const nlohmann::json index =
      nlohmann::json::parse(ReadText(o.out_dir + "/model.safetensors.index.json"));
  int64_t total = 0, file_bytes = 0;
  for (const auto& [name, t] : *full_) total += t.numel() * 4;
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  ASSERT_EQ(index["weight_map"].size(), full_->size());

  // Each shard: its tensors are the index's, at most the limit unless it holds one tensor, and
  // (greedy, as transformers) the next shard's first tensor would not have fitted.
  std::vector<int64_t> shard_bytes, first_bytes;
  std::map<std::string, at::Tensor> exported;
  int alone_over_limit = 0;
  for (const std::string& file : r->weight_files) {
    std::map<std::string, std::string> metadata;
    const std::map<std::string, at::Tensor> part = ReadAll(o.out_dir + "/" + file, &metadata);
    EXPECT_EQ(metadata["format"], "pt");
    EXPECT_EQ(metadata[ckpt::rank_state_key::kJobId], "j-export");
    int64_t bytes = 0;
    for (const auto& [name, t] : part) {
      EXPECT_EQ(index["weight_map"][name], file) << name;
      bytes += t.numel() * t.element_size();
      exported[name] = t;
    }
    EXPECT_TRUE(bytes <= o.max_shard_bytes || part.size() == 1) << file << ": " << bytes;
    alone_over_limit += bytes > o.max_shard_bytes;
    shard_bytes.push_back(bytes);
    first_bytes.push_back(part.begin()->second.numel() * 4);
    file_bytes += static_cast<int64_t>(std::filesystem::file_size(o.out_dir + "/" + file));
  }
  // Every tensor over the limit (the embedding, lm_head, the patch embedding, qkv, ...) alone.
  int over_limit = 0;
  for (const auto& [name, t] : *full_) over_limit += t.numel() * 4 > o.max_shard_bytes;
  EXPECT_GE(over_limit, 2);
  EXPECT_EQ(alone_over_limit, over_limit);
  for (size_t i = 0; i + 1 < n; ++i) {
    EXPECT_GT(shard_bytes[i] + first_bytes[i + 1], o.max_shard_bytes) << "shard " << i + 1;
  }
  EXPECT_EQ(r->checkpoint.bytes, file_bytes);
  ASSERT_EQ(exported.size(), full_->size());
  for (const auto& [name, t] : *full_) {
    EXPECT_TRUE(at::equal(exported.at(name), t)) << name;
  }

  // config.json describes the tiny preset, in fp32.
  absl::StatusOr<ModelPreset> config = LoadHfConfig(o.out_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(DiffModelPresets(*config, Tiny()), std::vector<std::string>{});
  EXPECT_EQ(nlohmann::json::parse(ReadText(o.out_dir + "/config.json"))["torch_dtype"],
            "float32");
}

TEST_F(HfExportTest, OneModelSafetensorsWhenItFitsInBf16) {
  HfExportOptions o = HfOptions("hf-single");
  o.checkpoint.dtype = at::kBFloat16;
  ASSERT_TRUE(std::filesystem::create_directory(o.out_dir));  // an empty directory is fine
  absl::StatusOr<HfExportResult> r = ExportHfDirectory(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->indexed);
  EXPECT_EQ(r->weight_files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(Entries(o.out_dir), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(r->torch_dtype, "bfloat16");
  EXPECT_EQ(nlohmann::json::parse(ReadText(o.out_dir + "/config.json"))["torch_dtype"],
            "bfloat16");
  const std::map<std::string, at::Tensor> exported =
      ReadAll(o.out_dir + "/model.safetensors", nullptr);
  ASSERT_EQ(exported.size(), full_->size());
  for (const auto& [name, t] : *full_) {
    EXPECT_TRUE(at::equal(exported.at(name), t.to(at::kBFloat16))) << name;
  }
}

TEST_F(HfExportTest, ConfigAndTokenizerFilesFromTheModelDirectory) {
  // A model directory as transformers 5 saves it ("dtype", extra keys) with tokenizer files.
  const std::string model = Root() + "/hf-model-dir";
  RemoveTree(model);
  ASSERT_TRUE(std::filesystem::create_directory(model));
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(HfConfigJson(Tiny(), "float32"));
  config.erase("torch_dtype");
  config["dtype"] = "float32";
  config["dhp_test_key"] = "kept";
  std::ofstream(model + "/config.json") << config.dump(1);
  const std::map<std::string, std::string> files = {
      {"tokenizer.json", "{\"tok\": 1}\n"},
      {"merges.txt", std::string("a b\nc d\n\0x", 10)},
      {"preprocessor_config.json", "{}"},
      {"chat_template.jinja", "{{ messages }}"}};
  for (const auto& [name, text] : files) std::ofstream(model + "/" + name) << text;
  std::ofstream(model + "/notes.txt") << "not a tokenizer file";

  HfExportOptions o = HfOptions("hf-from-model-dir");
  o.checkpoint.spec->mutable_model()->set_weights_path(model);
  o.checkpoint.dtype = at::kBFloat16;
  absl::StatusOr<HfExportResult> r = ExportHfDirectory(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config_source, model + "/config.json");
  EXPECT_EQ(r->copied, (std::vector<std::string>{"tokenizer.json", "merges.txt",
                                                 "preprocessor_config.json",
                                                 "chat_template.jinja"}));
  for (const auto& [name, text] : files) EXPECT_EQ(ReadText(o.out_dir + "/" + name), text) << name;
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/notes.txt"));
  const nlohmann::json written = nlohmann::json::parse(ReadText(o.out_dir + "/config.json"));
  EXPECT_EQ(written["dtype"], "bfloat16");
  EXPECT_EQ(written["torch_dtype"], "bfloat16");
  EXPECT_EQ(written["dhp_test_key"], "kept");
  EXPECT_EQ(written["vision_config"], nlohmann::json::parse(config["vision_config"].dump()));
}

TEST_F(HfExportTest, RefusesANonEmptyOutDir) {
  HfExportOptions o = HfOptions("hf-not-empty");
  ASSERT_TRUE(std::filesystem::create_directory(o.out_dir));
  std::ofstream(o.out_dir + "/keep.txt") << "mine";
  absl::StatusOr<HfExportResult> r = ExportHfDirectory(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            o.out_dir + " is not empty (it holds keep.txt): export into a new or empty "
                        "directory; nothing is overwritten");
  EXPECT_EQ(Entries(o.out_dir), std::set<std::string>{"keep.txt"});
  EXPECT_EQ(ReadText(o.out_dir + "/keep.txt"), "mine");

  o.out_dir = Root() + "/hf-a-file";
  std::ofstream(o.out_dir) << "x";
  r = ExportHfDirectory(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            o.out_dir + " exists and is not a directory: give a new directory for --hf-dir");
  EXPECT_EQ(Leftovers("hf-not-empty.tmp-"), std::vector<std::string>{});
  EXPECT_EQ(Leftovers("hf-a-file.tmp-"), std::vector<std::string>{});
}

TEST_F(HfExportTest, NothingLeftBehindWhenWritingFails) {
  // A file size limit of 100 KB (as a full disk would): config.json and the small shards are
  // written, the 256 KiB embedding fails with EFBIG.
  HfExportOptions o = HfOptions("hf-full-disk");
  o.max_shard_bytes = 40000;
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 100000;
  std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::StatusOr<HfExportResult> r = ExportHfDirectory(o);
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("disk full"), std::string::npos) << r.status();
  EXPECT_FALSE(std::filesystem::exists(o.out_dir));
  EXPECT_EQ(Leftovers("hf-full-disk"), std::vector<std::string>{});

  // And a checkpoint that cannot be read: refused before anything is created.
  o.checkpoint.checkpoint_dir = Root() + "/no-such-checkpoint";
  r = ExportHfDirectory(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_EQ(Leftovers("hf-full-disk"), std::vector<std::string>{});
}

}  // namespace
}  // namespace dhp
