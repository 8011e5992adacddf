// Test helper: runs one function per rank, each on its own thread, as in-process stand-ins for
// rank processes (each rank builds its own Gloo process groups over a shared InMemoryKvClient).
// Exceptions escaping a rank become gtest failures naming the rank. Thread-safe.
#ifndef DHP_WORKER_COMM_RANK_THREADS_H_
#define DHP_WORKER_COMM_RANK_THREADS_H_

#include <functional>

namespace dhp::comm {

// Sets LibTorch to one intra-op thread, runs fn(0) ... fn(n-1) concurrently and joins them.
void RunRanks(int n, const std::function<void(int rank)>& fn);

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_RANK_THREADS_H_
