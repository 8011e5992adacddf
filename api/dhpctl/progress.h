// The training progress line that `dhpctl submit --follow`, `resume --follow` and `watch` show
// while a job is RUNNING, and the summary they print when it ends:
//
//   step 120/200 [############........] 60%  loss 3.214  1.2k tok/s  ETA 0:32
//
// ProgressConsole shares stdout between that line and the event lines: on a terminal the
// progress line is redrawn in place (\r) and cleared before an event line is printed; into a
// pipe or file it is printed as a plain line, at most every 5 s or when it crosses a 10%
// boundary.
//
// The formatting functions are pure. ProgressConsole is thread-safe (mu_ guards its state and
// the writes to its stream), so events and progress may come from different threads.
#ifndef DHP_API_DHPCTL_PROGRESS_H_
#define DHP_API_DHPCTL_PROGRESS_H_

#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

// 950 -> "950", 1234 -> "1.2k", 12345 -> "12k", 3.4e6 -> "3.4M", 5e9 -> "5.0G".
std::string HumanCount(double value);
// Seconds as "0:32", "12:05", "1:02:03"; "-" when negative or not finite.
std::string ClockDuration(double seconds);
// "[#####.....]" with `width` cells between the brackets; fraction clamped to [0, 1].
std::string ProgressBar(double fraction, int width);
// The fraction of total_steps done, in [0, 1]; 0 when total_steps is unknown.
double ProgressFraction(const v1::Job& job);
// The progress line of a job (see above). Unknown parts are left out: without total_steps
// there is no bar, percentage or ETA; loss needs a step, tok/s a throughput, ETA a step time.
std::string ProgressLine(const v1::Job& job);

// What the follow commands print once the job is final:
//
//   job j-1 ended SUCCEEDED: all steps done
//     steps:       200/200, final loss 1.234
//     checkpoint:  step 200, /ckpt/j-1/step-200
//   next: dhpctl logs j-1, dhpctl checkpoints j-1, dhpctl get j-1
//
// The checkpoint line names the newest COMPLETE checkpoint ("none" without one).
std::string FinalSummary(const v1::GetJobResponse& resp);

class ProgressConsole {
 public:
  static constexpr int64_t kPipeIntervalMicros = 5'000'000;

  // `tty`: `out` is a terminal; `width` its columns (0: unknown), lines are cut to fit.
  ProgressConsole(std::ostream& out, bool tty, int width = 0);

  // Prints one line of other output (an event), keeping the progress line below it.
  void Line(const std::string& line);
  // Shows a new progress line (`fraction` done, now_micros for the pipe throttle).
  void Progress(const std::string& line, double fraction, int64_t now_micros);
  // Removes the progress line from a terminal (before final output); no-op into a pipe.
  void Clear();

 private:
  void EraseLocked();
  void DrawLocked();

  std::ostream& out_;
  const bool tty_;
  const int width_;
  std::mutex mu_;              // guards the fields below and writes to out_
  std::string line_;           // the progress line shown (tty) or last printed (pipe)
  bool drawn_ = false;         // tty: line_ is on screen
  int64_t last_print_micros_ = 0;
  int last_decile_ = -1;
};

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_PROGRESS_H_
