// dhp-ckpt: tools for dhp training checkpoints, offline (no controller needed).
//
//   dhp-ckpt export CHECKPOINT_DIR -o model.safetensors [--spec JOB.yaml] [--data-root DIR]
//                   [--dtype keep|fp32|bf16|fp16]
//
// export: re-assembles the full parameters of a checkpoint (one shard per rank, any layout) into
// one safetensors file named as Hugging Face names them (ckpt_export.h), e.g. for dhp-train's
// model.weights_path or transformers. CHECKPOINT_DIR is a checkpoint's directory as `dhpctl
// checkpoints JOB` lists it (its manifest.json and rank-*.safetensors). Exit codes: 0 done,
// 1 the checkpoint cannot be exported (the message says why), 2 bad usage.
//
// Under `bazel run`, relative paths are taken relative to the directory bazel was run from.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "common/spec_validate.h"
#include "worker/rank/ckpt_export.h"
#include "worker/rank/model_init.h"

namespace {

std::string FromUserDir(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  return dir != nullptr && *dir ? std::string(dir) + "/" + path : path;
}

int Export(const std::string& dir, const std::string& out, const std::string& spec_path,
           const std::string& data_root, const std::string& dtype) {
  dhp::CheckpointExportOptions o;
  o.checkpoint_dir = FromUserDir(dir);
  o.out_path = FromUserDir(out);
  o.data_root = FromUserDir(data_root);
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
  std::string dir, out, spec, data_root = ".", dtype = "keep";
  CLI::App* exp = app.add_subcommand(
      "export", "Re-assemble a checkpoint's full parameters into one safetensors file");
  exp->add_option("checkpoint", dir, "The checkpoint's directory (manifest.json, rank-*)")
      ->required();
  exp->add_option("-o,--out", out, "The .safetensors file to write")->required();
  exp->add_option("--spec", spec,
                  "The job's spec (YAML or JSON), for checkpoints whose shards do not record it");
  exp->add_option("--data-root", data_root,
                  "Where a relative model.weights_path starts (as the ranks' --data-root)");
  exp->add_option("--dtype", dtype, "Floating-point dtype of the output (keep: as trained)")
      ->check(CLI::IsMember({"keep", "fp32", "bf16", "fp16"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; bad usage: 2
  }
  return Export(dir, out, spec, data_root, dtype);
}
