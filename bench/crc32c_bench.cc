// crc32c_bench: checksum speed of the CRC-32C implementations (worker/ckpt/crc32c.h) that
// checkpoint shards are written and verified with (issue 15 §4): the table (slicing by 8), the
// CPU's CRC32C instruction on one stream, and on three interleaved streams (the default where
// the CPU has it), side by side in one run, one thread.
//
//   bazel run //bench:crc32c_bench -- [--mib 64] [--cache-kib 256] [--rounds 9]
//
// Two buffers of random bytes: --mib MiB (far larger than the caches: what checksumming a
// multi-GB shard sees, bounded by memory) and --cache-kib KiB (stays in L2: the code's own
// speed). Also the default entry point fed 1 MiB at a time, as worker/ckpt/shard_file.cc
// checksums a file. Each round times every implementation once on each buffer, in turn, so
// that the machine's load falls on all alike; the small buffer is checksummed repeatedly,
// --mib MiB per timing. Reference row: reading the buffer alone (xor of its 8-byte words), the
// ceiling for a checksum on this machine. GB/s = 1e9 bytes per second, median of the rounds;
// ratio = median of per-round (this / table). Every implementation's CRC of each buffer must
// agree, or the bench fails. Prints a Markdown table last and writes
// bench/results/crc32c.{md,json}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"
#include "worker/ckpt/crc32c.h"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using ckpt::Crc32cImpl;

constexpr size_t kMiB = size_t{1} << 20;

// The xor of the buffer's 8-byte words: a read of every byte and nothing else.
uint64_t XorWords(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    acc ^= w;
  }
  return acc;
}

struct Method {
  std::string name;
  std::function<uint64_t(const uint8_t*, size_t)> run;  // its result, so it cannot be elided
  bool is_crc = true;
};

struct Cell {  // one method on one buffer
  std::vector<double> gbps;    // per round
  std::vector<double> ratio;   // per round, to the table in the same round
  uint64_t result = 0;
};

// Seconds for `reps` passes of `m` over [p, p + n); the last pass's result into *result.
double TimeSeconds(const Method& m, const uint8_t* p, size_t n, int reps, uint64_t* result) {
  const auto t0 = Clock::now();
  uint64_t r = 0;
  for (int i = 0; i < reps; ++i) r = m.run(p, n);
  const std::chrono::duration<double> d = Clock::now() - t0;
  *result = r;
  return d.count();
}

std::string SizeName(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
                             : std::to_string(bytes >> 10) + " KiB";
}

int Main(int argc, char** argv) {
  int mib = 64;
  int cache_kib = 256;
  int rounds = 9;
  std::string out_dir = "bench/results";
  CLI::App app{"crc32c_bench: CRC-32C GB/s, table vs the CPU's instruction"};
  app.add_option("--mib", mib, "The large buffer, MiB (also the bytes per timing)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--cache-kib", cache_kib, "The cache-resident buffer, KiB")
      ->check(CLI::Range(1, 65536));
  app.add_option("--rounds", rounds, "Rounds (medians are reported)")->check(CLI::PositiveNumber);
  app.add_option("--out-dir", out_dir, "Where crc32c.md and crc32c.json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  const Json machine = MachineInfo();

  std::vector<Method> methods;
  for (Crc32cImpl impl :
       {Crc32cImpl::kTable, Crc32cImpl::kHardwareOneStream, Crc32cImpl::kHardware}) {
    if (!ckpt::Crc32cAvailable(impl)) {
      std::cerr << "crc32c_bench: " << ckpt::Crc32cImplName(impl)
                << " is not available on this CPU; not measured\n";
      continue;
    }
    methods.push_back({ckpt::Crc32cImplName(impl), [impl](const uint8_t* p, size_t n) {
                         return uint64_t{ckpt::Crc32cExtendWith(impl, 0, p, n)};
                       }});
  }
  methods.push_back({"Crc32cExtend in 1 MiB calls (as shard_file.cc reads files)",
                     [](const uint8_t* p, size_t n) {
                       uint32_t crc = 0;
                       for (size_t off = 0; off < n; off += kMiB) {
                         crc = ckpt::Crc32cExtend(crc, p + off, std::min(kMiB, n - off));
                       }
                       return uint64_t{crc};
                     }});
  methods.push_back({"memory read reference (xor of 8-byte words, no CRC)", XorWords, false});

  const size_t big = static_cast<size_t>(mib) << 20;
  const size_t small = std::min(static_cast<size_t>(cache_kib) << 10, big);
  std::vector<uint8_t> buf(big);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= big; i += 8) {
    const uint64_t w = rng();
    std::memcpy(buf.data() + i, &w, 8);
  }
  const std::vector<size_t> sizes = {big, small};

  // cells[s][m]; one untimed pass of each first (page faults, code and tables into cache).
  std::vector<std::vector<Cell>> cells(sizes.size(), std::vector<Cell>(methods.size()));
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (size_t m = 0; m < methods.size(); ++m) {
      cells[s][m].result = methods[m].run(buf.data(), sizes[s]);
    }
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int reps = static_cast<int>(std::max<size_t>(1, big / sizes[s]));
      double table_gbps = 0;
      for (size_t m = 0; m < methods.size(); ++m) {
        uint64_t result = 0;
        const double sec = TimeSeconds(methods[m], buf.data(), sizes[s], reps, &result);
        const double gbps = static_cast<double>(sizes[s]) * reps / sec * 1e-9;
        if (m == 0) table_gbps = gbps;
        cells[s][m].gbps.push_back(gbps);
        cells[s][m].ratio.push_back(gbps / table_gbps);
        if (result != cells[s][m].result) {
          std::cerr << "crc32c_bench: " << methods[m].name << " gave two results on one buffer\n";
          return 1;
        }
      }
    }
  }
  // Sanity: all CRCs of a buffer agree.
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (size_t m = 0; m < methods.size(); ++m) {
      if (methods[m].is_crc && cells[s][m].result != cells[s][0].result) {
        std::cerr << "crc32c_bench: " << methods[m].name << " and table disagree on "
                  << SizeName(sizes[s]) << "\n";
        return 1;
      }
    }
  }

  // ---- report -----------------------------------------------------------------------------
  const std::string load_end = Trim(ReadFile("/proc/loadavg"));
  const bool hw = ckpt::Crc32cAvailable(Crc32cImpl::kHardware);
  std::ostringstream md;
  md << "## crc32c_bench: CRC-32C checksum speed, table vs the CPU's CRC32C instruction\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"].get<int>()
     << " CPUs (" << machine["cpu_model"].get<std::string>() << ", CRC32C instruction: "
     << (hw ? "yes" : "no") << "), shared with other work: load average "
     << machine["loadavg_at_start"].get<std::string>() << " at start, " << load_end
     << " at end; one thread. `bazel run //bench:crc32c_bench -- --mib " << mib
     << " --cache-kib " << cache_kib << " --rounds " << rounds << "`.\n\n"
     << "Buffers of random bytes: " << SizeName(big) << " (larger than the caches: what a "
        "multi-GB checkpoint shard sees) and "
     << SizeName(small) << " (cache-resident, checksummed " << big / small
     << " times per timing). Each round times every implementation once per buffer, in "
        "turn. GB/s = 1e9 bytes/s, median (min-max) over "
     << rounds << " rounds; ratio to table = median of per-round ratios. All implementations "
        "gave the same CRC. The memory-read row only reads the buffer (xor of its 8-byte "
        "words): the ceiling for any checksum here. Crc32c() uses `"
     << ckpt::Crc32cImplName(ckpt::Crc32cDefaultImpl()) << "` on this machine.\n\n"
     << "| buffer | implementation | GB/s | min-max GB/s | ratio to table |\n"
     << "|---|---|---:|---:|---:|\n";
  Json results = Json::array();
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (size_t m = 0; m < methods.size(); ++m) {
      const Cell& c = cells[s][m];
      const auto [lo, hi] = std::minmax_element(c.gbps.begin(), c.gbps.end());
      md << "| " << SizeName(sizes[s]) << " | " << methods[m].name << " | "
         << Fixed(Median(c.gbps), 2) << " | " << Fixed(*lo, 2) << "-" << Fixed(*hi, 2) << " | "
         << Fixed(Median(c.ratio), 2) << " |\n";
      results.push_back({{"buffer_bytes", sizes[s]},
                         {"implementation", methods[m].name},
                         {"gbps_median", Median(c.gbps)},
                         {"gbps_per_round", c.gbps},
                         {"ratio_to_table_median", Median(c.ratio)},
                         {"crc32c", methods[m].is_crc ? ckpt::Crc32cHex(static_cast<uint32_t>(
                                                            c.result))
                                                      : ""}});
    }
  }

  Json j;
  j["benchmark"] = "crc32c_bench";
  j["machine"] = machine;
  j["machine"]["loadavg_at_end"] = load_end;
  j["machine"]["crc32c_instruction"] = hw;
  j["options"] = {{"mib", mib}, {"cache_kib", cache_kib}, {"rounds", rounds}};
  j["default_implementation"] = ckpt::Crc32cImplName(ckpt::Crc32cDefaultImpl());
  j["results"] = results;
  const std::string dir = InWorkspace(out_dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/crc32c.md") << md.str();
  std::ofstream(dir + "/crc32c.json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
