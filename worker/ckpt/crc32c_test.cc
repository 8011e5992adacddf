#include "worker/ckpt/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dhp::ckpt {
namespace {

// Bit-at-a-time reference (the definition), to check the table-driven version against.
uint32_t ReferenceCrc32c(const std::vector<uint8_t>& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

TEST(Crc32cTest, StandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xe3069283u);
  EXPECT_EQ(Crc32cHex(Crc32c(s.data(), s.size())), "e3069283");
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

// RFC 3720 (iSCSI) appendix B.4 vectors.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i), dec[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46dd794eu);
  EXPECT_EQ(Crc32c(dec.data(), 32), 0x113fdb5cu);
}

TEST(Crc32cTest, MatchesBitwiseReferenceAndExtendsAcrossAnySplit) {
  std::mt19937 rng(3);
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 1000u}) {
    std::vector<uint8_t> data(n);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const uint32_t whole = Crc32c(data.data(), n);
    EXPECT_EQ(whole, ReferenceCrc32c(data)) << n;
    for (size_t cut = 0; cut <= n; cut += (n > 64 ? 37 : 1)) {
      const uint32_t a = Crc32c(data.data(), cut);
      EXPECT_EQ(Crc32cExtend(a, data.data() + cut, n - cut), whole) << n << " cut " << cut;
    }
  }
}

TEST(Crc32cTest, HexIsEightLowerCaseDigits) {
  EXPECT_EQ(Crc32cHex(0), "00000000");
  EXPECT_EQ(Crc32cHex(0xABCDEF01u), "abcdef01");
}

}  // namespace
}  // namespace dhp::ckpt
