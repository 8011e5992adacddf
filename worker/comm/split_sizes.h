// Row-count bookkeeping shared by the communicators and the autograd collectives: how many rows
// (entries along the split dimension) each rank of a group sends, receives or owns, for even and
// uneven splits (Ulysses splits the vision sequence at window boundaries, so shards differ).
//
// A "rows" list has one entry per group rank, each >= 0. Errors are InvalidArgument naming the
// operation and the offending value. Pure C++ (no LibTorch); stateless and thread-safe.
#ifndef DHP_WORKER_COMM_SPLIT_SIZES_H_
#define DHP_WORKER_COMM_SPLIT_SIZES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dhp::comm {

// `total` rows split evenly over `size` ranks; InvalidArgument if `size` does not divide it.
absl::StatusOr<std::vector<int64_t>> EvenRows(int64_t total, int size, const std::string& what);

// Checks `rows` has `size` non-negative entries and, if expect_total >= 0, sums to it.
absl::Status CheckRows(absl::Span<const int64_t> rows, int size, int64_t expect_total,
                       const std::string& what);

// all_gather: rows per rank (given, or `local_rows` for every rank when empty); checks that
// entry `rank` equals local_rows.
absl::StatusOr<std::vector<int64_t>> ResolveGatherRows(absl::Span<const int64_t> rows, int size,
                                                       int rank, int64_t local_rows,
                                                       const std::string& what);

// reduce_scatter / scatter: the chunk of each rank in an input of `total` rows (given, or even
// when empty).
absl::StatusOr<std::vector<int64_t>> ResolveScatterRows(absl::Span<const int64_t> rows, int size,
                                                        int64_t total, const std::string& what);

// all_to_all: send and receive rows (both given, or both empty for an even split of
// `input_rows`).
struct AllToAllRows {
  std::vector<int64_t> send;
  std::vector<int64_t> recv;
  bool even = false;
};
absl::StatusOr<AllToAllRows> ResolveAllToAllRows(absl::Span<const int64_t> send_rows,
                                                 absl::Span<const int64_t> recv_rows, int size,
                                                 int64_t input_rows, const std::string& what);

// Exclusive prefix sums: offsets[r] = rows[0] + ... + rows[r-1]; offsets has rows.size()+1
// entries (the last is the total).
std::vector<int64_t> RowOffsets(absl::Span<const int64_t> rows);

// True if every entry is equal (or the list is empty).
bool AllEqual(absl::Span<const int64_t> rows);

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_SPLIT_SIZES_H_
