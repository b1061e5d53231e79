// Small file helpers: whole-file reads with clear errors, and atomic writes
// (temporary file, fsync, rename) so that a kill never leaves a half-written file.
#pragma once
#include <filesystem>
#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace kevo {

// Reads a whole file; throws kevo::Error("cannot read <path>: <reason>").
std::string read_file(const std::filesystem::path& p);

// The most a text file the user names (a kernel, a schedule, a measurement or check list) may hold:
// the read stops there, so /dev/zero or a wrong multi-gigabyte file is an error, not a hang that
// fills memory.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{64} << 20;
// As read_file, stopping with kevo::Error("cannot read <path>: more than N bytes ...") past
// `max_bytes`.
std::string read_file(const std::filesystem::path& p, std::size_t max_bytes);
// The whole of `in` (stdin for `-`), named `name` in errors, at most `max_bytes`.
std::string read_stream(std::istream& in, std::string_view name, std::size_t max_bytes);
// Writes `data` to `p` atomically: p.tmp, fsync, rename, fsync of the directory.
void write_file_atomic(const std::filesystem::path& p, std::string_view data);
// Checks before long work that write_file_atomic(p, ...) can succeed: `p` is a regular file or
// absent, and its directory exists and is writable. Throws kevo::Error naming `p` and why.
void check_writable_file(const std::filesystem::path& p);
// Throws kevo::Error when the output `out` (given by `flag`) is one of `inputs` (the same file,
// by any path): kevo never overwrites a file the user made and the command reads.
void check_not_input(const std::filesystem::path& out, std::string_view flag, std::initializer_list<std::filesystem::path> inputs);
void check_not_input(const std::filesystem::path& out, std::string_view flag, const std::vector<std::filesystem::path>& inputs);

// An exclusive advisory lock (flock(2)) on a directory, held while the object lives: a run's
// checkpoint is written by one process at a time, so a second search or resume on the same
// directory (or a second holder in this process) is refused before it reads or writes anything
// there, instead of two writers interleaving records in one journal. The lock goes with the
// process: a kill releases it, and nothing is left on disk to clean up.
class DirLock {
 public:
  DirLock() = default;
  // Throws kevo::Error "<what> <dir>: in use by another process ..." when the lock is held, or
  // "cannot lock <dir>: <reason>" when the directory does not exist. Where the file system has no
  // flock (ENOLCK on some NFS mounts) or the directory cannot be opened for reading, nothing is
  // held (held() is false) and nothing is thrown: the lock guards against a mistake, and a run
  // there goes on as it did before kevo locked.
  DirLock(const std::filesystem::path& dir, std::string_view what);
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();
  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }
  void release() noexcept;

 private:
  int fd_ = -1;
};

}  // namespace kevo
