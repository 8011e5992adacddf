// What `dhpctl top JOB` shows: a job's header and one row per rank of its current run, from
// GetJob (the job row plus what each rank last reported, GetJobResponse.ranks):
//
//   job j-1a2b3c4d5e6f  tiny-cpu  RUNNING  attempt 1  restarts 0
//   step 120/200 (60%)  loss 3.214  lr 0.001  grad norm 0.82  1.2k tok/s  0.52 s/step  ETA 0:42
//
//   RANK NODE   STAGES      STEP TOK/S V/T FWD ms BWD ms COMM ms OPT ms MEM MiB   MFU V/T WAITING
//   0    node-a vision+text 120  400/1.2k  101    205    52      21     286 rss   -       -
//   1    node-b text        119  -/1.1k    300    -      -       -      1024/2048 -/41.5% -
//
// TOK/S V/T: the rank's vision / text tokens per second (rank metrics vision_tokens_per_s,
// text_tokens_per_s). FWD BWD COMM OPT: the step time split (forward_s, backward_s, comm_s,
// optimizer_s; or the sum of the per-stage keys) in milliseconds. MEM: allocated/peak MiB from
// the CUDA caching allocator on GPU ranks, else the resident set ("rss"). MFU V/T: the rank's
// model FLOPs utilisation of each stage it hosts (mfu_vision, mfu_text; GPU ranks, or CPU ranks
// given a peak by the agent's --peak-tflops). WAITING: what the rank's watchdog says it waits
// on, or how long the rank has been silent. "-": not reported.
// Pure functions; thread-safe.
#ifndef DHP_API_DHPCTL_TOP_H_
#define DHP_API_DHPCTL_TOP_H_

#include <optional>
#include <string>

#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

// A rank silent this long is shown as such in WAITING.
constexpr double kTopSilentSeconds = 10;

// The whole screen. `width` > 0 cuts every line to that many columns.
std::string TopView(const v1::GetJobResponse& resp, int width = 0);

// The first two lines (job, then progress).
std::string TopHeader(const v1::GetJobResponse& resp);

// "1s", "500ms", "2" (seconds), "1.5s", "1m" -> milliseconds; nullopt when malformed or not
// positive.
std::optional<int> ParseInterval(const std::string& text);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_TOP_H_
