// Identifiers for jobs and other records: a prefix and 13 lower-case hex digits
// ("j-0a1b2c3d4e5f6"). The first 10 digits are the milliseconds since 2024-01-01 UTC and the
// last 3 are random, so ids sort by creation time: the store's indexes keyed by job id then
// grow at their end, as a log does, instead of taking a write at a random page per index and
// submit. Ids made by one process increase strictly (within a millisecond, or across a step
// back of the clock, the next id is the previous plus one); across processes the random bits
// and the store's UNIQUE constraints catch a collision. The time field wraps in 2058.
// "j-" and 13 digits are 15 characters: std::string keeps them inline (no allocation), which
// matters where every heartbeat copies job ids.
// Thread-safe.
#ifndef DHP_COMMON_IDS_H_
#define DHP_COMMON_IDS_H_

#include <cstdint>
#include <string>

namespace dhp {

std::string NewId(const std::string& prefix);

// NewId's digits for `millis` since the Unix epoch and `random` (its low 12 bits), given the
// previous id's value `last` (updated): for tests, and NewId's own arithmetic.
uint64_t NextIdBits(int64_t millis, uint64_t random, uint64_t* last);

// True when `id` (a job id) is safe as one path component, as rank logs use it: 1-128
// characters of A-Z a-z 0-9 _ . -, not "." and without "..".
bool IsPathSafeId(const std::string& id);

// How IsPathSafeId's rule reads in error messages.
inline constexpr char kPathSafeIdRule[] = "1-128 characters of A-Z a-z 0-9 _ . -, no \"..\"";

}  // namespace dhp

#endif  // DHP_COMMON_IDS_H_
