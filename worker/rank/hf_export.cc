#include "worker/rank/hf_export.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/remove_tree.h"
#include "worker/model/hf_config.h"
#include "worker/rank/data_pipeline.h"

namespace dhp {

const char* const kTokenizerFiles[10] = {
    "tokenizer.json",          "tokenizer_config.json",    "vocab.json",
    "merges.txt",              "special_tokens_map.json",  "preprocessor_config.json",
    "chat_template.json",      "chat_template.jinja",      "generation_config.json",
    "added_tokens.json",
};

namespace {

std::string Errno() { return std::strerror(errno); }

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// OK when `dir` does not exist or is an empty directory.
absl::Status CheckOutDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat("cannot look at ", dir, ": ", Errno()));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists and is not a directory: give a new directory for --hf-dir"));
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::PermissionDeniedError(absl::StrCat("cannot read ", dir));
  std::string first;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      first = e->d_name;
      break;
    }
  }
  ::closedir(d);
  if (!first.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is not empty (it holds ", first,
        "): export into a new or empty directory; nothing is overwritten"));
  }
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::ResourceExhaustedError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

absl::Status CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot read ", from));
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.flush();
  if (!out || in.bad()) {
    return absl::ResourceExhaustedError(absl::StrCat("copying ", from, " to ", to, " failed"));
  }
  return absl::OkStatus();
}

const char* TorchDtypeName(StDtype d) {
  switch (d) {
    case StDtype::kBF16:
      return "bfloat16";
    case StDtype::kF16:
      return "float16";
    case StDtype::kF64:
      return "float64";
    default:
      return "float32";
  }
}

// The floating-point dtype that holds most of the elements (the stages may train in different
// dtypes; with --dtype all tensors have the one asked for).
std::string WeightsDtype(const std::vector<StTensorSource>& tensors) {
  std::map<StDtype, int64_t> elements;
  for (const StTensorSource& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.dtype == StDtype::kF32 || t.dtype == StDtype::kBF16 || t.dtype == StDtype::kF16 ||
        t.dtype == StDtype::kF64) {
      elements[t.dtype] += n;
    }
  }
  StDtype best = StDtype::kF32;
  int64_t most = -1;
  for (const auto& [d, n] : elements) {
    if (n > most) {
      best = d;
      most = n;
    }
  }
  return TorchDtypeName(best);
}

// model.weights_path's directory, or "" for a job without one.
std::string ModelDir(const AssembledCheckpoint& ckpt, const std::string& data_root) {
  const std::string& path = ckpt.spec().model().weights_path();
  return path.empty() ? "" : ResolveDataPath(data_root, path);
}

// config.json into `tmp`: the model directory's, with its dtype keys set, or the preset's.
absl::Status WriteConfig(const AssembledCheckpoint& ckpt, const std::string& model_dir,
                         const std::string& tmp, HfExportResult* result) {
  const std::string source = model_dir.empty() ? "" : model_dir + "/config.json";
  if (source.empty() || !IsFile(source)) {
    result->config_source = "preset " + ckpt.model().name;
    return WriteText(tmp + "/config.json", HfConfigJson(ckpt.model(), result->torch_dtype));
  }
  std::ifstream in(source);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(text.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  // transformers 4 writes "torch_dtype", transformers 5 "dtype"; sub-configs may carry them too.
  config["torch_dtype"] = result->torch_dtype;
  if (config.contains("dtype")) config["dtype"] = result->torch_dtype;
  for (const char* sub : {"text_config", "vision_config"}) {
    auto it = config.find(sub);
    if (it == config.end() || !it->is_object()) continue;
    for (const char* key : {"torch_dtype", "dtype"}) {
      if (it->contains(key)) (*it)[key] = result->torch_dtype;
    }
  }
  result->config_source = source;
  return WriteText(tmp + "/config.json", config.dump(2) + "\n");
}

// The weights into `tmp`: one model.safetensors, or shards and their index.
absl::Status WriteWeights(const AssembledCheckpoint& ckpt, int64_t max_shard_bytes,
                          const std::string& tmp, HfExportResult* result) {
  const std::vector<StTensorSource>& tensors = ckpt.tensors();
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const StTensorSource& t : tensors) {
    int64_t n = static_cast<int64_t>(StDtypeSize(t.dtype));
    for (int64_t d : t.shape) n *= d;
    bytes.push_back(n);
    total += n;
  }
  const std::vector<std::vector<size_t>> shards = PlanShards(bytes, max_shard_bytes);
  std::map<std::string, std::string> weight_map;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        shards.size() == 1
            ? "model.safetensors"
            : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards.size());
    std::vector<StTensorSource> part;
    for (size_t i : shards[s]) {
      part.push_back(tensors[i]);
      weight_map[tensors[i].name] = file;
    }
    if (absl::Status st = WriteSafetensorsStreamed(tmp + "/" + file, part, ckpt.metadata());
        !st.ok()) {
      return st;
    }
    result->weight_files.push_back(file);
    result->checkpoint.bytes += FileSize(tmp + "/" + file);
  }
  if (shards.size() == 1) return absl::OkStatus();
  result->indexed = true;
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  return WriteText(tmp + "/model.safetensors.index.json", index.dump(2) + "\n");
}

absl::Status CopyTokenizer(const std::string& model_dir, const std::string& tmp,
                           HfExportResult* result) {
  if (model_dir.empty()) return absl::OkStatus();
  for (const char* name : kTokenizerFiles) {
    const std::string from = model_dir + "/" + name;
    if (!IsFile(from)) continue;
    if (absl::Status s = CopyFile(from, tmp + "/" + name); !s.ok()) return s;
    result->copied.push_back(name);
  }
  return absl::OkStatus();
}

// Everything into the temporary directory `tmp`.
absl::Status WriteDirectory(const AssembledCheckpoint& ckpt, const HfExportOptions& options,
                            const std::string& tmp, HfExportResult* result) {
  const std::string model_dir = ModelDir(ckpt, options.checkpoint.data_root);
  if (absl::Status s = WriteConfig(ckpt, model_dir, tmp, result); !s.ok()) return s;
  if (absl::Status s = WriteWeights(ckpt, options.max_shard_bytes, tmp, result); !s.ok()) {
    return s;
  }
  return CopyTokenizer(model_dir, tmp, result);
}

}  // namespace

std::vector<std::vector<size_t>> PlanShards(const std::vector<int64_t>& bytes, int64_t max_bytes) {
  std::vector<std::vector<size_t>> shards;
  int64_t filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (shards.empty() || (!shards.back().empty() && filled + bytes[i] > max_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += bytes[i];
  }
  return shards;
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  static const std::map<std::string, int64_t>* units = new std::map<std::string, int64_t>{
      {"", 1},
      {"b", 1},
      {"kb", 1000},
      {"mb", 1000 * 1000},
      {"gb", 1000 * 1000 * 1000},
      {"kib", 1 << 10},
      {"mib", 1 << 20},
      {"gib", 1 << 30}};
  int64_t n = 0;
  auto unit = units->find(t.substr(digits));
  if (digits == 0 || !absl::SimpleAtoi(t.substr(0, digits), &n) || unit == units->end() ||
      n < 1 || n > std::numeric_limits<int64_t>::max() / unit->second) {
    return absl::InvalidArgumentError(
        absl::StrCat("max shard size \"", text,
                     "\" is not a positive size such as 5GB, 500MB, 2GiB or 1000000 (bytes)"));
  }
  return n * unit->second;
}

absl::StatusOr<HfExportResult> ExportHfDirectory(const HfExportOptions& options) {
  const std::string& out = options.out_dir;
  if (out.empty()) return absl::InvalidArgumentError("no output directory given");
  if (options.max_shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max shard size ", options.max_shard_bytes, " must be at least 1 byte"));
  }
  if (absl::Status s = CheckOutDir(out); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<AssembledCheckpoint>> ckpt =
      AssembledCheckpoint::Open(options.checkpoint);
  if (!ckpt.ok()) return ckpt.status();

  HfExportResult result;
  result.checkpoint = (*ckpt)->result();
  result.torch_dtype = WeightsDtype((*ckpt)->tensors());
  std::string tmp = (out.back() == '/' ? out.substr(0, out.size() - 1) : out) + ".tmp-XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", tmp, " beside the output directory: ", Errno(),
        " (its parent directory must exist and be writable)"));
  }
  absl::Status s = WriteDirectory(**ckpt, options, tmp, &result);
  if (s.ok() && ::rename(tmp.c_str(), out.c_str()) != 0) {
    s = absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp, " to ", out, ": ",
                                                 Errno()));
  }
  if (!s.ok()) {
    RemoveTree(tmp);
    return s;
  }
  return result;
}

}  // namespace dhp
