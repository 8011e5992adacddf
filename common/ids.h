// Random identifiers for jobs and other records: a prefix and 12 lower-case hex digits
// ("j-3f9a2c1b7d40"). 48 random bits; the store's UNIQUE constraints catch the rare collision.
// Thread-safe.
#ifndef DHP_COMMON_IDS_H_
#define DHP_COMMON_IDS_H_

#include <string>

namespace dhp {

std::string NewId(const std::string& prefix);

}  // namespace dhp

#endif  // DHP_COMMON_IDS_H_
