// dhpctl's commands: their flags (CLI11), and running the one parsed against the controller.
// `plan` (offline) and the checks before any connection stay in main.cc.
#ifndef DHP_API_DHPCTL_COMMANDS_H_
#define DHP_API_DHPCTL_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "api/client.h"
#include "api/dhpctl/export.h"
#include "api/dhpctl/plan.h"
#include "api/dhpctl/resume.h"
#include "api/dhpctl/session.h"

namespace dhp::dhpctl {

// Every command's flags and arguments (several commands share one: job_id, follow, reason).
struct Flags {
  std::string file, job_id, reason;
  bool follow = false, dry_run = false;
  std::vector<std::string> states, labels;
  int limit = 0;
  int64_t after = 0;
  std::vector<int32_t> log_ranks;
  int32_t log_attempt = 0;
  std::string owner;
  ResumeLayoutFlags layout;
  int32_t vision_degree = 0, text_degree = 0, dp = 0;
  std::string node_id;
  ExportFlags export_flags;
  std::string export_checkpoint_text;
  int64_t export_checkpoint = -1;  // export_checkpoint_text parsed; -1: the newest COMPLETE
  std::string dhp_ckpt;
  bool on_controller = false, export_wait = false;
  std::string export_id;
  std::string top_interval = "1s";
  bool top_once = false;
  PlanRequest plan_req;
};

// The subcommands, and the options whose presence matters (not only their value).
struct Commands {
  CLI::App *submit, *list, *get, *cancel, *resume, *checkpoint, *watch, *events, *nodes, *drain,
      *uncordon, *logs, *checkpoints, *export_cmd, *export_status, *exports_cmd, *top, *plan;
  CLI::Option *vision_opt, *text_opt, *dp_opt, *out_opt, *dtype_opt, *shard_opt, *data_root_opt,
      *dhp_ckpt_opt;
};

// Adds every subcommand to `app`, its flags bound to `f`.
Commands AddCommands(CLI::App& app, Flags& f);

// Runs the parsed command (not `plan`) and returns dhpctl's exit code. `poll_client` has a
// short deadline, for the progress polls of the follow commands.
class CommandRunner {
 public:
  CommandRunner(const Commands& c, const Flags& f, api::DhpClient& client,
                api::DhpClient& poll_client, const Globals& g)
      : c_(c), f_(f), client_(client), poll_client_(poll_client), g_(g) {}
  int Run();

 private:
  int RunSubmit();
  int RunList();
  int RunGet();
  int RunCancel();
  int RunResume();
  int RunCheckpoint();
  int RunEvents();
  int RunLogs();
  int RunCheckpoints();
  int RunExportOnController();
  int RunExport();
  int RunExportStatus();
  int RunExports();
  int RunTop();
  int RunDrain();
  int RunUncordon();
  int RunNodes();

  const Commands& c_;
  const Flags& f_;
  api::DhpClient& client_;
  api::DhpClient& poll_client_;
  const Globals& g_;
};

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_COMMANDS_H_
