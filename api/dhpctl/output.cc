#include "api/dhpctl/output.h"

#include <algorithm>
#include <sstream>

#include "common/proto_enum.h"
#include "common/proto_yaml.h"
#include "google/protobuf/util/time_util.h"

namespace dhp::dhpctl {
namespace {

using google::protobuf::util::TimeUtil;

int64_t Micros(const google::protobuf::Timestamp& ts) {
  return ts.seconds() * 1000000 + ts.nanos() / 1000;
}

std::string Time(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "-";
  std::string s = TimeUtil::ToString(ts);  // 2026-11-22T10:00:00.123456Z
  size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot) + "Z";
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream out;
  out.precision(u == 0 ? 0 : 1);
  out << std::fixed << v << " " << units[u];
  return out.str();
}

std::string Loss(const v1::Job& job) {
  if (job.latest_step() == 0) return "-";
  std::ostringstream out;
  out.precision(4);
  out << job.latest_loss();
  return out.str();
}

}  // namespace

std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t i = 0; i < cells.size(); ++i) {
      text += cells[i];
      if (i + 1 < cells.size()) text += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    out << text << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out.str();
}

std::string Age(int64_t micros, int64_t now_micros) {
  if (micros == 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_micros - micros) / 1000000);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string LayoutSummary(const v1::JobSpec& spec) {
  std::ostringstream out;
  out << "vision " << Lower(ShortName(spec.vision().parallelism())) << " x"
      << spec.vision().degree();
  if (spec.vision().zero_stage() > 0) out << " (zero-" << spec.vision().zero_stage() << ")";
  out << ", text " << Lower(ShortName(spec.text().parallelism())) << " x" << spec.text().degree()
      << ", dp " << spec.data_parallel_size() << ", " << Lower(ShortName(spec.placement()));
  return out.str();
}

std::string JobsTable(const std::vector<v1::Job>& jobs, int64_t now_micros) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Job& j : jobs) {
    rows.push_back({j.id(), j.spec().name(), ShortName(j.state()),
                    std::to_string(j.current_attempt()), std::to_string(j.latest_step()),
                    Loss(j), j.spec().model().preset(), Age(Micros(j.create_time()), now_micros)});
  }
  return RenderTable({"ID", "NAME", "STATE", "ATTEMPT", "STEP", "LOSS", "PRESET", "AGE"}, rows);
}

std::string JobDetail(const v1::GetJobResponse& resp, int64_t now_micros) {
  const v1::Job& j = resp.job();
  std::ostringstream out;
  out << "Job:        " << j.id() << "\n"
      << "Name:       " << j.spec().name() << "\n"
      << "State:      " << ShortName(j.state()) << " (" << j.message() << ")\n"
      << "Model:      " << j.spec().model().preset() << "\n"
      << "Layout:     " << LayoutSummary(j.spec()) << "\n"
      << "Priority:   " << j.spec().priority() << "\n"
      << "Attempt:    " << j.current_attempt() << " (restarts " << j.restart_count() << " of "
      << j.spec().restart().max_restarts() << ")\n"
      << "Step:       " << j.latest_step() << " of "
      << (j.spec().training().max_steps() > 0
              ? std::to_string(j.spec().training().max_steps())
              : std::to_string(j.spec().training().epochs()) + " epochs")
      << ", loss " << Loss(j) << "\n"
      << "Created:    " << Time(j.create_time()) << " ("
      << Age(Micros(j.create_time()), now_micros) << " ago)\n"
      << "Updated:    " << Time(j.update_time()) << "\n";
  if (!j.spec().labels().empty()) {
    std::vector<std::string> labels;
    for (const auto& [k, v] : j.spec().labels()) labels.push_back(k + "=" + v);
    std::sort(labels.begin(), labels.end());
    out << "Labels:     ";
    for (size_t i = 0; i < labels.size(); ++i) out << (i ? "," : "") << labels[i];
    out << "\n";
  }
  std::vector<std::vector<std::string>> runs;
  for (const v1::Run& r : resp.runs()) {
    runs.push_back({std::to_string(r.attempt()), ShortName(r.state()),
                    std::to_string(r.start_step()), std::to_string(r.last_step()),
                    Time(r.create_time()), Time(r.end_time()), r.reason()});
  }
  out << "\nRuns:\n"
      << RenderTable({"ATTEMPT", "STATE", "FROM_STEP", "LAST_STEP", "CREATED", "ENDED", "REASON"},
                     runs);
  out << "\nCheckpoints:\n";
  if (resp.checkpoints().empty()) {
    out << "(none)\n";
  } else {
    std::vector<std::vector<std::string>> ckpts;
    for (const v1::Checkpoint& c : resp.checkpoints()) {
      ckpts.push_back({std::to_string(c.id()), std::to_string(c.step()),
                       std::to_string(c.attempt()), Bytes(c.size_bytes()), Time(c.create_time()),
                       c.path()});
    }
    out << RenderTable({"ID", "STEP", "ATTEMPT", "SIZE", "CREATED", "PATH"}, ckpts);
  }
  return out.str();
}

std::string NodesTable(const std::vector<v1::Node>& nodes, int64_t now_micros) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Node& n : nodes) {
    std::string gpus = std::to_string(n.resources().gpus_size());
    if (n.resources().gpus_size() > 0) gpus += " x " + n.resources().gpus(0).name();
    rows.push_back({n.id(), ShortName(n.state()), gpus, std::to_string(n.resources().cpu_slots()),
                    Bytes(n.resources().memory_bytes()),
                    Age(Micros(n.last_heartbeat_time()), now_micros) + " ago", n.address()});
  }
  return RenderTable({"NODE", "STATE", "GPUS", "CPU_SLOTS", "MEMORY", "HEARTBEAT", "ADDRESS"},
                     rows);
}

std::string EventLine(const v1::Event& e) {
  std::ostringstream out;
  out << Time(e.time()) << "  #" << e.id() << "  "
      << (e.job_id().empty() ? "node " + e.node_id() : e.job_id()) << "  " << e.type() << "  "
      << (e.from_state().empty() ? "" : e.from_state() + " -> ") << e.to_state();
  if (!e.reason().empty()) out << "  (" << e.reason() << ")";
  return out.str();
}

std::string Structured(const google::protobuf::Message& msg, Format format) {
  if (format == Format::kYaml) return ProtoToYaml(msg);
  return ProtoToJson(msg, /*pretty=*/true);
}

}  // namespace dhp::dhpctl

namespace dhp::dhpctl {

std::string ProtoToJsonLine(const google::protobuf::Message& msg) {
  return ProtoToJson(msg, /*pretty=*/false);
}

}  // namespace dhp::dhpctl
