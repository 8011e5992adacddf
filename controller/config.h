// dhp-controller's configuration: the --config file (v1::ControllerConfig, documented in
// configs/controller.yaml), the command-line flags, and how the two are merged.
//
// Precedence: flags given on the command line > the file > built-in defaults. Every setting has
// a flag and a file key (--grpc-port and listen.grpc_port). Errors name the key, the value and
// the rule, all of them at once separated by "; ", like job spec errors:
//   listen.grpc_port: 70000 is not a port (0-65535; 0 picks a free one)
// Thread-safe (no state).
#ifndef DHP_CONTROLLER_CONFIG_H_
#define DHP_CONTROLLER_CONFIG_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/auth.h"
#include "api/tls.h"
#include "dhp/v1/controller_config.pb.h"

namespace dhp::controller {

// The built-in defaults, every field set except the optional ones (auth.token_file,
// port_file) and the paths derived from data_dir (db, checkpoint_root, log_dir).
v1::ControllerConfig DefaultControllerConfig();

// Reads `path` (YAML or JSON) strictly: an unknown key is an error naming it. NOT_FOUND when
// the file cannot be read; INVALID_ARGUMENT for bad content. Messages start with `path`.
// Does not validate values (ValidateControllerConfig does).
absl::StatusOr<v1::ControllerConfig> LoadControllerConfig(const std::string& path);

// Checks every value of `config`, unset fields taking their defaults. INVALID_ARGUMENT listing
// every problem as "field: reason"; OK when there is none.
absl::Status ValidateControllerConfig(const v1::ControllerConfig& config);

// auth.users and auth.nodes as TokenAuth takes them (no tokens read, no key).
api::AuthSettings AuthSettingsOf(const v1::ControllerConfig& config);
// The controller's TokenAuth: the admin token from auth.token_file, users, nodes, and (when
// any of them is set) the rank key from auth.rank_key_file, created when missing.
absl::StatusOr<api::TokenAuth> AuthFromConfig(const v1::ControllerConfig& config);

// listen.tls as the files api::LoadTls reads.
api::TlsServerFiles TlsFiles(const v1::ControllerConfig& config);

// The effective configuration: the defaults, overlaid by the fields set in `file`, overlaid by
// the fields set in `flags` (only the flags given on the command line are set there); then
// db, checkpoint_root and log_dir are derived from data_dir where still unset.
v1::ControllerConfig MergeControllerConfig(const v1::ControllerConfig& file,
                                           const v1::ControllerConfig& flags);

// What dhp-controller's command line says.
struct ControllerCommandLine {
  std::string config_file;     // --config; empty: no file
  bool check_config = false;   // --check-config: validate, print the result, exit
  v1::ControllerConfig flags;  // only the settings given as flags are set
};

// Registers dhp-controller's flags (--config, --check-config and one per setting) on `app`,
// writing into `command_line`, which must outlive parsing.
void AddControllerFlags(CLI::App& app, ControllerCommandLine* command_line);

// Loads --config if given, merges it with the flags and validates both the file on its own
// (errors prefixed by the file's path) and the merged result. The result has every path set.
absl::StatusOr<v1::ControllerConfig> ResolveControllerConfig(
    const ControllerCommandLine& command_line);

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_CONFIG_H_
