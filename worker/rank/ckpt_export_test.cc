// ExportCheckpoint against the distributed trainer itself: for several layouts (vision SP and
// vision TP, text TP 2 and 4 (replicated KV heads), data parallelism, collocated and separate),
// ranks as threads over real Gloo build the tiny model, train one step, gather their full
// parameters with the trainer's own collectives (DistTrainer::FullParameters) and write their
// State() as checkpoint shards with a manifest, as dhp-rank and the controller do. The export of
// those shards must equal the gathered parameters bit for bit. Then the errors: no manifest, a
// corrupt shard, another layout's spec, no spec at all; and the dtype conversion.
#include "worker/rank/ckpt_export.h"

#include <ATen/ATen.h>
#include <ftw.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_layout.h"
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
#include "worker/rank/dist_step.h"
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

// rm -rf `dir`. Not std::filesystem::remove_all: in a binary linked with the PyPI wheel's
// LibTorch, that symbol binds to the copy libtorch.so exports, which crashes (a call through a
// null pointer; seen with torch 2.11.0+cu130).
void RemoveTree(const std::string& dir) {
  nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
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
    comm::ProcessGroupsOptions po;
    po.arrival_timeout = po.store_timeout = std::chrono::seconds(60);
    po.collective_timeout = std::chrono::seconds(120);
    absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
        comm::ProcessGroups::Create(kv, layout, rank, po);
    ASSERT_TRUE(groups.ok()) << groups.status();
    comm::GroupSpec all{kHandoffGroup, std::vector<int>(world)};
    std::iota(all.world_ranks.begin(), all.world_ranks.end(), 0);
    absl::StatusOr<std::unique_ptr<comm::Communicator>> handoff =
        comm::CreateCommunicator(kv, all, rank, po, &(*groups)->stats());
    ASSERT_TRUE(handoff.ok()) << handoff.status();
    absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
        DistTrainer::Create(Tiny(), models[rank], **groups, handoff->get(), options);
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
    absl::StatusOr<ckpt::WrittenShard> written = ckpt::WriteTensorShard(
        dir, absl::StrFormat("rank-%05d.safetensors", rank), *state, meta.ToMetadata());
    ASSERT_TRUE(written.ok()) << written.status();
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, t] : *params) full.emplace(name, t);
    v1::CheckpointShard* s = manifest.add_shards();
    s->set_rank(rank);
    s->set_file(written->info.file);
    s->set_size_bytes(written->info.size_bytes);
    s->set_crc32c(written->info.crc32c);
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

}  // namespace
}  // namespace dhp
