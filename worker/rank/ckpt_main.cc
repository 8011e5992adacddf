// dhp-ckpt: tools for dhp training checkpoints, offline (no controller needed).
//
//   dhp-ckpt export CHECKPOINT_DIR (-o model.safetensors | --hf-dir OUT_DIR [--max-shard-size 5GB])
//                   [--spec JOB.yaml] [--data-root DIR] [--dtype keep|fp32|bf16|fp16]
//
// export: re-assembles the full parameters of a checkpoint (one shard per rank, any layout) with
// the names Hugging Face gives them (ckpt_export.h), either into one safetensors file (-o), e.g.
// for dhp-train's model.weights_path, or into a Hugging Face model directory (--hf-dir:
// config.json, weight shards, tokenizer files; hf_export.h) that transformers' from_pretrained
// and vLLM load. CHECKPOINT_DIR is a checkpoint's directory as `dhpctl checkpoints JOB` lists it
// (its manifest.json and rank-*.safetensors). Exit codes: 0 done, 1 the checkpoint cannot be
// exported (the message says why), 2 bad usage.
//
// Under `bazel run`, relative paths are taken relative to the directory bazel was run from.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "common/spec_validate.h"
#include "worker/rank/ckpt_export.h"
#include "worker/rank/hf_export.h"
#include "worker/rank/model_init.h"

namespace {

std::string FromUserDir(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  return dir != nullptr && *dir ? std::string(dir) + "/" + path : path;
}

// The command line of `export`.
struct ExportArgs {
  std::string dir, out, hf_dir, spec;
  std::string data_root = ".";
  std::string dtype = "keep";
  std::string max_shard_size = "5GB";
};

// --hf-dir: the directory, and a summary of what went into it.
int ExportHfDir(const dhp::CheckpointExportOptions& o, const ExportArgs& a) {
  dhp::HfExportOptions h;
  h.checkpoint = o;
  h.out_dir = FromUserDir(a.hf_dir);
  absl::StatusOr<int64_t> max = dhp::ParseByteSize(a.max_shard_size);
  if (!max.ok()) {
    std::fprintf(stderr, "dhp-ckpt export: --max-shard-size: %s\n",
                 std::string(max.status().message()).c_str());
    return 2;
  }
  h.max_shard_bytes = *max;
  absl::StatusOr<dhp::HfExportResult> r = dhp::ExportHfDirectory(h);
  if (!r.ok()) {
    std::fprintf(stderr, "dhp-ckpt export: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const dhp::CheckpointExportResult& c = r->checkpoint;
  std::printf(
      "exported step %lld of job %s (%s; %s): %lld tensors, %lld parameters, %lld bytes in %zu "
      "weight file%s to %s\n",
      static_cast<long long>(c.step), c.job_id.c_str(), c.model.c_str(), c.layout.c_str(),
      static_cast<long long>(c.tensors), static_cast<long long>(c.elements),
      static_cast<long long>(c.bytes), r->weight_files.size(),
      r->weight_files.size() == 1 ? "" : "s", a.hf_dir.c_str());
  std::printf("  config.json (torch_dtype %s) from %s\n", r->torch_dtype.c_str(),
              r->config_source.c_str());
  for (const std::string& f : r->weight_files) std::printf("  %s\n", f.c_str());
  if (r->indexed) std::printf("  model.safetensors.index.json\n");
  std::string copied;
  for (const std::string& f : r->copied) copied += (copied.empty() ? "" : ", ") + f;
  std::printf("  copied from the model directory: %s\n",
              copied.empty() ? "(none)" : copied.c_str());
  return 0;
}

int Export(const ExportArgs& a) {
  const std::string &out = a.out, &spec_path = a.spec, &dtype = a.dtype;
  dhp::CheckpointExportOptions o;
  o.checkpoint_dir = FromUserDir(a.dir);
  o.out_path = FromUserDir(out);
  o.data_root = FromUserDir(a.data_root);
  if (dtype == "fp32") o.dtype = at::kFloat;
  if (dtype == "bf16") o.dtype = at::kBFloat16;
  if (dtype == "fp16") o.dtype = at::kHalf;
  if (!spec_path.empty()) {
    std::ifstream in(FromUserDir(spec_path));
    if (!in) {
      std::fprintf(stderr, "dhp-ckpt export: cannot read --spec %s\n", spec_path.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<dhp::v1::JobSpec> spec =
        dhp::ParseJobSpec(text.str(), dhp::RankSpecOptions(o.data_root));
    if (!spec.ok()) {
      std::fprintf(stderr, "dhp-ckpt export: --spec %s: %s\n", spec_path.c_str(),
                   std::string(spec.status().message()).c_str());
      return 2;
    }
    o.spec = *spec;
  }
  if (!a.hf_dir.empty()) return ExportHfDir(o, a);
  absl::StatusOr<dhp::CheckpointExportResult> r = dhp::ExportCheckpoint(o);
  if (!r.ok()) {
    std::fprintf(stderr, "dhp-ckpt export: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "exported step %lld of job %s (%s; %s): %lld tensors, %lld parameters, %lld bytes "
      "to %s\n",
      static_cast<long long>(r->step), r->job_id.c_str(), r->model.c_str(), r->layout.c_str(),
      static_cast<long long>(r->tensors), static_cast<long long>(r->elements),
      static_cast<long long>(r->bytes), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dhp-ckpt: tools for dhp training checkpoints"};
  app.require_subcommand(1);
  ExportArgs a;
  CLI::App* exp = app.add_subcommand(
      "export",
      "Re-assemble a checkpoint's full parameters into one safetensors file (-o) or a Hugging "
      "Face model directory (--hf-dir)");
  exp->add_option("checkpoint", a.dir, "The checkpoint's directory (manifest.json, rank-*)")
      ->required();
  exp->add_option("-o,--out", a.out, "The .safetensors file to write");
  exp->add_option("--hf-dir", a.hf_dir,
                  "The Hugging Face model directory to create (config.json, model*.safetensors, "
                  "tokenizer files); must not exist or be empty");
  exp->add_option("--max-shard-size", a.max_shard_size,
                  "With --hf-dir: tensor bytes per weight file (5GB, 500MB, 2GiB, bytes)")
      ->capture_default_str();
  exp->add_option("--spec", a.spec,
                  "The job's spec (YAML or JSON), for checkpoints whose shards do not record it");
  exp->add_option("--data-root", a.data_root,
                  "Where a relative model.weights_path starts (as the ranks' --data-root)");
  exp->add_option("--dtype", a.dtype, "Floating-point dtype of the output (keep: as trained)")
      ->check(CLI::IsMember({"keep", "fp32", "bf16", "fp16"}));
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  if (a.out.empty() == a.hf_dir.empty()) {
    std::fprintf(stderr, "dhp-ckpt export: give exactly one of -o FILE and --hf-dir DIR\n");
    return 2;
  }
  return Export(a);
}
