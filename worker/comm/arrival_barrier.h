// The arrival barrier that precedes the creation of every process group: each member announces
// itself on the rendezvous KV and waits for all the others, so that a rank that never comes
// (crashed, never launched, stuck in an earlier group) is reported by name within a timeout
// instead of leaving its peers blocked inside Gloo/NCCL bootstrap.
//
// Keys: "<ns><group>/arrived/<group rank>" = "<world rank>". Keys are not removed afterwards; a
// new run attempt starts from an empty KV namespace, and a group must not be created twice under
// one namespace (use a different `ns`).
//
// Pure C++ on KvClient (no LibTorch). Stateless and thread-safe.
#ifndef DHP_WORKER_COMM_ARRIVAL_BARRIER_H_
#define DHP_WORKER_COMM_ARRIVAL_BARRIER_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "worker/comm/kv_client.h"
#include "common/layout.h"

namespace dhp::comm {

// Key of a member's arrival.
std::string ArrivalKey(const std::string& ns, const std::string& group, int group_rank);

// Announces `world_rank` (a member of `group`) and waits up to `timeout` for every member.
// `display_name` is how errors name the group (defaults to group.name), e.g. "world (also
// vision, text)". On timeout: DEADLINE_EXCEEDED such as
//   "group text.tp0 (size 2): rank 1 (world rank 3) did not arrive within 5000 ms"
//   "group world (size 4): ranks 2 (world rank 2), 3 (world rank 3) did not arrive within ..."
// Other KV failures are returned with the group named. FAILED_PRECONDITION if `world_rank` is
// not a member of `group` (a caller bug, but reported, not crashed).
absl::Status ArrivalBarrier(KvClient& kv, const std::string& ns, const GroupSpec& group,
                            int world_rank, std::chrono::milliseconds timeout,
                            const std::string& display_name = "");

// Key of a member's report that its backend finished connecting.
std::string ConnectedKey(const std::string& ns, const std::string& group, int group_rank);

// The same barrier after the backend of `group` was constructed on this rank. Gloo's TCP
// handshake is asymmetric: the connecting side of a pair is done once it has written, while the
// listening side still reads. A rank that returned at once and then destroyed its group (or
// exited) closed sockets its peers were still reading ("Connection closed by peer"). After this
// barrier every member has finished connecting. Keys "<ns><group>/connected/<group rank>"; a
// member that never reports is named as "did not finish connecting within N ms".
absl::Status ConnectedBarrier(KvClient& kv, const std::string& ns, const GroupSpec& group,
                              int world_rank, std::chrono::milliseconds timeout,
                              const std::string& display_name = "");

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_ARRIVAL_BARRIER_H_
