#include "controller/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/proto_yaml.h"

namespace dhp::controller {
namespace {

// Collects "field: reason" in the order of the checks (the order of the file's keys).
class Errors {
 public:
  void Add(const std::string& field, const std::string& reason) {
    list_.push_back(absl::StrCat(field, ": ", reason));
  }
  absl::Status ToStatus(const std::string& prefix = "") const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(prefix, absl::StrJoin(list_, "; ")));
  }

 private:
  std::vector<std::string> list_;
};

void CheckPort(const std::string& field, int port, Errors& errors) {
  if (port < 0 || port > 65535) {
    errors.Add(field, absl::StrCat(port, " is not a port (0-65535; 0 picks a free one)"));
  }
}

void CheckTokenFile(const std::string& path, Errors& errors) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) {
    errors.Add("auth.token_file", absl::StrCat(path, " does not exist"));
  } else if (!std::filesystem::is_regular_file(st)) {
    errors.Add("auth.token_file", absl::StrCat(path, " is not a regular file"));
  } else if (access(path.c_str(), R_OK) != 0) {
    errors.Add("auth.token_file", absl::StrCat(path, " is not readable by this user"));
  }
}

}  // namespace

v1::ControllerConfig DefaultControllerConfig() {
  v1::ControllerConfig c;
  c.mutable_listen()->set_bind("127.0.0.1");  // loopback: nothing is exposed by accident
  c.mutable_listen()->set_grpc_port(7070);
  c.mutable_listen()->set_http_port(7080);
  c.mutable_listen()->set_http_max_connections(1024);
  c.mutable_listen()->set_grpc_max_threads(1024);
  c.set_data_dir("/var/lib/dhp");
  c.mutable_heartbeat()->set_interval_ms(2000);
  c.mutable_heartbeat()->set_timeout_ms(10000);
  c.mutable_heartbeat()->set_progress_reports_per_s(4000);
  c.mutable_retention()->set_days(90);
  c.mutable_metrics()->set_rank_series_max_ranks(4096);
  c.mutable_export_()->set_max_concurrent(1);
  return c;
}

absl::StatusOr<v1::ControllerConfig> LoadControllerConfig(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the config file ", path, ": it is a directory"));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the config file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  v1::ControllerConfig config;
  if (absl::Status s = ParseProtoYaml(text.str(), &config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return config;
}

absl::Status ValidateControllerConfig(const v1::ControllerConfig& config) {
  v1::ControllerConfig c = DefaultControllerConfig();
  c.MergeFrom(config);  // set fields win, unset ones keep their default
  Errors errors;
  if (c.listen().bind().empty()) {
    errors.Add("listen.bind", "must not be empty; use 127.0.0.1 (this host only) or 0.0.0.0 "
                              "(every interface, with auth.token_file)");
  }
  CheckPort("listen.grpc_port", c.listen().grpc_port(), errors);
  CheckPort("listen.http_port", c.listen().http_port(), errors);
  if (c.listen().http_port() != 0 && c.listen().http_port() == c.listen().grpc_port()) {
    errors.Add("listen.http_port", absl::StrCat(c.listen().http_port(),
                                                " is also listen.grpc_port; give each its own "
                                                "port (or 0 for a free one)"));
  }
  if (const int n = c.listen().grpc_max_threads(); n < 16 || n > 65536) {
    errors.Add("listen.grpc_max_threads", absl::StrCat(n, " must be in 16..65536"));
  }
  if (const int n = c.listen().http_max_connections(); n < 1 || n > 65536) {
    errors.Add("listen.http_max_connections", absl::StrCat(n, " must be in 1..65536"));
  }
  if (c.retention().days() < 0 || c.retention().days() > 36500) {
    errors.Add("retention.days",
               absl::StrCat(c.retention().days(), " must be in 0..36500 (0 keeps everything)"));
  }
  if (const int n = c.metrics().rank_series_max_ranks(); n < 0 || n > 100000000) {
    errors.Add("metrics.rank_series_max_ranks",
               absl::StrCat(n, " must be in 0..100000000 (0: no per-rank series)"));
  }
  if (c.data_dir().empty()) errors.Add("data_dir", "must not be empty");
  if (const int n = c.export_().max_concurrent(); n < 1 || n > 64) {
    errors.Add("export.max_concurrent", absl::StrCat(n, " must be in 1..64"));
  }
  if (c.export_().has_root() && c.export_().root().empty()) {
    errors.Add("export.root", "must not be empty (unset: <data_dir>/exports)");
  }
  if (!c.auth().token_file().empty()) CheckTokenFile(c.auth().token_file(), errors);
  if (absl::StatusOr<api::TokenAuth> auth = api::TokenAuth::Create(AuthSettingsOf(c));
      !auth.ok()) {
    errors.Add("auth", std::string(auth.status().message()));
  }
  if (absl::StatusOr<api::TlsPems> tls = api::LoadTls(TlsFiles(c)); !tls.ok()) {
    errors.Add("listen.tls", std::string(tls.status().message()));
  }

  const int interval = c.heartbeat().interval_ms();
  const int timeout = c.heartbeat().timeout_ms();
  if (interval < 1) {
    errors.Add("heartbeat.interval_ms", absl::StrCat(interval, " must be at least 1"));
  } else if (timeout <= interval) {
    errors.Add("heartbeat.timeout_ms",
               absl::StrCat(timeout, " must be greater than heartbeat.interval_ms (", interval,
                            ")"));
  }
  if (const int per_s = c.heartbeat().progress_reports_per_s(); per_s < 0 || per_s > 1000000) {
    errors.Add("heartbeat.progress_reports_per_s",
               absl::StrCat(per_s, " must be in 0..1000000 (0: ranks report at their own pace)"));
  }
  return errors.ToStatus();
}

api::TlsServerFiles TlsFiles(const v1::ControllerConfig& c) {
  const v1::ControllerTlsConfig& tls = c.listen().tls();
  return {tls.cert_file(), tls.key_file(), tls.client_ca_file(), tls.require_client_cert()};
}

v1::ControllerConfig MergeControllerConfig(const v1::ControllerConfig& file,
                                           const v1::ControllerConfig& flags) {
  v1::ControllerConfig c = DefaultControllerConfig();
  c.MergeFrom(file);
  c.MergeFrom(flags);
  // Derived from the effective data_dir, so `--data-dir X` moves them unless set explicitly.
  if (c.db().empty()) c.set_db(c.data_dir() + "/dhp.db");
  if (c.checkpoint_root().empty()) c.set_checkpoint_root(c.data_dir() + "/checkpoints");
  if (c.log_dir().empty()) c.set_log_dir(c.data_dir() + "/logs");
  if (c.export_().root().empty()) c.mutable_export_()->set_root(c.data_dir() + "/exports");
  return c;
}

void AddControllerFlags(CLI::App& app, ControllerCommandLine* command_line) {
  const v1::ControllerConfig d = DefaultControllerConfig();
  v1::ControllerConfig* f = &command_line->flags;
  // Each flag sets its field only when given, which is how the file's value survives otherwise.
  auto text = [&](const std::string& name, auto setter, const std::string& help) {
    return app.add_option_function<std::string>(
        name, [f, setter](const std::string& v) { setter(f, v); }, help);
  };
  // CLI11 reads an empty value as 0 (--retention-days "" would keep everything): refused.
  const CLI::Validator not_empty(
      [](std::string& v) { return v.empty() ? std::string("needs a number, got nothing") : ""; },
      "NUMBER");
  auto number = [&](const std::string& name, auto setter, const std::string& help) {
    return app.add_option_function<int>(
                  name, [f, setter](const int& v) { setter(f, v); }, help)
        ->check(not_empty);
  };
  app.add_option("--config", command_line->config_file,
                 "YAML/JSON configuration file (see configs/controller.yaml); flags given on "
                 "the command line override its values");
  app.add_flag("--check-config", command_line->check_config,
               "Validate the configuration (file and flags), print the effective one and exit: "
               "0 when valid, 2 when not");
  text("--data-dir", [](auto* c, const std::string& v) { c->set_data_dir(v); },
       "Directory for the database and checkpoints (data_dir)")
      ->default_str(d.data_dir());
  text("--db", [](auto* c, const std::string& v) { c->set_db(v); },
       "SQLite database path (db; default: <data-dir>/dhp.db)");
  text("--checkpoint-root", [](auto* c, const std::string& v) { c->set_checkpoint_root(v); },
       "Checkpoint directories of jobs must lie inside this root "
       "(checkpoint_root; default: <data-dir>/checkpoints)");
  text("--log-dir", [](auto* c, const std::string& v) { c->set_log_dir(v); },
       "Rank logs shipped by the workers (log_dir; default: <data-dir>/logs)");
  text("--export-root", [](auto* c, const std::string& v) { c->mutable_export_()->set_root(v); },
       "Exports (ExportCheckpoint) are written to <root>/<export id> (export.root; default: "
       "<data-dir>/exports)");
  text("--export-dhp-ckpt",
       [](auto* c, const std::string& v) { c->mutable_export_()->set_dhp_ckpt(v); },
       "The dhp-ckpt executable exports run (export.dhp_ckpt; default: beside "
       "dhp-controller, else on PATH)");
  number("--export-max-concurrent",
         [](auto* c, int v) { c->mutable_export_()->set_max_concurrent(v); },
         "Exports run at once at most; later ones wait (export.max_concurrent)")
      ->default_str(std::to_string(d.export_().max_concurrent()));
  text("--export-data-root",
       [](auto* c, const std::string& v) { c->mutable_export_()->set_data_root(v); },
       "Where a relative model.weights_path starts, for the tokenizer and preprocessor files "
       "of exports (export.data_root; dhp-ckpt's --data-root)");
  text("--bind", [](auto* c, const std::string& v) { c->mutable_listen()->set_bind(v); },
       "Address to listen on (listen.bind). The default serves this host only; use 0.0.0.0 "
       "to expose the API to the network")
      ->default_str(d.listen().bind());
  number("--grpc-port", [](auto* c, int v) { c->mutable_listen()->set_grpc_port(v); },
         "gRPC port (listen.grpc_port; 0: pick a free one)")
      ->default_str(std::to_string(d.listen().grpc_port()));
  number("--http-port", [](auto* c, int v) { c->mutable_listen()->set_http_port(v); },
         "REST/metrics port (listen.http_port; 0: pick a free one)")
      ->default_str(std::to_string(d.listen().http_port()));
  number(
      "--http-max-connections",
      [](auto* c, int v) { c->mutable_listen()->set_http_max_connections(v); },
      "REST connections served at once; past it, 16 more serve /healthz and /metrics only "
      "(listen.http_max_connections)")
      ->default_str(std::to_string(d.listen().http_max_connections()));
  number("--grpc-max-threads",
         [](auto* c, int v) { c->mutable_listen()->set_grpc_max_threads(v); },
         "Threads for gRPC calls that may block (logs, exports, watch streams) at most; "
         "calls that wait only for the controller, and Kv waits, hold none "
         "(listen.grpc_max_threads)")
      ->default_str(std::to_string(d.listen().grpc_max_threads()));
  text("--port-file", [](auto* c, const std::string& v) { c->set_port_file(v); },
       "Write {\"grpc_port\":N,\"http_port\":M} here once listening (port_file)");
  number("--heartbeat-interval-ms",
         [](auto* c, int v) { c->mutable_heartbeat()->set_interval_ms(v); },
         "Heartbeat interval told to workers (heartbeat.interval_ms)")
      ->default_str(std::to_string(d.heartbeat().interval_ms()));
  number("--heartbeat-timeout-ms",
         [](auto* c, int v) { c->mutable_heartbeat()->set_timeout_ms(v); },
         "Silence after which a worker is marked LOST (heartbeat.timeout_ms)")
      ->default_str(std::to_string(d.heartbeat().timeout_ms()));
  number("--progress-reports-per-s",
         [](auto* c, int v) { c->mutable_heartbeat()->set_progress_reports_per_s(v); },
         "Progress reports a second asked of all ranks together; each rank is told to report "
         "at most once per (placed ranks / this) s; 0: their own pace "
         "(heartbeat.progress_reports_per_s)")
      ->default_str(std::to_string(d.heartbeat().progress_reports_per_s()));
  text("--auth-token-file",
       [](auto* c, const std::string& v) { c->mutable_auth()->set_token_file(v); },
       "Require 'authorization: Bearer <token>' (the file's content) on every API call "
       "except /healthz and /metrics (auth.token_file)");
  number(
      "--retention-days", [](auto* c, int v) { c->mutable_retention()->set_days(v); },
      "Delete final jobs (runs, checkpoint records, events, logs; not checkpoint files) "
      "and node events this many days after their last change; 0 keeps them "
      "(retention.days)")
      ->default_str(std::to_string(d.retention().days()));
  number("--metrics-rank-series-max-ranks",
         [](auto* c, int v) { c->mutable_metrics()->set_rank_series_max_ranks(v); },
         "Export the per-rank /metrics series only while at most this many ranks are placed; "
         "0: never (metrics.rank_series_max_ranks)")
      ->default_str(std::to_string(d.metrics().rank_series_max_ranks()));
  text(
      "--tls-cert-file",
      [](auto* c, const std::string& v) { c->mutable_listen()->mutable_tls()->set_cert_file(v); },
      "Serve gRPC and REST over TLS only, with this PEM certificate chain "
      "(listen.tls.cert_file; needs --tls-key-file)");
  text(
      "--tls-key-file",
      [](auto* c, const std::string& v) { c->mutable_listen()->mutable_tls()->set_key_file(v); },
      "The PEM private key of --tls-cert-file (listen.tls.key_file)");
  text(
      "--tls-client-ca-file",
      [](auto* c, const std::string& v) {
        c->mutable_listen()->mutable_tls()->set_client_ca_file(v);
      },
      "Verify client certificates (agents, ranks) against this PEM CA "
      "(listen.tls.client_ca_file)");
  app.add_flag_function(
      "--tls-require-client-cert",
      [f](std::int64_t) { f->mutable_listen()->mutable_tls()->set_require_client_cert(true); },
      "Refuse TLS clients without a certificate from --tls-client-ca-file "
      "(listen.tls.require_client_cert)");
  app.add_flag_function(
      "--allow-unauthenticated",
      [f](std::int64_t) { f->mutable_auth()->set_allow_unauthenticated(true); },
      "Serve a non-loopback --bind without a token (auth.allow_unauthenticated); refused "
      "otherwise");
}

absl::StatusOr<v1::ControllerConfig> ResolveControllerConfig(
    const ControllerCommandLine& command_line) {
  v1::ControllerConfig file;
  if (!command_line.config_file.empty()) {
    absl::StatusOr<v1::ControllerConfig> loaded = LoadControllerConfig(command_line.config_file);
    if (!loaded.ok()) return loaded.status();
    // The file must be valid on its own, even where a flag overrides a value.
    if (absl::Status s = ValidateControllerConfig(*loaded); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(command_line.config_file, ": ",
                                                     s.message()));
    }
    file = *std::move(loaded);
  }
  v1::ControllerConfig merged = MergeControllerConfig(file, command_line.flags);
  if (absl::Status s = ValidateControllerConfig(merged); !s.ok()) return s;
  // Checked on the merged settings only: the file may leave the token to a flag.
  const std::string& bind = merged.listen().bind();
  const bool loopback = bind == "127.0.0.1" || bind == "localhost" || bind == "::1";
  const bool auth_on = !merged.auth().token_file().empty() || merged.auth().users_size() > 0;
  if (!loopback && !auth_on && !merged.auth().allow_unauthenticated()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen.bind: ", bind,
        " is not loopback and neither auth.token_file nor auth.users is set: anyone who "
        "reaches the port could act as any user, node or rank; set auth.token_file "
        "(--auth-token-file) or auth.users, or auth.allow_unauthenticated "
        "(--allow-unauthenticated) to accept that"));
  }
  return merged;
}

api::AuthSettings AuthSettingsOf(const v1::ControllerConfig& config) {
  api::AuthSettings settings;
  for (const v1::ControllerAuthUser& u : config.auth().users()) {
    api::UserCredential user{u.name(), api::Role::kUser, u.token_sha256()};
    absl::StatusOr<api::Role> role = api::ParseUserRole(u.role());
    user.role = role.ok() ? *role : api::Role::kNode;  // refused by TokenAuth::Create
    settings.users.push_back(std::move(user));
  }
  for (const v1::ControllerAuthNode& n : config.auth().nodes()) {
    settings.nodes.push_back({n.node_id(), n.token_sha256()});
  }
  return settings;
}

absl::StatusOr<api::TokenAuth> AuthFromConfig(const v1::ControllerConfig& config) {
  api::AuthSettings settings = AuthSettingsOf(config);
  if (!config.auth().token_file().empty()) {
    absl::StatusOr<std::string> token = api::ReadTokenFile(config.auth().token_file());
    if (!token.ok()) return token.status();
    settings.admin_token = *std::move(token);
  }
  const bool any = !settings.admin_token.empty() || !settings.users.empty() ||
                   !settings.nodes.empty();
  if (any) {
    const std::string key_file = config.auth().rank_key_file().empty()
                                     ? config.data_dir() + "/rank-token.key"
                                     : config.auth().rank_key_file();
    absl::StatusOr<std::string> key = api::LoadOrCreateRankKey(key_file);
    if (!key.ok()) {
      return absl::InvalidArgumentError("auth.rank_key_file: " + std::string(key.status().message()));
    }
    settings.rank_key = *std::move(key);
  }
  return api::TokenAuth::Create(std::move(settings));
}

}  // namespace dhp::controller
