#include "worker/comm/split_sizes.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp::comm {
namespace {

int64_t Sum(absl::Span<const int64_t> rows) {
  int64_t s = 0;
  for (int64_t r : rows) s += r;
  return s;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> EvenRows(int64_t total, int size, const std::string& what) {
  if (size < 1 || total < 0 || total % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", total,
                                                   " rows do not split evenly over ", size,
                                                   " ranks; pass per-rank row counts"));
  }
  return std::vector<int64_t>(size, total / size);
}

absl::Status CheckRows(absl::Span<const int64_t> rows, int size, int64_t expect_total,
                       const std::string& what) {
  if (static_cast<int>(rows.size()) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", rows.size(), " row counts given for a group of ", size));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": row count ", rows[r], " of rank ", r, " is negative"));
    }
  }
  if (expect_total >= 0 && Sum(rows) != expect_total) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": row counts [", absl::StrJoin(rows, ", "), "] sum to ", Sum(rows),
                     ", not the ", expect_total, " rows of the input"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ResolveGatherRows(absl::Span<const int64_t> rows, int size,
                                                       int rank, int64_t local_rows,
                                                       const std::string& what) {
  if (rows.empty()) return std::vector<int64_t>(size, local_rows);
  if (absl::Status s = CheckRows(rows, size, -1, what); !s.ok()) return s;
  if (rows[rank] != local_rows) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", rank, " has ", local_rows,
                                                   " rows but its row count says ", rows[rank]));
  }
  return std::vector<int64_t>(rows.begin(), rows.end());
}

absl::StatusOr<std::vector<int64_t>> ResolveScatterRows(absl::Span<const int64_t> rows, int size,
                                                        int64_t total, const std::string& what) {
  if (rows.empty()) return EvenRows(total, size, what);
  if (absl::Status s = CheckRows(rows, size, total, what); !s.ok()) return s;
  return std::vector<int64_t>(rows.begin(), rows.end());
}

absl::StatusOr<AllToAllRows> ResolveAllToAllRows(absl::Span<const int64_t> send_rows,
                                                 absl::Span<const int64_t> recv_rows, int size,
                                                 int64_t input_rows, const std::string& what) {
  AllToAllRows out;
  if (send_rows.empty() && recv_rows.empty()) {
    absl::StatusOr<std::vector<int64_t>> even = EvenRows(input_rows, size, what);
    if (!even.ok()) return even.status();
    out.send = *even;
    out.recv = *even;
    out.even = true;
    return out;
  }
  if (send_rows.empty() || recv_rows.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": give both send and receive row counts, or neither"));
  }
  if (absl::Status s = CheckRows(send_rows, size, input_rows, absl::StrCat(what, " (send)"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRows(recv_rows, size, -1, absl::StrCat(what, " (receive)")); !s.ok()) {
    return s;
  }
  out.send.assign(send_rows.begin(), send_rows.end());
  out.recv.assign(recv_rows.begin(), recv_rows.end());
  out.even = AllEqual(out.send) && AllEqual(out.recv) && out.send == out.recv;
  return out;
}

std::vector<int64_t> RowOffsets(absl::Span<const int64_t> rows) {
  std::vector<int64_t> offsets(rows.size() + 1, 0);
  for (size_t r = 0; r < rows.size(); ++r) offsets[r + 1] = offsets[r] + rows[r];
  return offsets;
}

bool AllEqual(absl::Span<const int64_t> rows) {
  return std::adjacent_find(rows.begin(), rows.end(), std::not_equal_to<int64_t>()) == rows.end();
}

}  // namespace dhp::comm
