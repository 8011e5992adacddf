// `dhpctl export JOB [--checkpoint ID] --out DIR`: a job's checkpoint as a Hugging Face model
// directory.
//
// dhpctl links no LibTorch, so it does not re-assemble tensors itself: it asks the controller
// which checkpoint (GetJob: the job's checkpoints, each with its directory) and then runs
// `dhp-ckpt export CHECKPOINT_DIR --hf-dir DIR` as a child process on this machine. That needs
// the checkpoint's directory to be readable here, as it is wherever the checkpoint root is
// shared storage (the controller itself assumes so: it writes manifest.json and deletes old
// checkpoints there). dhp-ckpt is --dhp-ckpt, else the one next to dhpctl's own executable,
// else the first on PATH.
//
// Thread-safety: stateless functions.
#ifndef DHP_API_DHPCTL_EXPORT_H_
#define DHP_API_DHPCTL_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

// The checkpoint of `job` to export: the one with id `id` when given, which must be COMPLETE
// (NOT_FOUND / FAILED_PRECONDITION otherwise), else the newest COMPLETE one (highest step, then
// highest id; FAILED_PRECONDITION when there is none). Messages name the job and say what to do.
absl::StatusOr<v1::Checkpoint> PickCheckpoint(const v1::GetJobResponse& job,
                                              std::optional<int64_t> id);

// Where dhp-ckpt is: `given` when not empty (it must be an executable file), else `self_dir`/
// dhp-ckpt when that is one, else the first executable dhp-ckpt in the colon-separated
// `path_env`. NOT_FOUND names where it looked and the flag that fixes it.
absl::StatusOr<std::string> FindDhpCkpt(const std::string& given, const std::string& self_dir,
                                        const std::string& path_env);

// The directory of the running executable (/proc/self/exe), or "" when unknown.
std::string SelfDir();

struct ExportFlags {
  std::string out_dir;
  std::string dtype = "keep";  // keep | fp32 | bf16 | fp16, as dhp-ckpt takes it
  std::string max_shard_size;  // empty: dhp-ckpt's default
  std::string data_root;       // empty: dhp-ckpt's default
};

// dhp-ckpt's command line: DHP_CKPT export CHECKPOINT_DIR --hf-dir OUT --dtype D [...].
std::vector<std::string> DhpCkptArgs(const std::string& dhp_ckpt, const v1::Checkpoint& c,
                                     const ExportFlags& flags);

// Runs argv[0] with `argv`, sharing stdout and stderr, and waits: its exit code (128 + the
// signal when killed). INTERNAL when it cannot be started.
absl::StatusOr<int> RunAndWait(const std::vector<std::string>& argv);

// ---- on the controller (`dhpctl export JOB --on-controller`, ExportCheckpoint) ------------

// The local-only flags given with --on-controller, which the controller decides itself:
// INVALID_ARGUMENT naming them ("--out, --dhp-ckpt"); OK when none is.
absl::Status CheckOnControllerFlags(const std::vector<std::string>& local_flags_given);

// One line about an export: "export x-1 of checkpoint 3 (step 20) of job j-1 as bf16: RUNNING
// -> /var/lib/dhp/exports/x-1", with the message on a second line when FAILED or SUCCEEDED.
std::string ExportSummary(const v1::Export& e);

// True once the export is SUCCEEDED or FAILED.
bool ExportFinal(v1::ExportState state);

// dhpctl's exit code for an export: 0 SUCCEEDED, 1 FAILED, 0 while not final.
int ExportExit(v1::ExportState state);

// `dhpctl exports JOB`: a table ID STATE CHECKPOINT STEP DTYPE OUT, newest first.
std::string ExportsTable(const v1::ListExportsResponse& resp);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_EXPORT_H_
