#include "api/tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace dhp::api {
namespace {

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dhp-tls-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    pem_ = Write("a.pem", kPem);
    text_ = Write("token", "not a certificate\n");
  }
  void TearDown() override {
    for (const std::string& f : {pem_, text_}) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }
  std::string dir_, pem_, text_;
};

TEST_F(TlsFilesTest, ServerFilesAreReadWhenComplete) {
  absl::StatusOr<TlsPems> none = LoadTls(TlsServerFiles{});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->cert.empty());
  absl::StatusOr<TlsPems> pems = LoadTls(TlsServerFiles{pem_, pem_, pem_, true});
  ASSERT_TRUE(pems.ok()) << pems.status();
  EXPECT_EQ(pems->cert, kPem);
  EXPECT_EQ(pems->ca, kPem);
  EXPECT_TRUE(pems->require_client_cert);
}

TEST_F(TlsFilesTest, IncompleteOrWrongServerFilesAreRefusedByName) {
  auto message = [](const TlsServerFiles& f) {
    absl::StatusOr<TlsPems> p = LoadTls(f);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  };
  EXPECT_NE(message({pem_, "", "", false}).find("set both or neither"), std::string::npos);
  EXPECT_NE(message({"", "", pem_, false}).find("client_ca_file needs TLS"), std::string::npos);
  EXPECT_NE(message({pem_, pem_, "", true}).find("require_client_cert needs client_ca_file"),
            std::string::npos);
  EXPECT_NE(message({text_, pem_, "", false}).find(text_ + ": not a PEM file"), std::string::npos);
  EXPECT_NE(message({pem_, dir_ + "/missing", "", false}).find("missing: not a regular file"),
            std::string::npos);
  EXPECT_NE(message({"/dev/zero", pem_, "", false}).find("/dev/zero: not a regular file"),
            std::string::npos);
  EXPECT_NE(message({pem_, dir_, "", false}).find(": not a regular file"), std::string::npos);
  const std::string big = Write("big.pem", std::string(kPem) + std::string(2 << 20, 'A'));
  EXPECT_NE(message({big, pem_, "", false}).find("larger than 1 MiB"), std::string::npos);
  std::remove(big.c_str());
}

TEST_F(TlsFilesTest, ClientFilesAndTheirArgumentsForRanks) {
  EXPECT_TRUE(LoadTls(TlsClientFiles{}).ok());
  EXPECT_EQ(LoadTls(TlsClientFiles{"", pem_, pem_}).status().code(),
            absl::StatusCode::kInvalidArgument);  // a certificate without TLS
  EXPECT_EQ(LoadTls(TlsClientFiles{pem_, pem_, ""}).status().code(),
            absl::StatusCode::kInvalidArgument);  // a certificate without its key
  absl::StatusOr<TlsPems> pems = LoadTls(TlsClientFiles{pem_, "", ""});
  ASSERT_TRUE(pems.ok()) << pems.status();
  EXPECT_EQ(pems->ca, kPem);

  EXPECT_TRUE(TlsClientArgs(TlsClientFiles{}).empty());
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  const std::vector<std::string> args = TlsClientArgs(TlsClientFiles{"a.pem", "", ""});
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0], "--ca-file");
  EXPECT_EQ(args[1], pem_);  // absolute: ranks start in another directory
}

}  // namespace
}  // namespace dhp::api
