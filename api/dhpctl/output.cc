#include "api/dhpctl/output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

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

// "0-3", "0,2,5-6" for ascending slots.
std::string Ranges(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
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
      << (j.total_steps() > 0 ? std::to_string(j.total_steps())
          : j.spec().training().max_steps() > 0
              ? std::to_string(j.spec().training().max_steps())
              : std::to_string(j.spec().training().epochs()) + " epochs")
      << ", loss " << Loss(j) << "\n";
  if (j.tokens_per_second() > 0 || j.step_seconds() > 0) {
    std::ostringstream speed;
    speed.precision(3);
    speed << j.tokens_per_second() << " tokens/s, " << j.step_seconds() << " s/step";
    out << "Speed:      " << speed.str() << "\n";
  }
  out
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
  const v1::Run* newest = nullptr;
  for (const v1::Run& r : resp.runs()) {
    runs.push_back({std::to_string(r.attempt()), ShortName(r.state()),
                    std::to_string(r.start_step()), std::to_string(r.last_step()),
                    r.world_size() > 0 ? std::to_string(r.world_size()) : "-",
                    Seconds(r.queue_wait_seconds()), Time(r.create_time()), Time(r.end_time()),
                    r.reason()});
    if (newest == nullptr || r.attempt() > newest->attempt()) newest = &r;
  }
  out << "\nRuns:\n"
      << RenderTable({"ATTEMPT", "STATE", "FROM_STEP", "LAST_STEP", "WORLD", "QUEUED", "CREATED",
                      "ENDED", "REASON"},
                     runs);
  if (newest != nullptr && newest->placement_size() > 0) {
    out << "Placement:  " << PlacementSummary(*newest) << " (attempt " << newest->attempt()
        << ")\n";
  }
  if (newest != nullptr && !newest->checkpoint_dir().empty()) {
    out << "Ckpt dir:   " << newest->checkpoint_dir() << "\n";
  }
  out << "\nCheckpoints:\n" << CheckpointsTable(resp);
  return out.str();
}

std::string Seconds(double seconds) {
  if (!(seconds > 0)) return "-";
  char buf[64];
  if (seconds < 59.95) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
    return buf;
  }
  const long long total = std::llround(seconds);
  const long long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", h, m, sec);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", m, sec);
  }
  return buf;
}

std::string PlacementSummary(const v1::Run& run) {
  if (run.placement().empty()) return "-";
  // Nodes in the order of their first rank.
  std::vector<const v1::RankPlacement*> sorted;
  for (const v1::RankPlacement& p : run.placement()) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const v1::RankPlacement* a, const v1::RankPlacement* b) {
                     return a->world_rank() < b->world_rank();
                   });
  std::vector<std::pair<std::string, bool>> groups;  // (node, gpu), first-seen order
  std::vector<std::vector<int32_t>> slots;
  for (const v1::RankPlacement* p : sorted) {
    const std::pair<std::string, bool> key{p->node_id(), p->gpu()};
    auto it = std::find(groups.begin(), groups.end(), key);
    if (it == groups.end()) {
      groups.push_back(key);
      slots.emplace_back();
      it = groups.end() - 1;
    }
    slots[it - groups.begin()].push_back(p->slot());
  }
  std::string out;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i > 0) out += ", ";
    out += groups[i].first + (groups[i].second ? " gpu " : " cpu ") + Ranges(slots[i]);
  }
  return out;
}

std::string CheckpointsTable(const v1::GetJobResponse& resp) {
  if (resp.checkpoints().empty()) return "(none)\n";
  std::vector<std::vector<std::string>> rows;
  std::string notes;
  for (const v1::Checkpoint& c : resp.checkpoints()) {
    std::string shards = std::to_string(c.shards_size());
    if (c.world_size() > 0) shards += "/" + std::to_string(c.world_size());
    char write[32] = "-";
    if (c.write_seconds() > 0) std::snprintf(write, sizeof(write), "%.1f", c.write_seconds());
    rows.push_back({std::to_string(c.id()), std::to_string(c.step()), ShortName(c.state()),
                    std::to_string(c.attempt()), Bytes(c.size_bytes()), shards, write,
                    Time(c.create_time()), c.path()});
    if (c.state() == v1::CHECKPOINT_STATE_CORRUPT) {
      notes += "checkpoint " + std::to_string(c.id()) + " (step " + std::to_string(c.step()) +
               ") is CORRUPT and is skipped on resume: " +
               (c.reason().empty() ? "no reason recorded" : c.reason()) + "\n";
    }
  }
  return RenderTable({"ID", "STEP", "STATE", "ATTEMPT", "SIZE", "SHARDS", "WRITE_S", "CREATED",
                      "PATH"},
                     rows) +
         notes;
}

std::string NodesTable(const std::vector<v1::Node>& nodes, int64_t now_micros) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Node& n : nodes) {
    std::string gpus = std::to_string(n.resources().gpus_size());
    if (n.resources().gpus_size() > 0) gpus += " x " + n.resources().gpus(0).name();
    const std::string state = ShortName(n.state()) + (n.cordoned() ? ",CORDONED" : "") +
                              (n.stopping() ? ",STOPPING" : "");
    rows.push_back({n.id(), state, gpus, std::to_string(n.resources().cpu_slots()),
                    Bytes(n.resources().memory_bytes()),
                    Age(Micros(n.last_heartbeat_time()), now_micros) + " ago", n.address()});
  }
  return RenderTable({"NODE", "STATE", "GPUS", "CPU_SLOTS", "MEMORY", "HEARTBEAT", "ADDRESS"},
                     rows);
}

std::string DrainSummary(const v1::DrainNodeResponse& resp) {
  std::string out = "node " + resp.node().id() + " cordoned: no new ranks are placed there";
  if (resp.job_ids().empty()) return out + "; no running job had ranks there\n";
  out += "; asked to checkpoint at their next step and stop (then queued again):";
  for (const std::string& id : resp.job_ids()) out += " " + id;
  return out + "\n";
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
