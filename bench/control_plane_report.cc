#include "bench/control_plane_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "bench/bench_util.h"

namespace dhp::bench {
namespace {

using Json = nlohmann::json;
constexpr const char* kNone = "—";

// The value at JSON pointer `ptr`, or nullptr when it is missing or null.
const Json* At(const Json& j, const std::string& ptr) {
  const Json::json_pointer p(ptr);
  if (!j.contains(p)) return nullptr;
  const Json& v = j.at(p);
  return v.is_null() ? nullptr : &v;
}

std::string Num(const Json& j, const std::string& ptr, int digits) {
  const Json* v = At(j, ptr);
  return v != nullptr && v->is_number() ? Fixed(v->get<double>(), digits) : kNone;
}

std::string Int(const Json& j, const std::string& ptr) {
  const Json* v = At(j, ptr);
  return v != nullptr && v->is_number() ? std::to_string(v->get<int64_t>()) : kNone;
}

std::string Mib(const Json& j, const std::string& ptr) {
  const Json* v = At(j, ptr);
  if (v == nullptr || !v->is_number() || v->get<double>() < 0) return kNone;
  return Fixed(v->get<double>() / 1048576.0, 1);
}

// "12 s" or "NO after 180 s: 3,000/4,000 registered, 1,200 jobs not RUNNING".
std::string RampCell(const Json& c) {
  if (c.contains("error")) return "controller did not start";
  if (c["mode"] == "queued") {
    return "fill " + Int(c, "/fill/ok") + " in " + Num(c, "/fill/seconds", 0) + " s (" +
           Num(c, "/fill/ok_per_s", 0) + " jobs/s, p99 " + Num(c, "/fill/p99_ms", 1) + " ms)";
  }
  const Json* complete = At(c, "/ramp/complete");
  if (complete != nullptr && complete->get<bool>()) return Num(c, "/ramp/seconds", 0) + " s";
  std::string s = "NO after " + Num(c, "/ramp/seconds", 0) +
                  " s: " + Int(c, "/ramp/nodes_registered") + "/" + Int(c, "/nodes") +
                  " registered";
  if (c["mode"] == "full") {
    const Json* tallied = At(c, "/ramp/jobs_not_running/ok");
    s += ", " + Int(c, "/ramp/jobs_submitted") + " submitted, " +
         (tallied != nullptr && tallied->get<bool>() ? Int(c, "/ramp/jobs_not_running/not_running")
                                                     : std::string("?")) +
         " not RUNNING";
  }
  return s;
}

// "0 / 0": node LOST events inside the window / nodes LOST at its end (ListNodes).
std::string LostCell(const Json& c) {
  if (c["mode"] == "queued") return kNone;
  const Json* ok = At(c, "/end/lost_events/ok");
  const std::string events =
      ok != nullptr && ok->get<bool>()
          ? Int(c, "/end/lost_events/lost_in_window") + " (" + Int(c, "/end/lost_events/lost") + ")"
          : "?";
  return events + " / " + Int(c, "/end/nodes/lost");
}

std::string Row(const Json& c) {
  const bool queued = c["mode"] == "queued";
  const std::string unit = queued ? "submit" : "heartbeat";
  std::ostringstream r;
  r << "| " << c["case"].get<std::string>() << " | " << RampCell(c) << " | ";
  // A case stopped before its window shows what its ramp-up saw, marked "ramp:".
  const bool windowed = At(c, "/window") != nullptr;
  const std::string hb = windowed ? "/window" : "/ramp";
  const std::string mark = windowed ? "" : "ramp: ";
  const std::string peaks = windowed ? "/window/controller"
                            : queued ? "/fill/controller"
                                     : "/ramp/controller";
  if (queued) {
    r << kNone << " | " << kNone << " | " << kNone << " | " << kNone << " | ";
  } else {
    r << mark << Num(c, hb + "/heartbeats/ok_per_s", 0);
    if (At(c, hb + "/progress/ok_per_s") != nullptr) {
      r << " (+" << Num(c, hb + "/progress/ok_per_s", 0) << ")";
    }
    r << " | " << mark
      << Num(c, hb + "/heartbeats/p50_ms", 1) << " / " << Num(c, hb + "/heartbeats/p99_ms", 1)
      << " / " << Num(c, hb + "/heartbeats/max_ms", 0) << " | " << Int(c, hb + "/heartbeats/failed")
      << " + " << Int(c, hb + "/heartbeats/deadline_exceeded") << " | " << LostCell(c) << " | ";
  }
  r << Num(c, "/window/controller_cpu_us_per_" + unit, 0) << " / "
    << Num(c, "/window/loop_thread/cpu_us_per_" + unit, 0) << " | "
    << Num(c, "/window/loop_thread/busy_percent", 0) << " | " << mark
    << Int(c, peaks + "/threads_peak") << " | " << mark << Num(c, peaks + "/rss_peak_mib", 0)
    << " | " << Mib(c, "/end/store/db_bytes") << " / " << Mib(c, "/end/store/wal_bytes") << " | "
    << Num(c, "/window/probe_get/p99_ms", 1) << " | ";
  if (queued) {
    r << Num(c, "/window/submit/p99_ms", 1) << " (" << Num(c, "/window/submit/ok_per_s", 0)
      << " jobs/s)";
  } else {
    r << Num(c, "/window/probe_submit/p99_ms", 1);
  }
  r << " | " << Num(c, "/window/generator_cores", 2) << " / ";
  if (queued) {
    r << kNone << " / " << kNone;
  } else {
    r << mark << Num(c, hb + "/send_lag/p99_ms", 1) << " / "
      << Num(c, hb + "/send_lag/max_heartbeat_gap_ms", 0);
  }
  // Slightly negative when the machine was otherwise idle: three clocks, tick-rounded.
  const Json* other = At(c, "/window/other_processes_cores");
  r << " | " << (other != nullptr ? Fixed(std::max(0.0, other->get<double>()), 2) : kNone)
    << " |\n";
  return r.str();
}

const char* kTableHead =
    "| case | ramp-up | heartbeats/s (+ progress reports/s) | heartbeat p50 / p99 / max ms | "
    "heartbeats failed + timed out | LOST events in window (all) / nodes LOST at end | controller CPU µs per "
    "heartbeat (or submit): process / loop thread | loop thread busy % | controller threads "
    "(peak) | RSS peak MiB | db / wal MiB | GetJob p99 ms | SubmitJob p99 ms | generator "
    "cores / send lag p99 ms / longest gap between an agent's heartbeats ms | other processes, "
    "cores |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

// "35 kB" or "18.7 MB".
std::string PageSize(double bytes) {
  return bytes < 1e6 ? Fixed(bytes / 1e3, 0) + " kB" : Fixed(bytes / 1e6, 1) + " MB";
}

// "/metrics scraped every 10 s in the window: 4 scrapes (0 failed), p50 850.2 ms, max 980.4 ms,
// page 18.7 MB"; empty when the case had no scraper.
std::string ScrapeNote(const Json& c) {
  const Json* s = At(c, "/window/scrapes");
  if (s == nullptr) return "";
  std::ostringstream n;
  n << "/metrics scraped every " << (*s)["every_s"].get<double>()
    << " s in the window: " << Int(*s, "/count") << " scrapes (" << Int(*s, "/failed")
    << " failed), p50 " << Num(*s, "/p50_ms", 1) << " ms, max " << Num(*s, "/max_ms", 1)
    << " ms, page " << PageSize((*s)["bytes_max"].get<double>());
  return n.str();
}

// "the controller's own p99 (bucket bounds from its /metrics): GetJob <= 25 ms (waiting for the
// loop <= 5), ..."; empty when the case has none.
std::string ServerSideNote(const Json& c) {
  const Json* s = At(c, "/window/server_side");
  if (s == nullptr) return "";
  auto bound = [&](const std::string& ptr) {
    const Json* v = At(*s, ptr);
    if (v == nullptr) return std::string(kNone);
    return v->is_string() ? "> 10000" : Fixed(v->get<double>(), 1);
  };
  std::ostringstream n;
  n << "the controller's own p99 (bucket bounds from its /metrics, ms):";
  const char* sep = " ";
  for (const char* m : {"Heartbeat", "HeartbeatBatch", "GetJob", "SubmitJob"}) {
    const std::string at = std::string("/") + m;
    if (At(*s, at + "/duration_p99_le_ms") == nullptr) continue;
    n << sep << m << " <= " << bound(at + "/duration_p99_le_ms") << " (waiting for the loop <= "
      << bound(at + "/loop_wait_p99_le_ms") << ")";
    sep = ", ";
  }
  n << sep << "the loop's lag <= " << bound("/loop_lag_p99_le_ms");
  if (const Json* causes = At(*s, "/loop_lag_cause_p99_le_ms")) {
    n << " (by cause:";
    for (const auto& [cause, v] : causes->items()) {
      n << " " << cause << " <= " << bound("/loop_lag_cause_p99_le_ms/" + cause);
    }
    n << ")";
  }
  if (const Json* busy = At(*s, "/loop_busy_s"); busy != nullptr && !busy->empty()) {
    n << "; the loop's time between the pages, s:";
    for (const auto& [work, v] : busy->items()) {
      n << " " << work << " " << Fixed(v.get<double>(), 2);
    }
  }
  if (const Json* ticks = At(*s, "/tick_phases"); ticks != nullptr && !ticks->empty()) {
    n << "; periodic phases, mean / p99 ms:";
    for (const auto& [phase, v] : ticks->items()) {
      n << " " << phase << " " << Num(v, "/mean_ms", 2) << " / <= "
        << bound("/tick_phases/" + phase + "/p99_le_ms");
    }
  }
  return n.str();
}

// Notes under a controller's table: aborted or incomplete cases, /metrics scrapes, first errors.
std::string Notes(const std::vector<const Json*>& cases) {
  std::ostringstream n;
  for (const Json* c : cases) {
    const std::string name = (*c)["case"].get<std::string>();
    if (const Json* e = At(*c, "/error"))
      n << "- " << name << ": " << e->get<std::string>() << "\n";
    if (const Json* a = At(*c, "/aborted")) {
      n << "- " << name << ": stopped early, " << a->get<std::string>() << "\n";
    }
    const Json* tally = At(*c, "/end/jobs_not_running/by_state");
    if (tally != nullptr && !tally->empty()) {
      n << "- " << name << ": jobs not RUNNING at the end " << tally->dump();
      if (At(*c, "/window/probe_submit/ok") != nullptr) {
        n << " (the prober submitted " << Int(*c, "/window/probe_submit/ok")
          << " in the window; on a full cluster they cannot be placed)";
      }
      n << "\n";
    }
    const std::string scrapes = ScrapeNote(*c);
    if (!scrapes.empty()) n << "- " << name << ": " << scrapes << "\n";
    const std::string server = ServerSideNote(*c);
    if (!server.empty()) n << "- " << name << ": " << server << "\n";
    for (const char* p : {"/window/heartbeats/first_error", "/window/probe_get/first_error",
                          "/window/probe_submit/first_error", "/window/scrapes/first_error",
                          "/window/submit/first_error", "/ramp/submit/first_error",
                          "/end/lost_events/error"}) {
      if (const Json* e = At(*c, p))
        n << "- " << name << ": " << (p + 1) << ": " << e->get<std::string>() << "\n";
    }
    if (const Json* ex = At(*c, "/controller_exit")) {
      const std::string s = ex->get<std::string>();
      if (s != "exit 0") n << "- " << name << ": the controller ended with " << s << "\n";
    }
  }
  return n.str();
}

std::string SideBySide(const Json& run, const std::vector<std::string>& labels) {
  std::ostringstream md;
  md << "\n### Side by side\n\n| case | metric |";
  for (const std::string& l : labels) md << " " << l << " |";
  md << "\n|---|---|";
  for (size_t i = 0; i < labels.size(); ++i) md << "---:|";
  md << "\n";
  std::vector<std::string> names;
  for (const Json& c : run["cases"]) {
    const std::string n = c["case"].get<std::string>();
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  struct Metric {
    std::string name, ptr;
    int digits;
  };
  const std::vector<Metric> node_metrics = {
      {"ramp-up s", "/ramp/seconds", 0},
      {"jobs submitted in ramp-up", "/ramp/jobs_submitted", 0},
      {"of them not RUNNING at its end", "/ramp/jobs_not_running/not_running", 0},
      {"heartbeats/s", "/window/heartbeats/ok_per_s", 0},
      {"heartbeat p99 ms", "/window/heartbeats/p99_ms", 1},
      {"controller µs/heartbeat", "/window/controller_cpu_us_per_heartbeat", 0},
      {"loop µs/heartbeat", "/window/loop_thread/cpu_us_per_heartbeat", 0},
      {"threads peak", "/window/controller/threads_peak", 0},
      {"LOST events (all)", "/end/lost_events/lost", 0},
      {"GetJob p99 ms", "/window/probe_get/p99_ms", 1}};
  const std::vector<Metric> queued_metrics = {
      {"fill jobs/s", "/fill/ok_per_s", 0},
      {"submits/s", "/window/submit/ok_per_s", 0},
      {"submit p99 ms", "/window/submit/p99_ms", 1},
      {"controller µs/submit", "/window/controller_cpu_us_per_submit", 0},
      {"GetJob p99 ms", "/window/probe_get/p99_ms", 1}};
  for (const std::string& n : names) {
    const bool queued = n.find("queued") != std::string::npos;
    for (const Metric& m : queued ? queued_metrics : node_metrics) {
      if (m.ptr.rfind("/ramp/jobs", 0) == 0 && n.find("full") == std::string::npos)
        continue;  // empty
      md << "| " << n << " | " << m.name << " |";
      for (const std::string& l : labels) {
        std::string cell = kNone;
        for (const Json& c : run["cases"]) {
          if (c["case"] == n && c["controller"] == l) cell = Num(c, m.ptr, m.digits);
        }
        md << " " << cell << " |";
      }
      md << "\n";
    }
  }
  return md.str();
}

// For the columns' text: where the scraper's cost shows, when there was one.
std::string ScrapesInCpu(const Json& run) {
  const Json* every = At(run, "/options/scrape_every_s");
  if (every == nullptr || every->get<double>() <= 0) return "";
  return "; node cases' windows also hold /metrics scrapes (--scrape-every-s, in the notes "
         "under each table): the heartbeat latencies and the controller's CPU include what they "
         "cost, the generator's CPU the scraper's own";
}

}  // namespace

std::string ControlPlaneMarkdown(const Json& run) {
  const Json& m = run["machine"];
  std::ostringstream md;
  md << "## control_plane_bench: simulated agents against a real dhp-controller over gRPC\n\n"
     << m["date_utc"].get<std::string>() << ", " << m["hostname"].get<std::string>() << ", "
     << m["nproc"].get<int>() << " CPUs (" << m["cpu_model"].get<std::string>() << "), "
     << m["kernel"].get<std::string>() << "; shared machine: load average "
     << m["loadavg_at_start"].get<std::string>().substr(0, 14) << " at start, "
     << m.value("loadavg_at_end", std::string("?")).substr(0, 14) << " at end.\n\n"
     << "Rerun: `" << run["command"].get<std::string>() << "`\n\n"
     << "Options: `" << run["options"].dump() << "`\n\n"
     << run["generator"].get<std::string>() << "\n\n"
     << "Columns. ramp-up: time until every node registered (and, full, every job RUNNING), or "
        "what it reached by the ramp-up limit (the window is measured anyway). Heartbeats: over "
        "the window, latency of every heartbeat answered (timed-out ones at their 5 s "
        "deadline); in brackets, ReportProgress calls answered per second. LOST: node.state -> LOST events stamped inside the window (all of the "
        "case, ramp-up included, until the agents stop); every simulated agent heartbeats on time "
        "(see the send lag), "
        "so every LOST is spurious. Controller CPU per heartbeat: its CPU over the window "
        "(/proc) / heartbeats answered, the process and its loop thread (found by name, else "
        "its busiest thread), with the progress reports and the prober's calls in it (at a "
        "few hundred nodes the prober's "
     << Num(run, "/options/probe_get_per_s", 0) << " GetJob/s and "
     << Num(run, "/options/probe_submit_per_s", 0)
     << " SubmitJob/s are a large share of it)" << ScrapesInCpu(run)
     << ". Threads and RSS: peak of 4 samples/s. GetJob / SubmitJob p99: the prober's calls. "
        "Generator: this process's CPU (agents, prober, "
        "sampler) in cores, the p99 delay of heartbeats sent behind their schedule, and the "
        "longest an agent went without sending one (the interval plus the previous answer's "
        "latency; past the controller's heartbeat timeout a LOST would be the generator's "
        "fault). Other "
        "processes: cores that everything else on this shared machine used meanwhile "
        "(noise).\n";
  std::vector<std::string> labels;
  for (const Json& c : run["cases"]) {
    const std::string l = c["controller"].get<std::string>();
    if (std::find(labels.begin(), labels.end(), l) == labels.end()) labels.push_back(l);
  }
  for (const std::string& l : labels) {
    std::vector<const Json*> mine;
    std::string binary, heartbeats;
    bool relayed = false;
    for (const Json& c : run["cases"]) {
      if (c["controller"] == l) {
        mine.push_back(&c);
        binary = c["binary"].get<std::string>();
        if (c.contains("heartbeats_on")) heartbeats = c["heartbeats_on"].get<std::string>();
        relayed = relayed || c.value("progress_relayed", false);
      }
    }
    md << "\n### " << l << ": `" << binary << "`";
    if (!heartbeats.empty()) md << ", heartbeats on " << heartbeats;
    if (relayed) md << ", the ranks' progress relayed in them";
    md << "\n\n" << kTableHead;
    for (const Json* c : mine) md << Row(*c);
    const std::string notes = Notes(mine);
    if (!notes.empty()) md << "\n" << notes;
  }
  if (labels.size() > 1) md << SideBySide(run, labels);
  return md.str();
}

bool WriteControlPlaneResults(const std::string& out_dir, const Json& run) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  Json j = run;
  j["markdown"] = ControlPlaneMarkdown(run);
  std::ofstream md(out_dir + "/control_plane.md");
  md << j["markdown"].get<std::string>();
  std::ofstream js(out_dir + "/control_plane.json");
  js << j.dump(2) << "\n";
  if (!md || !js) {
    std::cerr << "control_plane_bench: cannot write " << out_dir << "/control_plane.{md,json}\n";
    return false;
  }
  return true;
}

}  // namespace dhp::bench
