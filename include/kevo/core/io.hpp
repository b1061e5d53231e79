// Small file helpers: whole-file reads with clear errors, and atomic writes
// (temporary file, fsync, rename) so that a kill never leaves a half-written file.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace kevo {

// Reads a whole file; throws kevo::Error("cannot read <path>: <reason>").
std::string read_file(const std::filesystem::path& p);
// Writes `data` to `p` atomically: p.tmp, fsync, rename, fsync of the directory.
void write_file_atomic(const std::filesystem::path& p, std::string_view data);
// Checks before long work that write_file_atomic(p, ...) can succeed: `p` is a regular file or
// absent, and its directory exists and is writable. Throws kevo::Error naming `p` and why.
void check_writable_file(const std::filesystem::path& p);

}  // namespace kevo
