#include "common/spec_validate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/model_presets.h"
#include "common/proto_yaml.h"

namespace dhp {
namespace {

// Defaults filled in for omitted fields; the stored spec carries them explicitly.
constexpr int kMaxNameLength = 63;
constexpr double kDefaultLearningRate = 1e-5;
constexpr double kDefaultGradClipNorm = 1.0;
constexpr uint64_t kDefaultSeed = 42;
constexpr int64_t kDefaultMinPixels = 3136;       // 56 x 56, the processor's default
constexpr int64_t kDefaultMaxPixels = 12845056;   // the processor's default
constexpr int32_t kDefaultMaxSeqLen = 8192;
constexpr int32_t kDefaultKeepLatest = 3;
constexpr char kNameRule[] =
    "use 1-63 characters from a-z, 0-9, '-', '_' and '.', starting with a letter or digit";

std::string Quote(const std::string& s) { return "\"" + absl::Utf8SafeCEscape(s) + "\""; }

bool ValidNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

// Collects "field: message" errors in the order the checks run (field order of the spec).
class Errors {
 public:
  void Add(const std::string& field, const std::string& message) {
    list_.push_back(absl::StrCat(field, ": ", message));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(list_, "; "));
  }

 private:
  std::vector<std::string> list_;
};

// True when the name is valid.
bool CheckName(const std::string& name, Errors& errors) {
  if (name.empty()) {
    errors.Add("name", absl::StrCat("is required; ", kNameRule));
    return false;
  }
  bool ok = name.size() <= kMaxNameLength &&
            ((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'));
  for (char c : name) ok = ok && ValidNameChar(c);
  if (!ok) errors.Add("name", absl::StrCat(Quote(name), " is not a valid job name; ", kNameRule));
  return ok;
}

// Checks a stage's degree against a count it must divide ("the 16 attention heads of ...").
void CheckDivides(const std::string& field, int degree, int count, const std::string& what,
                  Errors& errors) {
  if (count % degree != 0) {
    errors.Add(field, absl::StrCat(degree, " does not divide the ", count, " ", what));
  }
}

// A stage's or the reduction's dtype: fp32 or bf16. fp16 would need loss scaling.
void CheckTrainingDtype(const char* field, v1::DType dtype, Errors& errors) {
  if (dtype == v1::DTYPE_FP16) {
    errors.Add(field, "fp16 needs loss scaling, which dhp does not implement; use bf16 or fp32");
  }
}

void NormalizeVision(v1::VisionStageSpec& vision, const ModelPreset* preset, Errors& errors) {
  if (vision.parallelism() == v1::PARALLELISM_UNSPECIFIED) {
    vision.set_parallelism(v1::PARALLELISM_NONE);
  }
  if (!vision.has_degree()) vision.set_degree(1);
  if (!vision.has_zero_stage()) {
    vision.set_zero_stage(vision.parallelism() == v1::PARALLELISM_SEQUENCE ? 1 : 0);
  }
  if (vision.dtype() == v1::DTYPE_UNSPECIFIED) vision.set_dtype(v1::DTYPE_BF16);
  CheckTrainingDtype("vision.dtype", vision.dtype(), errors);

  const int degree = vision.degree();
  if (degree < 1) {
    errors.Add("vision.degree", absl::StrCat(degree, " must be at least 1"));
  } else if (degree > 1 && vision.parallelism() == v1::PARALLELISM_NONE) {
    errors.Add("vision.degree", absl::StrCat(degree, " needs parallelism sequence or tensor "
                                                     "(vision.parallelism is none)"));
  } else if (preset != nullptr && vision.parallelism() != v1::PARALLELISM_NONE) {
    const std::string of = absl::StrCat("of the ", preset->name, " vision encoder");
    CheckDivides("vision.degree", degree, preset->vision.num_heads,
                 absl::StrCat("attention heads ", of), errors);
    if (vision.parallelism() == v1::PARALLELISM_TENSOR) {
      CheckDivides("vision.degree", degree, preset->vision.intermediate_size,
                   absl::StrCat("MLP width (intermediate_size) ", of), errors);
    }
  }
  if (vision.zero_stage() != 0 && vision.zero_stage() != 1) {
    errors.Add("vision.zero_stage", absl::StrCat(vision.zero_stage(),
                                                 " is not supported; dhp implements ZeRO stage "
                                                 "0 or 1"));
  }
}

void NormalizeText(v1::TextStageSpec& text, const ModelPreset* preset, Errors& errors) {
  if (text.parallelism() == v1::PARALLELISM_UNSPECIFIED) {
    text.set_parallelism(v1::PARALLELISM_NONE);
  }
  if (!text.has_degree()) text.set_degree(1);
  if (text.dtype() == v1::DTYPE_UNSPECIFIED) text.set_dtype(v1::DTYPE_BF16);
  CheckTrainingDtype("text.dtype", text.dtype(), errors);

  if (text.parallelism() == v1::PARALLELISM_SEQUENCE) {
    errors.Add("text.parallelism",
               "sequence is not supported for the text stage; use none or tensor");
  }
  const int degree = text.degree();
  if (degree < 1) {
    errors.Add("text.degree", absl::StrCat(degree, " must be at least 1"));
  } else if (degree > 1 && text.parallelism() == v1::PARALLELISM_NONE) {
    errors.Add("text.degree",
               absl::StrCat(degree, " needs parallelism tensor (text.parallelism is none)"));
  } else if (preset != nullptr && text.parallelism() == v1::PARALLELISM_TENSOR) {
    const TextConfig& t = preset->text;
    CheckDivides("text.degree", degree, t.num_heads,
                 absl::StrCat("attention heads of ", preset->name), errors);
    if (t.num_kv_heads % degree != 0 && degree % t.num_kv_heads != 0) {
      errors.Add("text.degree",
                 absl::StrCat(degree, " does not divide the ", t.num_kv_heads, " KV heads of ",
                              preset->name, " and is not a multiple of them"));
    }
    CheckDivides("text.degree", degree, t.intermediate_size,
                 absl::StrCat("MLP width (intermediate_size) of ", preset->name), errors);
  }
}

bool FiniteNonNegative(const std::string& field, double v, Errors& errors) {
  if (!std::isfinite(v)) {
    errors.Add(field, absl::StrCat(v, " must be a finite number"));
    return false;
  }
  if (v < 0) {
    errors.Add(field, absl::StrCat(v, " must not be negative"));
    return false;
  }
  return true;
}

// training.micro_batch_size: default the replica's whole share (no accumulation); otherwise it
// must split the share into whole micro-batches. `batch_ok`: batch_size and data_parallel_size
// are valid (else only the lower bound is checked; their own errors say the rest).
void NormalizeMicroBatch(v1::TrainingSpec& t, int data_parallel_size, bool batch_ok,
                         Errors& errors) {
  const int per_replica = batch_ok ? t.batch_size() / data_parallel_size : 0;
  if (!t.has_micro_batch_size()) {
    if (batch_ok) t.set_micro_batch_size(per_replica);
    return;
  }
  const int micro = t.micro_batch_size();
  if (micro < 1) {
    errors.Add("training.micro_batch_size", absl::StrCat(micro, " must be at least 1"));
  } else if (batch_ok && per_replica % micro != 0) {
    errors.Add("training.micro_batch_size",
               absl::StrCat(micro, " does not divide the ", per_replica,
                            " samples per data-parallel replica (training.batch_size ",
                            t.batch_size(), " / data_parallel_size ", data_parallel_size,
                            "); use a divisor of ", per_replica));
  }
}

void NormalizeTraining(v1::TrainingSpec& t, int data_parallel_size, Errors& errors) {
  // One sample per replica; an invalid data_parallel_size is reported on its own.
  if (!t.has_batch_size()) t.set_batch_size(std::max(data_parallel_size, 1));
  if (!t.has_learning_rate()) t.set_learning_rate(kDefaultLearningRate);
  if (t.schedule() == v1::LR_SCHEDULE_UNSPECIFIED) t.set_schedule(v1::LR_SCHEDULE_COSINE);
  if (!t.has_warmup_steps()) t.set_warmup_steps(0);
  if (!t.has_weight_decay()) t.set_weight_decay(0.0);
  if (!t.has_grad_clip_norm()) t.set_grad_clip_norm(kDefaultGradClipNorm);
  if (!t.has_seed()) t.set_seed(kDefaultSeed);
  if (!t.has_min_learning_rate()) t.set_min_learning_rate(0.0);
  if (t.grad_reduce_dtype() == v1::DTYPE_UNSPECIFIED) t.set_grad_reduce_dtype(v1::DTYPE_FP32);
  CheckTrainingDtype("training.grad_reduce_dtype", t.grad_reduce_dtype(), errors);
  if (t.grad_accum_dtype() == v1::DTYPE_UNSPECIFIED) t.set_grad_accum_dtype(v1::DTYPE_FP32);
  CheckTrainingDtype("training.grad_accum_dtype", t.grad_accum_dtype(), errors);

  bool batch_ok = data_parallel_size >= 1;
  if (t.batch_size() < 1) {
    errors.Add("training.batch_size", absl::StrCat(t.batch_size(), " must be at least 1"));
    batch_ok = false;
  } else if (data_parallel_size >= 1 && t.batch_size() % data_parallel_size != 0) {
    errors.Add("training.batch_size",
               absl::StrCat(t.batch_size(), " is not divisible by data_parallel_size ",
                            data_parallel_size));
    batch_ok = false;
  }
  NormalizeMicroBatch(t, data_parallel_size, batch_ok, errors);
  const bool lr_ok = std::isfinite(t.learning_rate()) && t.learning_rate() > 0;
  if (!lr_ok) {
    errors.Add("training.learning_rate",
               absl::StrCat(t.learning_rate(), " must be positive and finite"));
  }
  if (t.warmup_steps() < 0) {
    errors.Add("training.warmup_steps", absl::StrCat(t.warmup_steps(), " must not be negative"));
  }
  FiniteNonNegative("training.weight_decay", t.weight_decay(), errors);
  FiniteNonNegative("training.grad_clip_norm", t.grad_clip_norm(), errors);

  bool length_ok = true;
  if (t.max_steps() < 0) {
    errors.Add("training.max_steps", absl::StrCat(t.max_steps(), " must not be negative"));
    length_ok = false;
  }
  if (t.epochs() < 0) {
    errors.Add("training.epochs", absl::StrCat(t.epochs(), " must not be negative"));
    length_ok = false;
  }
  if (length_ok && t.max_steps() > 0 && t.epochs() > 0) {
    errors.Add("training", absl::StrCat("set exactly one of max_steps and epochs, not both "
                                        "(max_steps ", t.max_steps(), ", epochs ", t.epochs(),
                                        ")"));
  } else if (length_ok && t.max_steps() == 0 && t.epochs() == 0) {
    errors.Add("training", "set exactly one of max_steps and epochs; neither is set");
  }
  if (FiniteNonNegative("training.min_learning_rate", t.min_learning_rate(), errors) && lr_ok &&
      t.min_learning_rate() > t.learning_rate()) {
    errors.Add("training.min_learning_rate",
               absl::StrCat(t.min_learning_rate(), " exceeds learning_rate ", t.learning_rate()));
  }
}

void NormalizeData(v1::DataSpec& data, Errors& errors) {
  if (!data.has_min_pixels()) data.set_min_pixels(kDefaultMinPixels);
  if (!data.has_max_pixels()) data.set_max_pixels(kDefaultMaxPixels);
  if (!data.has_max_seq_len()) data.set_max_seq_len(kDefaultMaxSeqLen);

  std::set<std::string> registered_sorted;
  for (const auto& [name, source] : data.registry()) registered_sorted.insert(name);
  const std::string registered =
      registered_sorted.empty() ? "none" : absl::StrJoin(registered_sorted, ", ");
  if (data.datasets().empty()) {
    errors.Add("data.datasets", absl::StrCat("at least one dataset is required; registered: ",
                                             registered));
  }
  std::set<std::string> listed;
  for (int i = 0; i < data.datasets_size(); ++i) {
    const std::string& name = data.datasets(i);
    const std::string field = absl::StrCat("data.datasets[", i, "]");
    if (data.registry().count(name) == 0) {
      errors.Add(field, absl::StrCat(Quote(name), " is not in data.registry; registered: ",
                                     registered));
    } else if (!listed.insert(name).second) {
      errors.Add(field, absl::StrCat(Quote(name), " is listed more than once"));
    }
  }
  // Map order is unspecified: visit entries by name so that errors come out in a stable order.
  for (const std::string& name : registered_sorted) {
    v1::DatasetSource& source = (*data.mutable_registry())[name];
    const std::string field = absl::StrCat("data.registry.", name);
    if (name.empty()) errors.Add("data.registry", "dataset names must not be empty");
    if (!source.has_weight()) source.set_weight(1.0);
    if (source.annotation_path().empty()) errors.Add(field + ".annotation_path", "is required");
    if (!(std::isfinite(source.weight()) && source.weight() > 0)) {
      errors.Add(field + ".weight", absl::StrCat(source.weight(), " must be positive"));
    }
  }
  bool pixels_ok = true;
  if (data.min_pixels() < 1) {
    errors.Add("data.min_pixels", absl::StrCat(data.min_pixels(), " must be positive"));
    pixels_ok = false;
  }
  if (data.max_pixels() < 1) {
    errors.Add("data.max_pixels", absl::StrCat(data.max_pixels(), " must be positive"));
    pixels_ok = false;
  }
  if (pixels_ok && data.min_pixels() > data.max_pixels()) {
    errors.Add("data.min_pixels", absl::StrCat(data.min_pixels(), " exceeds data.max_pixels ",
                                               data.max_pixels()));
  }
  if (data.max_seq_len() < 1) {
    errors.Add("data.max_seq_len", absl::StrCat(data.max_seq_len(), " must be positive"));
  }
}

// Lexical normalisation of a '/'-separated path: drops "." and empty parts, resolves "..".
// Returns false when ".." climbs above the start. Absolute paths keep their leading '/'.
bool NormalizePath(const std::string& path, std::vector<std::string>* parts) {
  parts->clear();
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (parts->empty()) return false;
      parts->pop_back();
      continue;
    }
    parts->emplace_back(part);
  }
  return true;
}

void NormalizeCheckpoint(v1::CheckpointSpec& ckpt, const std::string& job_name,
                         const SpecOptions& options, Errors& errors) {
  if (!ckpt.has_keep_latest()) ckpt.set_keep_latest(kDefaultKeepLatest);
  if (!ckpt.has_async_write()) ckpt.set_async_write(true);
  if (ckpt.directory().empty()) ckpt.set_directory(job_name);

  if (ckpt.every_steps() < 0) {
    errors.Add("checkpoint.every_steps",
               absl::StrCat(ckpt.every_steps(), " must not be negative"));
  }
  if (ckpt.keep_latest() < 1) {
    errors.Add("checkpoint.keep_latest",
               absl::StrCat(ckpt.keep_latest(), " must be at least 1"));
  }
  const std::string& dir = ckpt.directory();
  if (dir.empty()) return;  // no valid name either; "name" already carries the error
  const std::string root = options.checkpoint_root;
  const std::string escapes =
      absl::StrCat(Quote(dir), " escapes the checkpoint root",
                   root.empty() ? std::string() : absl::StrCat(" ", root));
  std::vector<std::string> parts;
  if (dir[0] == '/') {
    std::vector<std::string> root_parts;
    if (root.empty() || root[0] != '/') {
      errors.Add("checkpoint.directory",
                 absl::StrCat(Quote(dir), " must be relative to the checkpoint root"));
      return;
    }
    bool inside = NormalizePath(dir, &parts) && NormalizePath(root, &root_parts) &&
                  parts.size() >= root_parts.size() &&
                  std::equal(root_parts.begin(), root_parts.end(), parts.begin());
    if (!inside) {
      errors.Add("checkpoint.directory", escapes);
      return;
    }
    parts.erase(parts.begin(), parts.begin() + root_parts.size());
  } else if (!NormalizePath(dir, &parts)) {
    errors.Add("checkpoint.directory", escapes);
    return;
  }
  if (parts.empty()) {
    errors.Add("checkpoint.directory",
               absl::StrCat(Quote(dir), " is the checkpoint root itself; name a subdirectory"));
    return;
  }
  ckpt.set_directory(absl::StrJoin(parts, "/"));
}

// restart.*_timeout_s and preemption_grace_s: defaults, at least 1 s, and a collective timeout
// below the stall timeout (else a dead peer is found by the stall check, as a stall).
void NormalizeTimeouts(v1::RestartSpec& r, Errors& errors) {
  if (!r.has_stall_timeout_s()) r.set_stall_timeout_s(600);
  if (!r.has_launch_timeout_s()) r.set_launch_timeout_s(120);
  if (!r.has_collective_timeout_s()) {
    r.set_collective_timeout_s(std::max(1, std::min(300, r.stall_timeout_s() - 1)));
  }
  if (!r.has_preemption_grace_s()) r.set_preemption_grace_s(120);
  const std::pair<const char*, int32_t> fields[] = {
      {"restart.stall_timeout_s", r.stall_timeout_s()},
      {"restart.launch_timeout_s", r.launch_timeout_s()},
      {"restart.collective_timeout_s", r.collective_timeout_s()},
      {"restart.preemption_grace_s", r.preemption_grace_s()}};
  for (const auto& [field, value] : fields) {
    if (value < 1) errors.Add(field, absl::StrCat(value, " must be at least 1 (seconds)"));
  }
  if (r.stall_timeout_s() >= 1 && r.collective_timeout_s() >= r.stall_timeout_s()) {
    errors.Add("restart.collective_timeout_s",
               absl::StrCat(r.collective_timeout_s(), " must be below restart.stall_timeout_s (",
                            r.stall_timeout_s(), ")"));
  }
}

}  // namespace

absl::StatusOr<ModelPreset> ResolveSpecModel(const v1::JobSpec& spec, const SpecOptions& options) {
  const std::string& name = spec.model().preset();
  const std::string& dir = spec.model().weights_path();
  const ModelPreset* named = name.empty() ? nullptr : FindModelPreset(name);
  if (!name.empty() && named == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.preset: unknown preset ", Quote(name),
                     "; known presets: ", absl::StrJoin(ModelPresetNames(), ", ")));
  }
  if (dir.empty()) return *named;
  if (!options.read_model_config) {
    if (named != nullptr) return *named;
    return absl::FailedPreconditionError(
        absl::StrCat("model.weights_path: ", Quote(dir),
                     " names the model, and this process cannot read model directories"));
  }
  absl::StatusOr<ModelPreset> config = options.read_model_config(dir);
  if (!config.ok()) {
    if (named != nullptr && absl::IsNotFound(config.status())) return *named;
    return absl::InvalidArgumentError(
        absl::StrCat("model.weights_path: ", Quote(dir), ": ", config.status().message()));
  }
  if (named == nullptr) return config;
  std::vector<std::string> diff = DiffModelPresets(*named, *config);
  if (diff.empty()) {
    config->name = named->name;
    return config;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model.preset: ", named->name, " disagrees with model.weights_path ", Quote(dir),
      "'s config.json: ", absl::StrJoin(diff, ", "), " (preset vs config.json)"));
}

// Upper bounds of a spec's numbers: far above any real job, and low enough that nothing built
// from a spec (placement demands, rank tables, schedules) overflows or takes long. Checked
// after the other checks, so that a value is reported once.
constexpr int64_t kMaxDegree = 1024;
constexpr int64_t kMaxDataParallel = 4096;
constexpr int64_t kMaxRanks = 65536;
constexpr int64_t kMaxLabels = 64;
constexpr size_t kMaxLabelValueBytes = 256;

void CheckAtMost(const std::string& field, int64_t value, int64_t max, Errors& errors) {
  if (value > max) errors.Add(field, absl::StrCat(value, " is over the limit of ", max));
}

void CheckLimits(const v1::JobSpec& spec, Errors& errors) {
  if (spec.labels_size() > kMaxLabels) {
    errors.Add("labels", absl::StrCat(spec.labels_size(), " labels; at most ", kMaxLabels));
  }
  for (const auto& [key, value] : spec.labels()) {
    if (key.size() > kMaxNameLength || value.size() > kMaxLabelValueBytes) {
      errors.Add("labels", absl::StrCat("label ", Quote(key.substr(0, 80)), ": keys take at most ",
                                        kMaxNameLength, " bytes and values ", kMaxLabelValueBytes));
    }
  }
  if (spec.priority() < -1000000 || spec.priority() > 1000000) {
    errors.Add("priority", absl::StrCat(spec.priority(), " is outside -1000000..1000000"));
  }
  const int64_t vision = spec.vision().degree(), text = spec.text().degree();
  const int64_t dp = spec.data_parallel_size();
  CheckAtMost("vision.degree", vision, kMaxDegree, errors);
  CheckAtMost("text.degree", text, kMaxDegree, errors);
  CheckAtMost("data_parallel_size", dp, kMaxDataParallel, errors);
  const int64_t per_replica =
      spec.placement() == v1::PLACEMENT_SEPARATE ? vision + text : std::max(vision, text);
  if (vision <= kMaxDegree && text <= kMaxDegree && dp <= kMaxDataParallel && dp >= 1 &&
      dp * per_replica > kMaxRanks) {
    errors.Add("data_parallel_size",
               absl::StrCat(dp, " replicas of ", per_replica, " ranks make ", dp * per_replica,
                            " ranks, over the limit of ", kMaxRanks));
  }
  const v1::TrainingSpec& t = spec.training();
  CheckAtMost("training.batch_size", t.batch_size(), 1 << 20, errors);
  CheckAtMost("training.warmup_steps", t.warmup_steps(), 1000000000, errors);
  CheckAtMost("training.max_steps", t.max_steps(), 1000000000000, errors);
  CheckAtMost("training.epochs", t.epochs(), 1000000, errors);
  const v1::DataSpec& d = spec.data();
  CheckAtMost("data.min_pixels", d.min_pixels(), 1 << 30, errors);
  CheckAtMost("data.max_pixels", d.max_pixels(), 1 << 30, errors);
  CheckAtMost("data.max_seq_len", d.max_seq_len(), 1 << 22, errors);
  CheckAtMost("data.registry", d.registry_size(), 1024, errors);
  CheckAtMost("data.datasets", d.datasets_size(), 1024, errors);
  CheckAtMost("checkpoint.every_steps", spec.checkpoint().every_steps(), 1000000000000, errors);
  CheckAtMost("checkpoint.keep_latest", spec.checkpoint().keep_latest(), 1000, errors);
  CheckAtMost("restart.max_restarts", spec.restart().max_restarts(), 10000, errors);
  CheckAtMost("restart.stall_timeout_s", spec.restart().stall_timeout_s(), 7 * 24 * 3600, errors);
  CheckAtMost("restart.launch_timeout_s", spec.restart().launch_timeout_s(), 7 * 24 * 3600,
              errors);
  CheckAtMost("restart.collective_timeout_s", spec.restart().collective_timeout_s(),
              7 * 24 * 3600, errors);
  CheckAtMost("restart.preemption_grace_s", spec.restart().preemption_grace_s(), 7 * 24 * 3600,
              errors);
}

// One elastic range around the spec's own `value`: min <= value <= max <= limit, min >= 1.
void CheckElasticRange(const std::string& field, const v1::ElasticRange& range, int64_t value,
                       int64_t limit, Errors& errors) {
  if (range.has_min() && range.min() < 1) {
    errors.Add(field + ".min", absl::StrCat(range.min(), " must be at least 1"));
  } else if (range.has_min() && range.min() > value) {
    errors.Add(field + ".min", absl::StrCat(range.min(), " is above the spec's own ", value,
                                            "; the range must include it"));
  }
  if (range.has_max() && range.max() > limit) {
    errors.Add(field + ".max", absl::StrCat(range.max(), " is over the limit of ", limit));
  } else if (range.has_max() && range.max() < value) {
    errors.Add(field + ".max", absl::StrCat(range.max(), " is below the spec's own ", value,
                                            "; the range must include it"));
  }
}

bool Pinned(const v1::ElasticRange& r, int64_t value) {
  return (!r.has_min() || r.min() == value) && (!r.has_max() || r.max() == value);
}

void CheckElastic(const v1::JobSpec& spec, Errors& errors);

// Fills an elastic job's unset bounds with the spec's own values, so that the bounds stay where
// the user put them when the job's layout changes (the scheduler's choice, or a resume).
void FillElasticRange(v1::ElasticRange* range, int value) {
  if (!range->has_min()) range->set_min(value);
  if (!range->has_max()) range->set_max(value);
}

void NormalizeElastic(v1::JobSpec& spec, Errors& errors) {
  if (!spec.has_elastic()) return;
  v1::ElasticSpec& e = *spec.mutable_elastic();
  CheckElastic(spec, errors);
  FillElasticRange(e.mutable_data_parallel_size(), spec.data_parallel_size());
  FillElasticRange(e.mutable_text_degree(), spec.text().degree());
  FillElasticRange(e.mutable_vision_degree(), spec.vision().degree());
}

void CheckElastic(const v1::JobSpec& spec, Errors& errors) {
  const v1::ElasticSpec& e = spec.elastic();
  CheckElasticRange("elastic.data_parallel_size", e.data_parallel_size(),
                    spec.data_parallel_size(), kMaxDataParallel, errors);
  CheckElasticRange("elastic.text_degree", e.text_degree(), spec.text().degree(), kMaxDegree,
                    errors);
  CheckElasticRange("elastic.vision_degree", e.vision_degree(), spec.vision().degree(),
                    kMaxDegree, errors);
  if (!Pinned(e.text_degree(), spec.text().degree()) &&
      spec.text().parallelism() != v1::PARALLELISM_TENSOR) {
    errors.Add("elastic.text_degree", "a range needs text.parallelism tensor");
  }
  if (!Pinned(e.vision_degree(), spec.vision().degree()) &&
      spec.vision().parallelism() != v1::PARALLELISM_SEQUENCE) {
    errors.Add("elastic.vision_degree",
               "a range needs vision.parallelism sequence: a tensor-parallel vision stage's "
               "checkpoints cannot be resharded to another degree");
  }
}

absl::Status NormalizeAndValidateSpec(v1::JobSpec* spec, const SpecOptions& options) {
  Errors errors;
  const bool name_ok = CheckName(spec->name(), errors);
  for (const auto& [key, value] : spec->labels()) {
    if (key.empty()) errors.Add("labels", "label keys must not be empty");
  }

  // The architecture, when this process can know it (a model directory alone, read nowhere,
  // leaves it unknown: the stage checks then run on the ranks).
  std::optional<ModelPreset> model;
  if (spec->model().preset().empty() && spec->model().weights_path().empty()) {
    errors.Add("model.preset",
               absl::StrCat("is required unless model.weights_path names a Hugging Face model "
                            "directory; known presets: ",
                            absl::StrJoin(ModelPresetNames(), ", ")));
  } else if (absl::StatusOr<ModelPreset> m = ResolveSpecModel(*spec, options); m.ok()) {
    model = std::move(*m);
  } else if (!absl::IsFailedPrecondition(m.status())) {
    const std::string msg(m.status().message());
    const size_t colon = msg.find(": ");
    errors.Add(msg.substr(0, colon), msg.substr(colon + 2));
  }
  const ModelPreset* preset = model.has_value() ? &*model : nullptr;
  NormalizeVision(*spec->mutable_vision(), preset, errors);
  NormalizeText(*spec->mutable_text(), preset, errors);

  if (!spec->has_data_parallel_size()) spec->set_data_parallel_size(1);
  if (spec->data_parallel_size() < 1) {
    errors.Add("data_parallel_size",
               absl::StrCat(spec->data_parallel_size(), " must be at least 1"));
  }
  if (spec->placement() == v1::PLACEMENT_UNSPECIFIED) {
    spec->set_placement(v1::PLACEMENT_COLLOCATE);
  }
  NormalizeTraining(*spec->mutable_training(), spec->data_parallel_size(), errors);
  NormalizeData(*spec->mutable_data(), errors);
  // The directory defaults to the job name; an invalid name is reported once, under "name".
  NormalizeCheckpoint(*spec->mutable_checkpoint(), name_ok ? spec->name() : "", options, errors);
  if (spec->restart().max_restarts() < 0) {
    errors.Add("restart.max_restarts",
               absl::StrCat(spec->restart().max_restarts(), " must not be negative"));
  }
  NormalizeTimeouts(*spec->mutable_restart(), errors);
  CheckLimits(*spec, errors);
  NormalizeElastic(*spec, errors);
  return errors.ToStatus();
}

absl::StatusOr<v1::JobSpec> ParseJobSpec(std::string_view text, const SpecOptions& options) {
  v1::JobSpec spec;
  absl::Status status = ParseProtoYaml(text, &spec);
  if (!status.ok()) return status;
  status = NormalizeAndValidateSpec(&spec, options);
  if (!status.ok()) return status;
  return spec;
}

}  // namespace dhp
