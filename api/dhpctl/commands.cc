#include "api/dhpctl/commands.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "api/dhpctl/follow.h"
#include "api/dhpctl/output.h"
#include "api/dhpctl/top.h"
#include "common/command_line.h"
#include "common/proto_enum.h"
#include "common/utf8.h"

namespace dhp::dhpctl {

namespace {

// Jobs: submit, list, get, cancel, resume, checkpoint, watch, events.
void AddJobCommands(CLI::App& app, Flags& f, Commands& c) {
  c.submit = app.add_subcommand("submit", "Submit a job spec (YAML or JSON)");
  c.submit->add_option("-f,--file", f.file, "Spec file, - for stdin")->required();
  c.submit->add_flag("--follow", f.follow, "Stream the job's events until it ends");
  c.submit->add_flag("--dry-run", f.dry_run,
                     "Validate and show the normalised spec; store nothing");
  c.list = app.add_subcommand("list", "List jobs, newest first");
  c.list->add_option("--state", f.states, "Only jobs in this state (repeatable)");
  c.list->add_option("--label", f.labels, "Only jobs with this label key=value (repeatable)");
  c.list->add_option("--limit", f.limit, "At most this many jobs (default: all)");
  c.list->add_option("--owner", f.owner, "Only this owner's jobs (a user sees only their own)");
  c.get = app.add_subcommand("get", "Show a job with its runs and checkpoints");
  c.get->add_option("job", f.job_id, "Job id")->required();
  c.cancel = app.add_subcommand("cancel", "Cancel a job");
  c.cancel->add_option("job", f.job_id, "Job id")->required();
  c.cancel->add_option("--reason", f.reason, "Recorded with the cancellation");
  c.resume = app.add_subcommand("resume", "Resume a cancelled or failed job");
  c.resume->add_option("job", f.job_id, "Job id")->required();
  c.resume->add_flag("--follow", f.follow, "Stream the job's events until it ends");
  c.vision_opt = c.resume->add_option("--vision-degree", f.vision_degree,
                                      "New vision degree, for this and later runs");
  c.text_opt = c.resume->add_option("--text-degree", f.text_degree,
                                    "New text degree, for this and later runs");
  c.dp_opt = c.resume->add_option("--dp", f.dp, "New data_parallel_size, for this and later runs");
  c.resume->add_option("--placement", f.layout.placement,
                       "New placement, collocate or separate (as in a spec); unset flags keep "
                       "the job's layout");
  c.checkpoint = app.add_subcommand(
      "checkpoint", "Checkpoint a running job at its next step boundary (all ranks, one step)");
  c.checkpoint->add_option("job", f.job_id, "Job id")->required();
  c.watch = app.add_subcommand("watch", "Stream a job's events until it ends");
  c.watch->add_option("job", f.job_id, "Job id")->required();
  c.events =
      app.add_subcommand("events", "Print the event history of one job, or of all jobs and nodes");
  c.events->add_option("job", f.job_id, "Job id (default: all jobs and nodes)");
  c.events->add_option("--after", f.after, "Only events after this id")->check(dhp::WholeNumber());
  c.events->add_flag("--follow", f.follow, "Keep streaming new events");
}

// Nodes: nodes, drain, uncordon.
void AddNodeCommands(CLI::App& app, Flags& f, Commands& c) {
  c.nodes = app.add_subcommand("nodes", "List worker nodes");
  c.drain = app.add_subcommand(
      "drain", "Cordon a node; the runs on it checkpoint at their next step and are requeued");
  c.drain->add_option("node", f.node_id, "Node id")->required();
  c.drain->add_option("--reason", f.reason, "Recorded with the drain (events, dhpctl nodes)");
  c.uncordon =
      app.add_subcommand("uncordon", "Let the scheduler place ranks on a drained node again");
  c.uncordon->add_option("node", f.node_id, "Node id")->required();
}

// What a job left: logs, checkpoints, exports.
void AddJobOutputCommands(CLI::App& app, Flags& f, Commands& c) {
  c.logs = app.add_subcommand(
      "logs", "Print a job's rank output; several ranks' lines start \"[rank N] \"");
  c.logs->add_option("job", f.job_id, "Job id")->required();
  c.logs->add_option("--rank,-r", f.log_ranks, "Only this world rank (repeatable; default: all)");
  c.logs->add_option("--attempt,-a", f.log_attempt,
                     "Attempt (run) number; default: the current one");
  c.logs->add_flag("-f,--follow", f.follow,
                   "Keep printing new output until the attempt ends (Ctrl-C to stop)");
  c.checkpoints = app.add_subcommand(
      "checkpoints", "List a job's checkpoints with their state, shards and write time");
  c.checkpoints->add_option("job", f.job_id, "Job id")->required();
  c.export_cmd = app.add_subcommand(
      "export",
      "Export a job's checkpoint as a Hugging Face model directory (runs dhp-ckpt here; the "
      "checkpoint's directory must be readable from this machine)");
  c.export_cmd->add_option("job", f.job_id, "Job id")->required();
  c.export_cmd->add_option("--checkpoint", f.export_checkpoint_text,
                           "Checkpoint ID (dhpctl checkpoints JOB); default: the newest COMPLETE");
  c.out_opt = c.export_cmd->add_option(
      "--out", f.export_flags.out_dir,
      "The model directory to create (must not exist or be empty); required unless "
      "--on-controller");
  c.dtype_opt =
      c.export_cmd
          ->add_option("--dtype", f.export_flags.dtype,
                       "Weights' dtype (keep: as trained; with --on-controller the default is "
                       "bf16)")
          ->check(CLI::IsMember({"keep", "fp32", "bf16", "fp16"}))
          ->capture_default_str();
  c.shard_opt = c.export_cmd->add_option("--max-shard-size", f.export_flags.max_shard_size,
                                         "Tensor bytes per weight file (dhp-ckpt's default: 5GB)");
  c.data_root_opt = c.export_cmd->add_option(
      "--data-root", f.export_flags.data_root,
      "Where a relative model.weights_path starts (the agents' --data-root)");
  c.dhp_ckpt_opt = c.export_cmd->add_option(
      "--dhp-ckpt", f.dhp_ckpt, "The dhp-ckpt binary (default: next to dhpctl, else on PATH)");
  c.export_cmd->add_flag("--on-controller", f.on_controller,
                         "Let the controller write the export into its export.root, where the "
                         "checkpoint lives (ExportCheckpoint); prints the export's id");
  c.export_cmd->add_flag("--wait", f.export_wait,
                         "With --on-controller: wait until the export is done (exit 0 when it "
                         "SUCCEEDED, 1 when it FAILED)");
  c.export_status =
      app.add_subcommand("export-status", "Show an export made with dhpctl export --on-controller");
  c.export_status->add_option("export", f.export_id, "Export id (x-...)")->required();
  c.export_status->add_flag("--wait", f.export_wait,
                            "Wait until it is done (exit 0 when it SUCCEEDED, 1 when it FAILED)");
  c.exports_cmd =
      app.add_subcommand("exports", "List a job's exports made on the controller, newest first");
  c.exports_cmd->add_option("job", f.job_id, "Job id")->required();
}

// Views: top, and the offline plan.
void AddViewCommands(CLI::App& app, Flags& f, Commands& c) {
  c.top = app.add_subcommand(
      "top",
      "Live view of a job: step, loss, throughput, and per rank its step time split, "
      "memory and what it waits on");
  c.top->add_option("job", f.job_id, "Job id")->required();
  c.top->add_option("--interval,-n", f.top_interval, "Refresh interval: 1s, 500ms, 2 (seconds)")
      ->capture_default_str();
  c.top->add_flag("--once", f.top_once, "Print one snapshot and exit");
  c.plan = app.add_subcommand(
      "plan",
      "Estimate a spec's memory per GPU, for its layout and the alternatives on as many "
      "GPUs, and whether each fits a GPU model (offline: no controller)");
  c.plan->add_option("-f,--file", f.file, "Spec file, - for stdin")->required();
  c.plan
      ->add_option("--gpu", f.plan_req.gpu,
                   "GPU model: h100-80gb, h200-141gb, a100-40gb, a100-80gb, l40s-48gb")
      ->capture_default_str();
  c.plan
      ->add_option("--gpus-per-node", f.plan_req.gpus_per_node,
                   "GPUs per node: a tensor-parallel group must fit one node")
      ->capture_default_str();

}

}  // namespace

Commands AddCommands(CLI::App& app, Flags& f) {
  Commands c;
  AddJobCommands(app, f, c);
  AddNodeCommands(app, f, c);
  AddJobOutputCommands(app, f, c);
  AddViewCommands(app, f, c);
  return c;
}

int CommandRunner::Run() {
  if (c_.submit->parsed()) return RunSubmit();
  if (c_.list->parsed()) return RunList();
  if (c_.get->parsed()) return RunGet();
  if (c_.cancel->parsed()) return RunCancel();
  if (c_.resume->parsed()) return RunResume();
  if (c_.checkpoint->parsed()) return RunCheckpoint();
  if (c_.watch->parsed()) return Follow(client_, poll_client_, f_.job_id, g_);
  if (c_.events->parsed()) return RunEvents();
  if (c_.logs->parsed()) return RunLogs();
  if (c_.checkpoints->parsed()) return RunCheckpoints();
  if (c_.export_cmd->parsed() && f_.on_controller) return RunExportOnController();
  if (c_.export_cmd->parsed()) return RunExport();
  if (c_.export_status->parsed()) return RunExportStatus();
  if (c_.exports_cmd->parsed()) return RunExports();
  if (c_.top->parsed()) return RunTop();
  if (c_.drain->parsed()) return RunDrain();
  if (c_.uncordon->parsed()) return RunUncordon();
  if (c_.nodes->parsed()) return RunNodes();  // every page
  return 2;
}

int CommandRunner::RunSubmit() {
  v1::SubmitJobRequest req;
  if (!ReadFile(f_.file, req.mutable_spec_text())) {
    std::cerr << "dhpctl: cannot read spec file " << f_.file << "\n";
    return 2;
  }
  if (const std::string bad = Utf8Error(req.spec_text()); !bad.empty()) {
    std::cerr << "dhpctl: " << f_.file << ": " << bad << "\n";  // gRPC could not send it
    return 2;
  }
  req.set_dry_run(f_.dry_run);
  absl::StatusOr<v1::SubmitJobResponse> resp = client_.SubmitJob(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  if (f_.dry_run) {
    std::cout << (g_.format() == Format::kJson ? Structured(resp->job().spec(), Format::kJson)
                                               : Structured(resp->job().spec(), Format::kYaml));
    return 0;
  }
  Print(*resp, g_,
        "job " + resp->job().id() + " submitted (" + ShortName(resp->job().state()) + ")\n");
  return f_.follow ? Follow(client_, poll_client_, resp->job().id(), g_) : 0;
}

int CommandRunner::RunList() {
  v1::ListJobsRequest req;
  for (const std::string& s : f_.states) {
    std::optional<int> v = ParseEnumName(v1::JobState_descriptor(), s);
    if (!v || *v == 0) {
      std::cerr << "dhpctl: --state " << s << " is not a job state; use one of "
                << EnumChoices(v1::JobState_descriptor()) << "\n";
      return 2;
    }
    req.add_states(static_cast<v1::JobState>(*v));
  }
  for (const std::string& l : f_.labels) {
    size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "dhpctl: --label " << l << " must look like key=value\n";
      return 2;
    }
    (*req.mutable_labels())[l.substr(0, eq)] = l.substr(eq + 1);
  }
  req.set_owner(f_.owner);
  v1::ListJobsResponse all;
  do {
    req.set_page_size(f_.limit > 0 ? std::min(1000, f_.limit - all.jobs_size()) : 500);
    absl::StatusOr<v1::ListJobsResponse> page = client_.ListJobs(req);
    if (!page.ok()) return Report(page.status(), g_.server);
    for (const v1::Job& j : page->jobs()) *all.add_jobs() = j;
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty() && (f_.limit <= 0 || all.jobs_size() < f_.limit));
  std::vector<v1::Job> jobs(all.jobs().begin(), all.jobs().end());
  return Print(all, g_, JobsTable(jobs, Now()));
}

int CommandRunner::RunGet() {
  v1::GetJobRequest req;
  req.set_job_id(f_.job_id);
  absl::StatusOr<v1::GetJobResponse> resp = client_.GetJob(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_, JobDetail(*resp, Now()));
}

int CommandRunner::RunCancel() {
  v1::CancelJobRequest req;
  req.set_job_id(f_.job_id);
  req.set_reason(f_.reason);
  absl::StatusOr<v1::CancelJobResponse> resp = client_.CancelJob(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_, "job " + f_.job_id + " " + ShortName(resp->job().state()) + "\n");
}

int CommandRunner::RunResume() {
  ResumeLayoutFlags layout = f_.layout;
  if (c_.vision_opt->count() > 0) layout.vision_degree = f_.vision_degree;
  if (c_.text_opt->count() > 0) layout.text_degree = f_.text_degree;
  if (c_.dp_opt->count() > 0) layout.data_parallel_size = f_.dp;
  absl::StatusOr<v1::ResumeJobRequest> req = ResumeRequest(f_.job_id, layout);
  if (!req.ok()) {
    std::cerr << "dhpctl: " << req.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<v1::ResumeJobResponse> resp = client_.ResumeJob(*req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  Print(*resp, g_,
        "job " + f_.job_id + " " + ShortName(resp->job().state()) + " as attempt " +
            std::to_string(resp->run().attempt()) + ": " + resp->job().message() + "\n");
  return f_.follow ? Follow(client_, poll_client_, f_.job_id, g_) : 0;
}

int CommandRunner::RunCheckpoint() {
  v1::CheckpointJobRequest req;
  req.set_job_id(f_.job_id);
  absl::StatusOr<v1::CheckpointJobResponse> resp = client_.CheckpointJob(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_,
               "job " + f_.job_id + ": checkpoint requested; the ranks write it at step " +
                   std::to_string(resp->at_step()) + " or the first step boundary after it\n");
}

int CommandRunner::RunEvents() {
  v1::WatchJobRequest req;
  req.set_job_id(f_.job_id);
  req.set_after_event_id(f_.after);
  req.set_follow(f_.follow);
  absl::Status s = client_.WatchJob(req, [&](const v1::Event& e) {
    std::cout << (g_.format() == Format::kTable ? EventLine(e) : ProtoToJsonLine(e)) << std::endl;
    return true;
  });
  return s.ok() ? 0 : Report(s, g_.server);
}

int CommandRunner::RunLogs() {
  for (int32_t r : f_.log_ranks) {
    if (r < 0) {
      std::cerr << "dhpctl: --rank " << r << " is negative; world ranks start at 0\n";
      return 2;
    }
  }
  if (f_.log_attempt < 0) {
    std::cerr << "dhpctl: --attempt " << f_.log_attempt
              << " is negative; attempts start at 1 (0: the current one)\n";
    return 2;
  }
  return Logs(client_, f_.job_id, f_.log_ranks, f_.log_attempt, f_.follow, g_);
}

int CommandRunner::RunCheckpoints() {
  v1::GetJobRequest req;
  req.set_job_id(f_.job_id);
  absl::StatusOr<v1::GetJobResponse> resp = client_.GetJob(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  v1::GetJobResponse only;
  *only.mutable_checkpoints() = resp->checkpoints();
  return Print(only, g_, CheckpointsTable(*resp));
}

int CommandRunner::RunExportOnController() {
  std::vector<std::string> local;
  for (CLI::Option* o : {c_.out_opt, c_.shard_opt, c_.data_root_opt, c_.dhp_ckpt_opt}) {
    if (o->count() > 0) local.push_back(o->get_name());
  }
  if (absl::Status s = CheckOnControllerFlags(local); !s.ok()) {
    std::cerr << "dhpctl: " << s.message() << "\n";
    return 2;
  }
  v1::ExportCheckpointRequest req;
  req.set_job_id(f_.job_id);
  if (f_.export_checkpoint > 0) req.set_checkpoint_id(f_.export_checkpoint);
  if (c_.dtype_opt->count() > 0) req.set_dtype(f_.export_flags.dtype);
  absl::StatusOr<v1::ExportCheckpointResponse> resp = client_.ExportCheckpoint(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return FollowExport(client_, resp->export_(), f_.export_wait, g_);
}

int CommandRunner::RunExport() {
  if (f_.export_flags.out_dir.empty()) {
    std::cerr << "dhpctl: export needs --out DIR (or --on-controller, to let the controller "
                 "write it)\n";
    return 2;
  }
  if (f_.export_wait) {
    std::cerr << "dhpctl: --wait is for --on-controller (a local export always waits)\n";
    return 2;
  }
  std::optional<int64_t> id;
  if (f_.export_checkpoint >= 0) id = f_.export_checkpoint;
  return Export(client_, f_.job_id, id, f_.dhp_ckpt, f_.export_flags, g_);
}

int CommandRunner::RunExportStatus() {
  v1::GetExportRequest req;
  req.set_id(f_.export_id);
  absl::StatusOr<v1::GetExportResponse> resp = client_.GetExport(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return FollowExport(client_, resp->export_(), f_.export_wait, g_);
}

int CommandRunner::RunExports() {
  v1::ListExportsRequest req;
  req.set_job_id(f_.job_id);
  absl::StatusOr<v1::ListExportsResponse> resp = client_.ListExports(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_, ExportsTable(*resp));
}

int CommandRunner::RunTop() {
  std::optional<int> interval_ms = ParseInterval(f_.top_interval);
  if (!interval_ms || *interval_ms < 100) {
    std::cerr << "dhpctl: --interval " << f_.top_interval
              << " is not a refresh interval of at least 100ms; use e.g. 1s, 500ms or 2\n";
    return 2;
  }
  return Top(client_, f_.job_id, *interval_ms, f_.top_once, g_);
}

int CommandRunner::RunDrain() {
  v1::DrainNodeRequest req;
  req.set_node_id(f_.node_id);
  req.set_reason(f_.reason);
  absl::StatusOr<v1::DrainNodeResponse> resp = client_.DrainNode(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_, DrainSummary(*resp));
}

int CommandRunner::RunUncordon() {
  v1::UncordonNodeRequest req;
  req.set_node_id(f_.node_id);
  absl::StatusOr<v1::UncordonNodeResponse> resp = client_.UncordonNode(req);
  if (!resp.ok()) return Report(resp.status(), g_.server);
  return Print(*resp, g_, "node " + f_.node_id + " uncordoned: ranks may be placed there again\n");
}

int CommandRunner::RunNodes() {
  v1::ListNodesRequest req;
  v1::ListNodesResponse all;
  do {
    absl::StatusOr<v1::ListNodesResponse> page = client_.ListNodes(req);
    if (!page.ok()) return Report(page.status(), g_.server);
    for (const v1::Node& n : page->nodes()) *all.add_nodes() = n;
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  std::vector<v1::Node> list_nodes(all.nodes().begin(), all.nodes().end());
  return Print(all, g_, NodesTable(list_nodes, Now()));
}

}  // namespace dhp::dhpctl
