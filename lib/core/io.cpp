#include "kevo/core/io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "kevo/core/error.hpp"

namespace kevo {

std::string read_file(const std::filesystem::path& p) { return read_file(p, std::numeric_limits<std::size_t>::max()); }

std::string read_stream(std::istream& in, std::string_view name, std::size_t max_bytes) {
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const auto n = static_cast<std::size_t>(in.gcount());
    if (out.size() + n > max_bytes)
      throw Error(fmt::format("cannot read {}: more than {} bytes", name, max_bytes));
    out.append(buf, n);
  }
  if (in.bad()) throw Error(fmt::format("cannot read {}: read failed", name));
  return out;
}

std::string read_file(const std::filesystem::path& p, std::size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) throw Error("cannot read " + p.string() + ": is a directory");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("cannot read " + p.string() + ": " + std::strerror(errno));
  return read_stream(in, p.string(), max_bytes);
}

namespace {

// The rename in write_file_atomic replaces whatever `p` names: a symlink, a FIFO or a device
// (/dev/full as root) would be swapped for a regular file. Only a regular file (or nothing) is.
void refuse_non_regular(const std::filesystem::path& p) {
  struct stat st{};
  if (::lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const char* kind = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) ? "a device" : "not a regular file";
    throw Error(p.string() + ": is " + kind + "; kevo writes only regular files (name another path)");
  }
}

}  // namespace

void check_writable_file(const std::filesystem::path& p) {
  refuse_non_regular(p);
  const std::filesystem::path dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) throw Error("cannot write " + p.string() + ": " + dir.string() + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw Error("cannot write " + p.string() + ": " + dir.string() + " is not a directory");
  if (::access(dir.c_str(), W_OK) != 0) throw Error("cannot write " + p.string() + ": " + dir.string() + ": " + std::strerror(errno));
}

void check_not_input(const std::filesystem::path& out, std::string_view flag, const std::vector<std::filesystem::path>& inputs) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return;
  for (const auto& in : inputs)
    if (!in.empty() && std::filesystem::equivalent(out, in, ec) && !ec)
      throw Error(std::string(flag) + " " + out.string() + ": is " + in.string() +
                  ", which this command reads; kevo does not overwrite it (name another path)");
}

void check_not_input(const std::filesystem::path& out, std::string_view flag, std::initializer_list<std::filesystem::path> inputs) {
  check_not_input(out, flag, std::vector<std::filesystem::path>(inputs));
}

void write_file_atomic(const std::filesystem::path& p, std::string_view data) {
  refuse_non_regular(p);
  // A fresh temporary beside p (O_EXCL through mkstemp): a fixed "<p>.tmp" truncated whatever held
  // that name — `kevo db export dump --db dump.tmp` destroyed the database it was exporting.
  std::string tmp = p.string() + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw Error("cannot write " + p.string() + ".tmp: " + std::strerror(errno));
  const auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(what + ": " + why);
  };
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) fail("cannot write " + tmp);  // mkstemp's 0600 is not what `open` gives
  std::size_t done = 0;
  while (done < data.size()) {
    const auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot flush " + tmp);
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot flush " + tmp + ": " + why);
  }
  if (::rename(tmp.c_str(), p.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + p.string() + ": " + why);
  }
  auto dir = p.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

DirLock::DirLock(const std::filesystem::path& dir, std::string_view what) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw Error(fmt::format("cannot lock {}: {}", dir.string(), std::strerror(err)));
    return;  // a directory that cannot be opened for reading (mode -wx): written unlocked, as before locks
  }
  int rc = 0;
  do rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw Error(fmt::format("{}{}{}: in use by another process (a run writing there now); wait for it to end or choose another "
                              "directory",
                              what, what.empty() ? "" : " ", dir.string()));
    // a file system without flock (ENOLCK on some NFS mounts): the lock protects against a
    // mistake, and refusing every run there would be worse than going on without it
  }
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() noexcept {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the open file releases its flock
  fd_ = -1;
}

}  // namespace kevo
