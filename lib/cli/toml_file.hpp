// A TOML file the user names (a configuration, a kevo check list), read for the CLI: bounded in
// size, refused when it holds a NUL byte (toml++ ends a document there), its syntax errors located.
// Failures are UsageErrors (exit code 2).
#pragma once
#include <string>
#include <toml++/toml.h>

namespace kevo::cli {

toml::table read_toml_file(const std::string& path);

}  // namespace kevo::cli
