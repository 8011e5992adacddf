// dhpctl: the command-line client of dhp.
//
//   dhpctl submit -f spec.yaml [--follow] [--dry-run]
//   dhpctl list [--state running] [--label team=vision] [--limit N]
//   dhpctl get JOB | cancel JOB [--reason R] | resume JOB | watch JOB | events | nodes
//
// --server / DHP_SERVER picks the controller (host:port of its gRPC API); -o table|json|yaml;
// --token-file / DHP_TOKEN the API token when the controller requires one.
// Exit codes: 0 success; 1 the controller refused or failed the request; 2 bad usage or an
// unreadable file; 3 the controller is unreachable; with --follow, 4 when the job ends FAILED
// and 5 when it ends CANCELLED.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "api/auth.h"
#include "api/client.h"
#include "api/dhpctl/output.h"
#include "common/clock.h"
#include "common/proto_enum.h"

namespace dhp::dhpctl {
namespace {

struct Globals {
  std::string server;
  std::string token_file;
  std::string output = "table";
  int timeout_ms = 30000;
  Format format() const {
    if (output == "json") return Format::kJson;
    if (output == "yaml") return Format::kYaml;
    return Format::kTable;
  }
};

int64_t Now() { return SystemClock().NowMicros(); }

// One line a person can act on, and the exit code for it.
int Report(const absl::Status& s, const std::string& server) {
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "dhpctl: cannot reach the controller at " << server
              << " (is dhp-controller running? set --server or DHP_SERVER): " << s.message()
              << "\n";
    return 3;
  }
  std::string code = absl::StatusCodeToString(s.code());
  std::cerr << "dhpctl: " << code << ": " << s.message() << "\n";
  return 1;
}

int Print(const google::protobuf::Message& msg, const Globals& g, const std::string& table) {
  std::cout << (g.format() == Format::kTable ? table : Structured(msg, g.format()));
  if (g.format() == Format::kJson) std::cout << "\n";
  return 0;
}

int FinalExit(v1::JobState state) {
  if (state == v1::JOB_STATE_FAILED) return 4;
  if (state == v1::JOB_STATE_CANCELLED) return 5;
  return 0;
}

// Streams a job's events (from the beginning) until it is final; returns the exit code.
int Follow(api::DhpClient& client, const std::string& job_id, const Globals& g) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_follow(true);
  absl::Status s = client.WatchJob(req, [&](const v1::Event& e) {
    if (g.format() == Format::kTable) {
      std::cout << EventLine(e) << std::endl;
    } else {
      std::cout << ProtoToJsonLine(e) << std::endl;
    }
    return true;
  });
  if (!s.ok()) return Report(s, g.server);
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  absl::StatusOr<v1::GetJobResponse> job = client.GetJob(get);
  if (!job.ok()) return Report(job.status(), g.server);
  std::cerr << "job " << job_id << " ended " << ShortName(job->job().state()) << ": "
            << job->job().message() << "\n";
  return FinalExit(job->job().state());
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path == "-" ? "/dev/stdin" : path);
  if (!in) return false;
  std::stringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

}  // namespace
}  // namespace dhp::dhpctl

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

  std::string file, job_id, reason;
  bool follow = false, dry_run = false;
  std::vector<std::string> states, labels;
  int limit = 0;
  int64_t after = 0;

  CLI::App* submit = app.add_subcommand("submit", "Submit a job spec (YAML or JSON)");
  submit->add_option("-f,--file", file, "Spec file, - for stdin")->required();
  submit->add_flag("--follow", follow, "Stream the job's events until it ends");
  submit->add_flag("--dry-run", dry_run, "Validate and show the normalised spec; store nothing");
  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", states, "Only jobs in this state (repeatable)");
  list->add_option("--label", labels, "Only jobs with this label key=value (repeatable)");
  list->add_option("--limit", limit, "At most this many jobs (default: all)");
  CLI::App* get = app.add_subcommand("get", "Show a job with its runs and checkpoints");
  get->add_option("job", job_id, "Job id")->required();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", job_id, "Job id")->required();
  cancel->add_option("--reason", reason, "Recorded with the cancellation");
  CLI::App* resume = app.add_subcommand("resume", "Resume a cancelled or failed job");
  resume->add_option("job", job_id, "Job id")->required();
  resume->add_flag("--follow", follow, "Stream the job's events until it ends");
  CLI::App* watch = app.add_subcommand("watch", "Stream a job's events until it ends");
  watch->add_option("job", job_id, "Job id")->required();
  CLI::App* events = app.add_subcommand("events", "Print the event history of all jobs/nodes");
  events->add_option("--after", after, "Only events after this id");
  events->add_flag("--follow", follow, "Keep streaming new events");
  CLI::App* nodes = app.add_subcommand("nodes", "List worker nodes");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
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
  api::DhpClient client(g.server, g.timeout_ms, token);

  if (submit->parsed()) {
    v1::SubmitJobRequest req;
    if (!ReadFile(file, req.mutable_spec_text())) {
      std::cerr << "dhpctl: cannot read spec file " << file << "\n";
      return 2;
    }
    req.set_dry_run(dry_run);
    absl::StatusOr<v1::SubmitJobResponse> resp = client.SubmitJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    if (dry_run) {
      std::cout << (g.format() == Format::kJson ? Structured(resp->job().spec(), Format::kJson)
                                                : Structured(resp->job().spec(), Format::kYaml));
      return 0;
    }
    Print(*resp, g, "job " + resp->job().id() + " submitted (" +
                        ShortName(resp->job().state()) + ")\n");
    return follow ? Follow(client, resp->job().id(), g) : 0;
  }
  if (list->parsed()) {
    v1::ListJobsRequest req;
    for (const std::string& s : states) {
      std::optional<int> v = ParseEnumName(v1::JobState_descriptor(), s);
      if (!v || *v == 0) {
        std::cerr << "dhpctl: --state " << s << " is not a job state; use one of "
                  << EnumChoices(v1::JobState_descriptor()) << "\n";
        return 2;
      }
      req.add_states(static_cast<v1::JobState>(*v));
    }
    for (const std::string& l : labels) {
      size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "dhpctl: --label " << l << " must look like key=value\n";
        return 2;
      }
      (*req.mutable_labels())[l.substr(0, eq)] = l.substr(eq + 1);
    }
    v1::ListJobsResponse all;
    do {
      req.set_page_size(limit > 0 ? std::min(1000, limit - all.jobs_size()) : 500);
      absl::StatusOr<v1::ListJobsResponse> page = client.ListJobs(req);
      if (!page.ok()) return Report(page.status(), g.server);
      for (const v1::Job& j : page->jobs()) *all.add_jobs() = j;
      req.set_page_token(page->next_page_token());
    } while (!req.page_token().empty() && (limit <= 0 || all.jobs_size() < limit));
    std::vector<v1::Job> jobs(all.jobs().begin(), all.jobs().end());
    return Print(all, g, JobsTable(jobs, Now()));
  }
  if (get->parsed()) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::GetJobResponse> resp = client.GetJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, JobDetail(*resp, Now()));
  }
  if (cancel->parsed()) {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    absl::StatusOr<v1::CancelJobResponse> resp = client.CancelJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, "job " + job_id + " " + ShortName(resp->job().state()) + "\n");
  }
  if (resume->parsed()) {
    v1::ResumeJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::ResumeJobResponse> resp = client.ResumeJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    Print(*resp, g, "job " + job_id + " " + ShortName(resp->job().state()) + " as attempt " +
                        std::to_string(resp->run().attempt()) + ": " + resp->job().message() +
                        "\n");
    return follow ? Follow(client, job_id, g) : 0;
  }
  if (watch->parsed()) return Follow(client, job_id, g);
  if (events->parsed()) {
    v1::WatchJobRequest req;
    req.set_after_event_id(after);
    req.set_follow(follow);
    absl::Status s = client.WatchJob(req, [&](const v1::Event& e) {
      std::cout << (g.format() == Format::kTable ? EventLine(e) : ProtoToJsonLine(e))
                << std::endl;
      return true;
    });
    return s.ok() ? 0 : Report(s, g.server);
  }
  if (nodes->parsed()) {
    absl::StatusOr<v1::ListNodesResponse> resp = client.ListNodes(v1::ListNodesRequest());
    if (!resp.ok()) return Report(resp.status(), g.server);
    std::vector<v1::Node> list_nodes(resp->nodes().begin(), resp->nodes().end());
    return Print(*resp, g, NodesTable(list_nodes, Now()));
  }
  return 2;
}
