// dhpctl's commands that keep talking to the controller: following a job's events (submit and
// resume --follow, watch) with its progress line, printing its ranks' logs (logs [-f]), the
// live view of its ranks (top), and exports, local (dhp-ckpt run here) or on the controller.
// Each returns dhpctl's exit code.
#ifndef DHP_API_DHPCTL_FOLLOW_H_
#define DHP_API_DHPCTL_FOLLOW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/client.h"
#include "api/dhpctl/export.h"
#include "api/dhpctl/session.h"
#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

// Streams a job's events (from the beginning) until it is final; returns the exit code.
// In table format, polls the job (via `poll`, a client with a short deadline) twice a second
// and shows its progress line while it is RUNNING. Ends with the summary on stderr.
int Follow(api::DhpClient& client, api::DhpClient& poll, const std::string& job_id,
           const Globals& g);

// `dhpctl logs`: prints a job's rank output (complete lines; "[rank N] " before each when
// several ranks are shown). With `follow`, polls every 500 ms until the attempt has ended and
// everything is printed.
int Logs(api::DhpClient& client, const std::string& job_id, const std::vector<int32_t>& ranks,
         int32_t attempt, bool follow, const Globals& g);

// `dhpctl top`: GetJob every `interval_ms` and show TopView, redrawn in place on a terminal
// (clear screen + home), one snapshot after another into a pipe; -o json|yaml prints the
// GetJobResponse instead (one JSON line per snapshot when repeating). Ends after one snapshot
// with `once`, when the job is final, or on Ctrl-C (exit 0). Rides out a controller restart
// (up to a minute) while repeating.
int Top(api::DhpClient& client, const std::string& job_id, int interval_ms, bool once,
        const Globals& g);

// `dhpctl export`: the checkpoint from GetJob, then dhp-ckpt export --hf-dir.
int Export(api::DhpClient& client, const std::string& job_id, std::optional<int64_t> id,
           const std::string& dhp_ckpt_flag, const ExportFlags& flags, const Globals& g);

// An export on the controller: printed as it is, or with `wait` polled every second until it
// is SUCCEEDED (exit 0) or FAILED (exit 1), the first state on stderr.
int FollowExport(api::DhpClient& client, v1::Export e, bool wait, const Globals& g);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_FOLLOW_H_
