// Shard-first construction (DistTrainer::Create from a TensorSource), ranks as threads over real
// Gloo: for TP 1/2/4 and both placements, the re-assembled parameters equal the single-rank
// model of the same seed (CreateModelForSpec) or the same multi-file checkpoint, bit for bit;
// each rank reads only the tensors of its roles, and a text rank only 1/T of the text bytes
// (plus the replicated norms). A checkpoint of another model, or with an integer tensor where a
// parameter belongs, is refused before anything is built.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/model_presets.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/checkpoint_source.h"
#include "worker/model/param_init.h"
#include "worker/model/param_shapes.h"
#include "worker/model/weights.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"
#include "worker/rank/model_init.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

// Counts the bytes of every slice a rank asks for, by tensor name.
class CountingSource : public TensorSource {
 public:
  explicit CountingSource(const TensorSource& inner) : inner_(inner) {}
  std::vector<int64_t> Shape(const std::string& name) const override {
    return inner_.Shape(name);
  }
  bool Has(const std::string& name) const override { return inner_.Has(name); }
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override {
    at::Tensor t = inner_.Slice(name, dim, start, length);
    bytes_[name] += t.numel() * static_cast<int64_t>(t.element_size());
    return t;
  }
  const std::map<std::string, int64_t>& bytes() const { return bytes_; }

 private:
  const TensorSource& inner_;
  mutable std::map<std::string, int64_t> bytes_;
};

struct RankRead {
  bool vision = false, text = false;
  std::map<std::string, int64_t> bytes;
  DistTrainer::NamedTensors full;  // re-assembled parameters of the rank's roles
};

// Builds every rank of `layout` from `source` and returns what each read and re-assembles.
std::vector<RankRead> BuildAll(const comm::Layout& layout, const TensorSource& source) {
  std::vector<RankRead> out(layout.WorldSize());
  comm::InMemoryKvClient kv;
  comm::RunRanks(layout.WorldSize(), [&](int rank) {
    comm::ProcessGroupsOptions po;
    po.arrival_timeout = po.store_timeout = po.collective_timeout = std::chrono::seconds(60);
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, po);
    ASSERT_TRUE(comms.ok()) << comms.status();
    CountingSource counting(source);
    absl::StatusOr<std::unique_ptr<DistTrainer>> t =
        DistTrainer::Create(Tiny(), counting, *comms->groups, comms->handoff.get(), {});
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<DistTrainer::NamedTensors> full = (*t)->FullParameters();
    ASSERT_TRUE(full.ok()) << full.status();
    const comm::ProcessGroups& g = *comms->groups;
    out[rank] = {g.vision_coord().has_value(), g.text_coord().has_value(), counting.bytes(),
                 *std::move(full)};
  });
  return out;
}

int64_t Bytes(const std::map<std::string, int64_t>& m, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& [name, b] : m) n += name.rfind(prefix, 0) == 0 ? b : 0;
  return n;
}

// Every rank's re-assembled tensors equal the reference's, exactly; each stage is covered.
void ExpectEqualsReference(const std::vector<RankRead>& ranks,
                           const std::map<std::string, at::Tensor>& ref) {
  std::set<std::string> covered;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& [name, t] : ranks[r].full) {
      ASSERT_EQ(ref.count(name), 1u) << name;
      EXPECT_TRUE(at::equal(t, ref.at(name))) << "rank " << r << " " << name;
      covered.insert(name);
    }
  }
  EXPECT_EQ(covered.size(), ref.size());
}

comm::Layout MakeLayout(int sv, int tt, comm::Placement placement) {
  comm::Layout l;
  l.vision_degree = sv;
  l.text_degree = tt;
  l.placement = placement;
  return l;
}

std::map<std::string, at::Tensor> SingleRankReference(uint64_t seed) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_training()->set_seed(seed);
  absl::StatusOr<Qwen2_5_VL> model =
      CreateModelForSpec(spec, Tiny(), "", at::Device(at::kCPU), nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  std::map<std::string, at::Tensor> ref;
  for (const auto& item : (*model)->named_parameters()) ref[item.key()] = item.value().detach();
  return ref;
}

TEST(ShardFirstTest, InitialisedShardsEqualTheSingleRankModelForEveryLayout) {
  const std::map<std::string, at::Tensor> ref = SingleRankReference(11);
  InitTensorSource source(QwenParamShapes(Tiny()), 11, 0.02);
  for (const comm::Layout& layout :
       {MakeLayout(1, 1, comm::Placement::kCollocated),
        MakeLayout(2, 2, comm::Placement::kCollocated),
        MakeLayout(2, 4, comm::Placement::kCollocated),
        MakeLayout(2, 4, comm::Placement::kSeparate)}) {
    SCOPED_TRACE(layout.DebugString());
    const std::vector<RankRead> ranks = BuildAll(layout, source);
    ExpectEqualsReference(ranks, ref);
    int64_t text_total = 0;
    for (const ParamShape& p : TextParamShapes(Tiny().text)) {
      int64_t n = 4;
      for (int64_t d : p.shape) n *= d;
      text_total += n;
    }
    for (const RankRead& r : ranks) {
      // Only the roles' tensors are read.
      EXPECT_EQ(Bytes(r.bytes, "visual.") > 0, r.vision);
      EXPECT_EQ(Bytes(r.bytes, "model.") > 0, r.text);
      if (!r.text) continue;
      // 1/T of the text bytes, plus the replicated norms (and, at T = 4 with 2 KV heads, the
      // replicated k/v heads): at most 1/T + 12% of the whole text stage of the tiny model.
      const double share = double(Bytes(r.bytes, "model.") + Bytes(r.bytes, "lm_head.")) /
                           text_total;
      EXPECT_LT(share, 1.0 / layout.text_degree + 0.12) << share;
      EXPECT_GT(share, 1.0 / layout.text_degree - 0.01) << share;
    }
  }
}

TEST(ShardFirstTest, AMultiFileCheckpointLoadsIntoEveryTpLayoutUnchanged) {
  const std::map<std::string, at::Tensor> ref = SingleRankReference(12);
  const std::string dir = testing::TempDir() + "/shard_first_ckpt";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  // Two shards: the vision tower in one, the text stage in the other, as HF splits them.
  NamedTensors a, b;
  {
    std::ofstream index(dir + "/model.safetensors.index.json");
    index << "{\"metadata\": {}, \"weight_map\": {";
    bool first = true;
    for (const auto& [name, t] : ref) {
      const bool vision = name.rfind("visual.", 0) == 0;
      (vision ? a : b).emplace_back(name, t.to(at::kBFloat16));
      index << (first ? "" : ", ") << "\"" << name << "\": \""
            << (vision ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors")
            << "\"";
      first = false;
    }
    index << "}}";
  }
  ASSERT_TRUE(SaveWeights(dir + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(SaveWeights(dir + "/model-00002-of-00002.safetensors", b).ok());
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE(CheckCheckpointCovers(**ckpt, QwenParamShapes(Tiny())).ok());
  CheckpointTensorSource source(*std::move(ckpt), at::TensorOptions().dtype(at::kFloat));
  std::map<std::string, at::Tensor> stored;  // the bf16 values, widened as the ranks do
  for (const auto& [name, t] : ref) stored[name] = t.to(at::kBFloat16).to(at::kFloat);
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(tp);
    ExpectEqualsReference(BuildAll(MakeLayout(2, tp, comm::Placement::kCollocated), source),
                          stored);
  }
}

TEST(ShardFirstTest, ACheckpointOfAnotherModelIsRefusedNamingTheTensors) {
  const std::string dir = testing::TempDir() + "/shard_first_bad";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  NamedTensors t = {{"model.embed_tokens.weight", at::zeros({3, 4})},
                    {"extra.weight", at::zeros({2})}};
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors", t).ok());
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  absl::Status s = CheckCheckpointCovers(**ckpt, QwenParamShapes(Tiny()));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
  EXPECT_NE(s.message().find("extra.weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("model.embed_tokens.weight: checkpoint [3, 4]"), std::string::npos)
      << s;
}

TEST(ShardFirstTest, AnIntegerTensorWhereAParameterBelongsIsRefusedBeforeAnythingIsBuilt) {
  const std::string dir = testing::TempDir() + "/shard_first_int";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  const InitTensorSource init(QwenParamShapes(Tiny()), 13, 0.02);
  NamedTensors tensors;  // the tiny model, its token embedding stored as I64 (as token ids are)
  for (const ParamShape& p : QwenParamShapes(Tiny())) {
    const at::Tensor t = init.Whole(p.name);
    tensors.emplace_back(p.name, p.name == "model.embed_tokens.weight" ? t.to(at::kLong) : t);
  }
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors", tensors).ok());
  const std::string problem = "checkpoint does not match the model: 1 of another dtype "
                              "(model.embed_tokens.weight: stored as I64); a parameter must be "
                              "F32, F16 or BF16";
  v1::JobSpec spec;
  spec.mutable_model()->set_weights_path(dir);
  std::vector<std::string> notes;
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      CreateModelSource(spec, Tiny(), "", at::TensorOptions().dtype(at::kFloat), &notes);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source.status().message(), "model.weights_path " + dir + ": " + problem);
  EXPECT_TRUE(notes.empty());  // no source, so no rank reads or builds anything
  // The single-rank load (dhp-train) refuses it the same way.
  absl::StatusOr<Qwen2_5_VL> model =
      CreateModelForSpec(spec, Tiny(), "", at::Device(at::kCPU), &notes);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), "model.weights_path " + dir + ": " + problem);
  EXPECT_TRUE(notes.empty());
  // A source made without the check still never converts it; the float tensors read as before.
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  CheckpointTensorSource unchecked(*std::move(ckpt), at::TensorOptions().dtype(at::kFloat));
  try {
    unchecked.Slice("model.embed_tokens.weight", 0, 0, 2);
    ADD_FAILURE() << "an I64 tensor was converted into a parameter";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), "model.embed_tokens.weight: stored as I64; a parameter must be F32, F16 "
                       "or BF16");
  }
  EXPECT_TRUE(at::equal(unchecked.Whole("model.norm.weight"), init.Whole("model.norm.weight")));
}

}  // namespace
}  // namespace dhp
