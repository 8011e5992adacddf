// Tests dhp-controller's configuration: the shipped example, strict parsing, every validation
// message, and the precedence flags > file > defaults through the real flag definitions.
#include "controller/config.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

constexpr char kExample[] = "configs/controller.yaml";

// Writes `text` to a fresh file under the test's temporary directory and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

absl::Status ValidateText(const std::string& yaml) {
  absl::StatusOr<v1::ControllerConfig> config =
      LoadControllerConfig(WriteFile("config.yaml", yaml));
  if (!config.ok()) return config.status();
  return ValidateControllerConfig(*config);
}

// Parses a dhp-controller command line with the real flags and resolves it.
absl::StatusOr<v1::ControllerConfig> Resolve(std::vector<std::string> args) {
  CLI::App app;
  ControllerCommandLine command_line;
  AddControllerFlags(app, &command_line);
  args.insert(args.begin(), "dhp-controller");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return ResolveControllerConfig(command_line);
}

// Every field of `desc` (recursively) as "parent.child" paths.
void FieldPaths(const google::protobuf::Descriptor* desc, const std::string& prefix,
                std::vector<std::string>* out) {
  for (int i = 0; i < desc->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = desc->field(i);
    if (f->message_type() != nullptr) {
      FieldPaths(f->message_type(), prefix + f->name() + ".", out);
    } else {
      out->push_back(prefix + f->name());
    }
  }
}

TEST(ControllerConfigTest, ShippedExampleParsesValidatesAndShowsTheDefaults) {
  absl::StatusOr<v1::ControllerConfig> config = LoadControllerConfig(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(ValidateControllerConfig(*config).ok()) << ValidateControllerConfig(*config);
  // The values it spells out are the built-in defaults, so the file documents them truly.
  EXPECT_EQ(MergeControllerConfig(*config, {}).DebugString(),
            MergeControllerConfig({}, {}).DebugString());
}

TEST(ControllerConfigTest, ShippedExampleDocumentsEveryKey) {
  std::ifstream in(kExample);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> paths;
  FieldPaths(v1::ControllerConfig::descriptor(), "", &paths);
  for (const std::string& path : paths) {
    const std::string key = path.substr(path.rfind('.') + 1);  // bare key, maybe commented out
    EXPECT_NE(text.find(key + ":"), std::string::npos) << path << " is not in " << kExample;
  }
}

TEST(ControllerConfigTest, DefaultsAreTheFlagDefaults) {
  absl::StatusOr<v1::ControllerConfig> c = Resolve({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen().bind(), "127.0.0.1");
  EXPECT_EQ(c->listen().grpc_port(), 7070);
  EXPECT_EQ(c->listen().http_port(), 7080);
  EXPECT_EQ(c->listen().http_max_connections(), 1024);
  EXPECT_EQ(c->listen().grpc_max_threads(), 1024);
  EXPECT_EQ(c->retention().days(), 90);
  EXPECT_EQ(c->data_dir(), "/var/lib/dhp");
  EXPECT_EQ(c->db(), "/var/lib/dhp/dhp.db");
  EXPECT_EQ(c->checkpoint_root(), "/var/lib/dhp/checkpoints");
  EXPECT_EQ(c->log_dir(), "/var/lib/dhp/logs");
  EXPECT_EQ(c->export_().root(), "/var/lib/dhp/exports");
  EXPECT_EQ(c->export_().max_concurrent(), 1);
  EXPECT_FALSE(c->export_().has_dhp_ckpt());
  EXPECT_EQ(c->heartbeat().interval_ms(), 2000);
  EXPECT_EQ(c->heartbeat().timeout_ms(), 10000);
  EXPECT_FALSE(c->auth().has_token_file());
  EXPECT_FALSE(c->has_port_file());
}

TEST(ControllerConfigTest, EmptyFileIsAllDefaults) {
  EXPECT_TRUE(ValidateText("").ok());
  EXPECT_TRUE(ValidateText("# only a comment\n").ok());
}

TEST(ControllerConfigTest, BadValuesAreNamedWithTheRule) {
  const std::string token = WriteFile("token", "s3cret\n");
  struct Case {
    std::string yaml;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"listen: {grpc_port: 70000}",
       "listen.grpc_port: 70000 is not a port (0-65535; 0 picks a free one)"},
      {"listen: {http_port: -1}",
       "listen.http_port: -1 is not a port (0-65535; 0 picks a free one)"},
      {"listen: {grpc_port: 9000, http_port: 9000}",
       "listen.http_port: 9000 is also listen.grpc_port; give each its own port (or 0 for a "
       "free one)"},
      {"listen: {bind: ''}",
       "listen.bind: must not be empty; use 127.0.0.1 (this host only) or 0.0.0.0 (every "
       "interface, with auth.token_file)"},
      {"listen: {http_max_connections: 0}", "listen.http_max_connections: 0 must be in 1..65536"},
      {"listen: {grpc_max_threads: 8}", "listen.grpc_max_threads: 8 must be in 16..65536"},
      {"retention: {days: -1}", "retention.days: -1 must be in 0..36500 (0 keeps everything)"},
      {"data_dir: ''", "data_dir: must not be empty"},
      {"export: {max_concurrent: 0}", "export.max_concurrent: 0 must be in 1..64"},
      {"export: {root: ''}", "export.root: must not be empty (unset: <data_dir>/exports)"},
      {"listen: {tls: {cert_file: " + token + "}}",
       "listen.tls: TLS certificate (cert_file) and key (key_file) go together: set both or "
       "neither"},
      {"listen: {tls: {cert_file: " + token + ", key_file: " + token + "}}",
       "listen.tls: TLS certificate " + token + ": not a PEM file"},
      {"listen: {tls: {require_client_cert: true}}",
       "listen.tls: require_client_cert needs client_ca_file (the CA client certificates are "
       "checked against)"},
      {"heartbeat: {timeout_ms: 500}",
       "heartbeat.timeout_ms: 500 must be greater than heartbeat.interval_ms (2000)"},
      {"heartbeat: {interval_ms: 3000, timeout_ms: 3000}",
       "heartbeat.timeout_ms: 3000 must be greater than heartbeat.interval_ms (3000)"},
      {"heartbeat: {interval_ms: 0}", "heartbeat.interval_ms: 0 must be at least 1"},
      {"heartbeat: {progress_reports_per_s: -1}",
       "heartbeat.progress_reports_per_s: -1 must be in 0..1000000 (0: ranks report at their "
       "own pace)"},
      {"metrics: {rank_series_max_ranks: -1}",
       "metrics.rank_series_max_ranks: -1 must be in 0..100000000 (0: no per-rank series)"},
      {"auth: {token_file: /nonexistent/token}",
       "auth.token_file: /nonexistent/token does not exist"},
      {"auth: {token_file: " + ::testing::TempDir() + "}",
       "auth.token_file: " + ::testing::TempDir() + " is not a regular file"},
      // Every problem at once, in the file's order.
      {"listen: {grpc_port: 70000}\ndata_dir: ''\nheartbeat: {timeout_ms: 500}",
       "listen.grpc_port: 70000 is not a port (0-65535; 0 picks a free one); "
       "data_dir: must not be empty; "
       "heartbeat.timeout_ms: 500 must be greater than heartbeat.interval_ms (2000)"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateText(c.yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_EQ(s.message(), c.error) << c.yaml;
  }
  // Values that are fine: port 0, bind anywhere with a token, an existing token file.
  EXPECT_TRUE(ValidateText("listen: {grpc_port: 0, http_port: 0}").ok());
  EXPECT_TRUE(ValidateText("listen: {bind: 0.0.0.0}\nauth: {token_file: " + token + "}").ok());
}

TEST(ControllerConfigTest, UnknownKeyIsNamedWithTheFile) {
  const std::string path = WriteFile("typo.yaml", "listen:\n  grpc_prot: 7070\n");
  absl::StatusOr<v1::ControllerConfig> c = LoadControllerConfig(path);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            path +
                ": listen.grpc_prot: unknown key; known keys: bind, grpc_port, http_port, "
                "http_max_connections, tls, grpc_max_threads");
}

TEST(ControllerConfigTest, WrongTypeIsNamed) {
  const std::string path = WriteFile("type.yaml", "listen: {grpc_port: seventy}\n");
  absl::StatusOr<v1::ControllerConfig> c = LoadControllerConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            path + ": listen.grpc_port: expected an integer, got \"seventy\"");
}

TEST(ControllerConfigTest, MissingFileAndBadYamlNameTheFile) {
  absl::StatusOr<v1::ControllerConfig> missing = LoadControllerConfig("/nonexistent/c.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot read the config file /nonexistent/c.yaml: No such file or directory");
  const std::string path = WriteFile("bad.yaml", "listen: [\n");
  absl::StatusOr<v1::ControllerConfig> bad = LoadControllerConfig(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind(path + ": malformed YAML", 0), 0u) << bad.status();
}

TEST(ControllerConfigTest, FlagsOverrideTheFileWhichOverridesDefaults) {
  const std::string path = WriteFile("merge.yaml",
                                     "listen: {grpc_port: 9000, http_port: 9001}\n"
                                     "data_dir: /srv/dhp\n"
                                     "heartbeat: {timeout_ms: 30000}\n");
  absl::StatusOr<v1::ControllerConfig> c =
      Resolve({"--config", path, "--grpc-port", "9100", "--heartbeat-timeout-ms", "5000",
               "--progress-reports-per-s", "0", "--metrics-rank-series-max-ranks", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen().grpc_port(), 9100);          // flag
  EXPECT_EQ(c->listen().http_port(), 9001);          // file
  EXPECT_EQ(c->listen().bind(), "127.0.0.1");        // default
  EXPECT_EQ(c->heartbeat().timeout_ms(), 5000);      // flag
  EXPECT_EQ(c->heartbeat().interval_ms(), 2000);     // default
  EXPECT_TRUE(c->heartbeat().has_progress_reports_per_s());  // flag: 0 is set, not the default
  EXPECT_EQ(c->heartbeat().progress_reports_per_s(), 0);
  EXPECT_EQ(Resolve({})->heartbeat().progress_reports_per_s(), 4000);  // default
  EXPECT_TRUE(c->metrics().has_rank_series_max_ranks());  // flag: 0 is set, not the default
  EXPECT_EQ(c->metrics().rank_series_max_ranks(), 0);
  EXPECT_EQ(Resolve({})->metrics().rank_series_max_ranks(), 4096);  // default
  EXPECT_EQ(c->data_dir(), "/srv/dhp");              // file
  EXPECT_EQ(c->db(), "/srv/dhp/dhp.db");             // derived from the file's data_dir
  EXPECT_EQ(c->log_dir(), "/srv/dhp/logs");
}

TEST(ControllerConfigTest, ANonLoopbackBindNeedsATokenOrAnExplicitFlag) {
  absl::StatusOr<v1::ControllerConfig> c = Resolve({"--bind", "0.0.0.0"});
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "listen.bind: 0.0.0.0 is not loopback and neither auth.token_file nor auth.users is "
            "set: anyone who reaches the port could act as any user, node or rank; set "
            "auth.token_file (--auth-token-file) or auth.users, or auth.allow_unauthenticated "
            "(--allow-unauthenticated) to accept that");
  c = Resolve({"--bind", "0.0.0.0", "--allow-unauthenticated"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->auth().allow_unauthenticated());
  // The file may bind and leave the token to a flag.
  const std::string token = WriteFile("token", "t0k3n\n");
  const std::string path = WriteFile("exposed.yaml", "listen: {bind: 0.0.0.0}\n");
  c = Resolve({"--config", path, "--auth-token-file", token});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(Resolve({"--bind", "::1"}).ok());
  // Users' tokens are auth too.
  const std::string users = WriteFile(
      "users.yaml", "listen: {bind: 0.0.0.0}\nauth:\n  users:\n    - {name: a, role: user, "
                    "token_sha256: " + std::string(64, 'a') + "}\n");
  c = Resolve({"--config", users});
  ASSERT_TRUE(c.ok()) << c.status();
}

TEST(ControllerConfigTest, CredentialsAreCheckedAndTheRankKeyIsMade) {
  const std::string bad = WriteFile(
      "bad-users.yaml", "auth:\n  users:\n    - {name: eve, role: root, token_sha256: " +
                            std::string(64, 'b') + "}\n  nodes:\n    - {node_id: n, "
                            "token_sha256: abc}\n");
  absl::StatusOr<v1::ControllerConfig> c = Resolve({"--config", bad});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("auth.users[0].role: one of admin, user, viewer"),
            std::string::npos)
      << c.status();
  const std::string good = WriteFile(
      "good-users.yaml", "auth:\n  users:\n    - {name: eve, role: viewer, token_sha256: " +
                             std::string(64, 'c') + "}\n");
  const std::string dir = testing::TempDir() + "/rank-key-dir";
  std::filesystem::create_directories(dir);
  c = Resolve({"--config", good, "--data-dir", dir});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<api::TokenAuth> auth = AuthFromConfig(*c);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->enabled());
  const std::string token = auth->RankToken("j-1", 1);
  EXPECT_EQ(std::filesystem::file_size(dir + "/rank-token.key"), 32u);
  // Restarted: the same key, so running ranks' tokens stay valid.
  absl::StatusOr<api::TokenAuth> again = AuthFromConfig(*c);
  EXPECT_EQ(again->Authenticate("Bearer " + token)->job_id, "j-1");
  EXPECT_EQ(again->Authenticate("Bearer " + api::Sha256Hex("x")).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(ControllerConfigTest, DerivedPathsFollowTheEffectiveDataDir) {
  const std::string path =
      WriteFile("paths.yaml", "data_dir: /srv/dhp\ncheckpoint_root: /shared/ckpt\n");
  absl::StatusOr<v1::ControllerConfig> c = Resolve({"--config", path, "--data-dir", "/d"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir(), "/d");
  EXPECT_EQ(c->db(), "/d/dhp.db");
  EXPECT_EQ(c->log_dir(), "/d/logs");
  EXPECT_EQ(c->checkpoint_root(), "/shared/ckpt");  // set in the file: does not move
}

TEST(ControllerConfigTest, AnEmptyFlagClearsTheFilesToken) {
  const std::string token = WriteFile("token2", "t\n");
  const std::string path = WriteFile("auth.yaml", "auth: {token_file: " + token + "}\n");
  absl::StatusOr<v1::ControllerConfig> c = Resolve({"--config", path});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auth().token_file(), token);
  c = Resolve({"--config", path, "--auth-token-file", ""});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auth().token_file(), "");
}

TEST(ControllerConfigTest, ErrorsSayWhetherTheFileOrTheFlagsAreWrong) {
  // The file is checked on its own, even where a flag overrides the bad value.
  const std::string bad = WriteFile("badport.yaml", "listen: {grpc_port: 70000}\n");
  absl::StatusOr<v1::ControllerConfig> c = Resolve({"--config", bad, "--grpc-port", "7000"});
  EXPECT_EQ(c.status().message(),
            bad + ": listen.grpc_port: 70000 is not a port (0-65535; 0 picks a free one)");
  // A valid file with a flag that breaks a rule: the merged result is named, without the file.
  const std::string good = WriteFile("good.yaml", "heartbeat: {interval_ms: 1000}\n");
  c = Resolve({"--config", good, "--heartbeat-timeout-ms", "800"});
  EXPECT_EQ(c.status().message(),
            "heartbeat.timeout_ms: 800 must be greater than heartbeat.interval_ms (1000)");
  c = Resolve({"--http-port", "65536"});
  EXPECT_EQ(c.status().message(),
            "listen.http_port: 65536 is not a port (0-65535; 0 picks a free one)");
  c = Resolve({"--config", "/nonexistent/c.yaml"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST(ControllerConfigTest, ANumberFlagWithAnEmptyValueIsRefused) {
  for (const char* flag : {"--retention-days", "--grpc-port", "--metrics-rank-series-max-ranks"}) {
    CLI::App app;
    ControllerCommandLine command_line;
    AddControllerFlags(app, &command_line);
    const char* argv[] = {"dhp-controller", flag, ""};
    try {
      app.parse(3, argv);
      ADD_FAILURE() << flag << " \"\" was accepted";
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("needs a number, got nothing"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(Resolve({"--retention-days", "7"})->retention().days(), 7);  // a value still works
}

TEST(ControllerConfigTest, CheckConfigFlagIsParsed) {
  CLI::App app;
  ControllerCommandLine command_line;
  AddControllerFlags(app, &command_line);
  const char* argv[] = {"dhp-controller", "--config", "x.yaml", "--check-config"};
  app.parse(4, argv);
  EXPECT_TRUE(command_line.check_config);
  EXPECT_EQ(command_line.config_file, "x.yaml");
  EXPECT_FALSE(command_line.flags.has_listen());  // nothing else given
}

}  // namespace
}  // namespace dhp::controller
