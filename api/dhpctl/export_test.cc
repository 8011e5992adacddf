// dhpctl export's choices without a controller: which checkpoint (newest COMPLETE, or the one
// asked for) with the errors a user sees, where dhp-ckpt is found, and dhp-ckpt's command line.
#include "api/dhpctl/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace dhp::dhpctl {
namespace {

v1::GetJobResponse Job(std::initializer_list<std::tuple<int64_t, int64_t, v1::CheckpointState>>
                           checkpoints) {
  v1::GetJobResponse job;
  job.mutable_job()->set_id("j-1");
  for (const auto& [id, step, state] : checkpoints) {
    v1::Checkpoint* c = job.add_checkpoints();
    c->set_id(id);
    c->set_step(step);
    c->set_state(state);
    c->set_path("/ckpt/step-" + std::to_string(step));
  }
  return job;
}

constexpr v1::CheckpointState kComplete = v1::CHECKPOINT_STATE_COMPLETE;
constexpr v1::CheckpointState kPartial = v1::CHECKPOINT_STATE_PARTIAL;
constexpr v1::CheckpointState kCorrupt = v1::CHECKPOINT_STATE_CORRUPT;

TEST(PickCheckpointTest, NewestCompleteByDefault) {
  // Step 100 is PARTIAL; of the COMPLETE ones step 80 is newest (id 4 rewrote it after a resume).
  const v1::GetJobResponse job =
      Job({{1, 50, kComplete}, {2, 80, kComplete}, {3, 100, kPartial}, {4, 80, kComplete}});
  absl::StatusOr<v1::Checkpoint> c = PickCheckpoint(job, std::nullopt);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->id(), 4);
  EXPECT_EQ(c->path(), "/ckpt/step-80");
  c = PickCheckpoint(job, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step(), 50);
}

TEST(PickCheckpointTest, Errors) {
  absl::StatusOr<v1::Checkpoint> c = PickCheckpoint(Job({}), std::nullopt);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "job j-1 has no COMPLETE checkpoint to export: it has none (checkpoint.every_steps, "
            "or dhpctl checkpoint j-1 while it runs, writes one)");
  const v1::GetJobResponse job = Job({{1, 50, kCorrupt}, {2, 60, kPartial}});
  c = PickCheckpoint(job, std::nullopt);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "job j-1 has no COMPLETE checkpoint to export: it has 1 (step 50, CORRUPT), 2 (step "
            "60, PARTIAL) (checkpoint.every_steps, or dhpctl checkpoint j-1 while it runs, "
            "writes one)");
  c = PickCheckpoint(job, 7);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(),
            "job j-1 has no checkpoint 7: it has 1 (step 50, CORRUPT), 2 (step 60, PARTIAL) "
            "(dhpctl checkpoints j-1; --checkpoint takes the ID column)");
  c = PickCheckpoint(job, 2);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "checkpoint 2 (step 60) of job j-1 is PARTIAL, not COMPLETE: export a COMPLETE one "
            "(dhpctl checkpoints j-1)");
}

std::string MakeFile(const std::string& path, mode_t mode) {
  std::ofstream(path) << "#!/bin/sh\nexit 3\n";
  chmod(path.c_str(), mode);
  return path;
}

TEST(FindDhpCkptTest, GivenThenBesideDhpctlThenPath) {
  // A fresh directory per run: a dhp-ckpt left beside "dhpctl" by an earlier run (ctest has no
  // per-test TEST_TMPDIR) would be found first.
  std::string root = ::testing::TempDir() + "/find_dhp_ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  const std::string self = root + "/bin", on_path = root + "/path", empty = root + "/empty";
  for (const std::string& d : {self, on_path, empty}) mkdir(d.c_str(), 0755);
  const std::string in_path = MakeFile(on_path + "/dhp-ckpt", 0755);
  MakeFile(empty + "/dhp-ckpt", 0644);  // not executable: skipped
  const std::string path_env = empty + "::" + on_path;

  EXPECT_EQ(*FindDhpCkpt("", self, path_env), in_path);
  const std::string beside = MakeFile(self + "/dhp-ckpt", 0755);
  EXPECT_EQ(*FindDhpCkpt("", self, path_env), beside);
  EXPECT_EQ(*FindDhpCkpt(in_path, self, path_env), in_path);

  absl::StatusOr<std::string> none = FindDhpCkpt("", empty, empty);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(),
            "dhp-ckpt (the LibTorch tool that re-assembles checkpoints) is not in " + empty +
                " nor on PATH: pass --dhp-ckpt PATH");
  none = FindDhpCkpt(empty + "/dhp-ckpt", self, path_env);
  EXPECT_EQ(none.status().message(), "--dhp-ckpt " + empty + "/dhp-ckpt is not an executable file");
}

TEST(DhpCkptArgsTest, CommandLineAndExitCode) {
  v1::Checkpoint c;
  c.set_path("/ckpt/j-1/attempt-1/step-00000004");
  ExportFlags flags;
  flags.out_dir = "out";
  EXPECT_EQ(DhpCkptArgs("/bin/dhp-ckpt", c, flags),
            (std::vector<std::string>{"/bin/dhp-ckpt", "export", c.path(), "--hf-dir", "out",
                                      "--dtype", "keep"}));
  flags.dtype = "bf16";
  flags.max_shard_size = "2GB";
  flags.data_root = "/data";
  EXPECT_EQ(DhpCkptArgs("d", c, flags),
            (std::vector<std::string>{"d", "export", c.path(), "--hf-dir", "out", "--dtype",
                                      "bf16", "--max-shard-size", "2GB", "--data-root", "/data"}));
  // The child's exit code comes back as it is.
  const std::string script = MakeFile(::testing::TempDir() + "/exit3.sh", 0755);
  EXPECT_EQ(*RunAndWait({script}), 3);
  EXPECT_EQ(RunAndWait({::testing::TempDir() + "/no-such-binary"}).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_FALSE(SelfDir().empty());
}

TEST(OnControllerExportTest, LocalFlagsAreRefusedByName) {
  EXPECT_TRUE(CheckOnControllerFlags({}).ok());
  absl::Status s = CheckOnControllerFlags({"--out", "--dhp-ckpt"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("--out, --dhp-ckpt are for a local export only", 0), 0u) << s;
}

TEST(OnControllerExportTest, SummaryAndExitFollowTheState) {
  v1::Export e;
  e.set_id("x-1");
  e.set_job_id("j-1");
  e.set_checkpoint_id(3);
  e.set_step(20);
  e.set_dtype("bf16");
  e.set_out_dir("/d/exports/x-1");
  e.set_state(v1::EXPORT_STATE_RUNNING);
  e.set_message("ignored while running");
  EXPECT_EQ(ExportSummary(e),
            "export x-1 of checkpoint 3 (step 20) of job j-1 as bf16: RUNNING -> /d/exports/x-1\n");
  EXPECT_FALSE(ExportFinal(e.state()));
  EXPECT_EQ(ExportExit(e.state()), 0);
  e.set_state(v1::EXPORT_STATE_FAILED);
  e.set_message("dhp-ckpt exited with code 1: damaged");
  EXPECT_EQ(ExportSummary(e),
            "export x-1 of checkpoint 3 (step 20) of job j-1 as bf16: FAILED -> /d/exports/x-1\n"
            "dhp-ckpt exited with code 1: damaged\n");
  EXPECT_TRUE(ExportFinal(e.state()));
  EXPECT_EQ(ExportExit(e.state()), 1);
  EXPECT_EQ(ExportExit(v1::EXPORT_STATE_SUCCEEDED), 0);

  v1::ListExportsResponse list;
  *list.add_exports() = e;
  const std::string table = ExportsTable(list);
  EXPECT_NE(table.find("ID"), std::string::npos) << table;
  EXPECT_NE(table.find("x-1"), std::string::npos) << table;
  EXPECT_NE(table.find("FAILED"), std::string::npos) << table;
}

}  // namespace
}  // namespace dhp::dhpctl
