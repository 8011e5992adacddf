// Random identifiers for jobs and other records: a prefix and 12 lower-case hex digits
// ("j-3f9a2c1b7d40"). 48 random bits; the store's UNIQUE constraints catch the rare collision.
// Thread-safe.
#ifndef DHP_COMMON_IDS_H_
#define DHP_COMMON_IDS_H_

#include <string>

namespace dhp {

std::string NewId(const std::string& prefix);

// True when `id` (a job id) is safe as one path component, as rank logs use it: 1-128
// characters of A-Z a-z 0-9 _ . -, not "." and without "..".
bool IsPathSafeId(const std::string& id);

// How IsPathSafeId's rule reads in error messages.
inline constexpr char kPathSafeIdRule[] = "1-128 characters of A-Z a-z 0-9 _ . -, no \"..\"";

}  // namespace dhp

#endif  // DHP_COMMON_IDS_H_
