// dhpctl: the command-line client of dhp.
//
//   dhpctl submit -f spec.yaml [--follow] [--dry-run]
//   dhpctl list [--state running] [--label team=vision] [--owner alice] [--limit N]
//   dhpctl get JOB | cancel JOB [--reason R] | checkpoint JOB | watch JOB | events | nodes
//   dhpctl resume JOB [--vision-degree N] [--text-degree N] [--dp N]
//          [--placement collocate|separate] [--follow]
//   dhpctl drain NODE [--reason R] | uncordon NODE   (admins)
//   dhpctl logs JOB [--rank N]... [--attempt A] [-f|--follow]
//   dhpctl checkpoints JOB
//   dhpctl export JOB [--checkpoint ID] --out DIR [--dtype keep|fp32|bf16|fp16]
//          [--max-shard-size 5GB] [--data-root DIR] [--dhp-ckpt PATH]
//   dhpctl export JOB --on-controller [--checkpoint ID] [--dtype bf16|fp32|fp16|keep] [--wait]
//   dhpctl export-status EXPORT [--wait] | exports JOB
//   dhpctl top JOB [--interval 1s] [--once]
//   dhpctl plan -f spec.yaml [--gpu h100-80gb] [--gpus-per-node 8]
//
// --server / DHP_SERVER picks the controller (host:port of its gRPC API); -o table|json|yaml;
// --token-file / DHP_TOKEN the API token when the controller requires one.
// While following a RUNNING job (submit/resume --follow, watch) a progress line is shown
// (api/dhpctl/progress.h) and a summary is printed to stderr when the job ends.
// `top` redraws a live view of the job's ranks (api/dhpctl/top.h) until the job is final or
// Ctrl-C (exit 0); --once prints one snapshot.
// `export` resolves the checkpoint through the API and runs dhp-ckpt on it (api/dhpctl/export.h);
// it exits with dhp-ckpt's code. With --on-controller the controller writes it instead
// (ExportCheckpoint, where the checkpoint lives) into its export.root; dhpctl prints the
// export's id and, with --wait, polls it (GetExport) until it is final: exit 0 SUCCEEDED, 1
// FAILED. `export-status` shows (or waits for) one export, `exports` a job's.
// `plan` needs no controller: the memory planner's per-rank breakdown of the spec's layout and
// its alternatives against a GPU (api/dhpctl/plan.h); exit 0 when the spec's layout fits, 1 when
// it does not.
// Exit codes: 0 success; 1 the controller refused or failed the request; 2 bad usage or an
// unreadable file; 3 the controller is unreachable; with --follow, 4 when the job ends FAILED
// and 5 when it ends CANCELLED; 130 interrupted (Ctrl-C) while following or in logs -f.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "api/auth.h"
#include "api/client.h"
#include "api/dhpctl/commands.h"
#include "api/dhpctl/plan.h"
#include "api/dhpctl/session.h"
#include "api/tls.h"
#include "common/command_line.h"
#include "common/utf8.h"

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::dhpctl;
  CLI::App app{"dhpctl: submit and manage dhp training jobs"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (-o, --server) may also follow the subcommand
  Globals g;
  const char* env = std::getenv("DHP_SERVER");
  g.server = env ? env : "127.0.0.1:7070";
  app.add_option("--server,-s", g.server, "Controller gRPC address host:port (env DHP_SERVER)")
      ->capture_default_str();
  app.add_option("--output,-o", g.output, "Output format")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--timeout-ms", g.timeout_ms, "Deadline of each request")->capture_default_str();
  app.add_option("--token-file", g.token_file,
                 "File with the controller's API token (env DHP_TOKEN holds the token itself)");
  api::AddTlsClientFlags(app, &g.tls);

  Flags f;
  const Commands c = AddCommands(app, f);

  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  // Ids and reasons travel in proto strings, which gRPC cannot send unless they are UTF-8.
  for (const auto& [what, text] : {std::pair<const char*, const std::string*>{"job id", &f.job_id},
                                   {"node id", &f.node_id},
                                   {"export id", &f.export_id},
                                   {"--reason", &f.reason}}) {
    if (const std::string bad = Utf8Error(*text); !bad.empty()) {
      std::cerr << "dhpctl: " << what << ": " << bad << "\n";
      return 2;
    }
  }
  if (!f.export_checkpoint_text.empty() &&
      (!absl::SimpleAtoi(f.export_checkpoint_text, &f.export_checkpoint) ||
       f.export_checkpoint < 1)) {
    std::cerr << "dhpctl: --checkpoint "
              << EscapeInvalidUtf8(f.export_checkpoint_text.substr(0, 40))
              << ": not a checkpoint id (a positive integer; dhpctl checkpoints JOB lists them)\n";
    return 2;
  }

  if (c.plan->parsed()) {  // offline: before any credential or connection
    if (g.format() != Format::kTable) {
      std::cerr << "dhpctl: plan prints tables only; drop -o " << g.output << "\n";
      return 2;
    }
    f.plan_req.source = f.file;
    if (!ReadFile(f.file, &f.plan_req.spec_text)) {
      std::cerr << "dhpctl: cannot read spec file " << f.file << "\n";
      return 2;
    }
    const PlanResult result = RunPlan(f.plan_req);
    std::cout << result.out;
    std::cerr << result.err;
    return result.exit_code;
  }

  const char* env_token = std::getenv("DHP_TOKEN");
  std::string token = env_token ? env_token : "";
  if (!g.token_file.empty()) {
    absl::StatusOr<std::string> t = api::ReadTokenFile(g.token_file);
    if (!t.ok()) {
      std::cerr << "dhpctl: " << t.status().message() << "\n";
      return 2;
    }
    token = *t;
  }
  absl::StatusOr<api::TlsPems> tls = api::LoadTls(g.tls);
  if (!tls.ok()) {
    std::cerr << "dhpctl: " << tls.status().message() << "\n";
    return 2;
  }
  api::DhpClient client(g.server, g.timeout_ms, token, *tls);
  // For the progress polls of the follow commands: a stuck call must not freeze the display.
  api::DhpClient poll_client(g.server, std::min(g.timeout_ms, 2000), token, *tls);

  return CommandRunner(c, f, client, poll_client, g).Run();
}
