// Private: MPI handles behind kevo::mpi::Session, bounded waits, and the byte encoding of genomes,
// evaluations and individuals in messages.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "kevo/evo/operator.hpp"
#include "kevo/mpi/session.hpp"

namespace kevo::mpi {

struct Session::Impl {
  MPI_Comm world = MPI_COMM_NULL;  // kevo's duplicate of MPI_COMM_WORLD
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  bool owns = false;  // this session called MPI_Init_thread
};

namespace detail {

using Clock = std::chrono::steady_clock;

// Polls with a growing pause: none at first, at most 50 us for the first 20 ms after reset() (an
// answer is usually that close: the next job after a result), then up to `max_pause`. kevo never
// spins a core while it waits (several ranks share a host's cores with their workers).
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds max_pause = std::chrono::microseconds(1000)) : max_(max_pause) {}
  void pause() {
    if (n_ < 8) {
      ++n_;
      std::this_thread::yield();
      return;
    }
    const bool fresh = Clock::now() - since_ < std::chrono::milliseconds(20);
    const auto cap = fresh ? std::min(max_, std::chrono::microseconds(50)) : max_;
    cur_ = std::min(cap, cur_ == std::chrono::microseconds(0) ? std::chrono::microseconds(10) : cur_ * 2);
    std::this_thread::sleep_for(cur_);
  }
  void reset() {
    n_ = 0;
    cur_ = std::chrono::microseconds(0);
    since_ = Clock::now();
  }

 private:
  std::chrono::microseconds max_;
  std::chrono::microseconds cur_{0};
  Clock::time_point since_ = Clock::now();
  int n_ = 0;
};

inline Clock::time_point deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A message from `source` with `tag` (MPI_ANY_* allowed) before `deadline`: its status, or nullopt.
inline std::optional<MPI_Status> probe_until(MPI_Comm comm, int source, int tag, Clock::time_point deadline) {
  Backoff b;
  while (true) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, tag, comm, &flag, &st);
    if (flag) return st;
    if (Clock::now() >= deadline) return std::nullopt;
    b.pause();
  }
}

// Receives the probed message into a string.
inline std::string recv_probed(MPI_Comm comm, const MPI_Status& st) {
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  std::string buf(static_cast<std::size_t>(n), '\0');
  MPI_Recv(buf.data(), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, MPI_STATUS_IGNORE);
  return buf;
}

// True when `req` completed before `deadline`.
inline bool wait_until(MPI_Request& req, Clock::time_point deadline) {
  Backoff b;
  while (true) {
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag) return true;
    if (Clock::now() >= deadline) return false;
    b.pause();
  }
}

// Little-endian-agnostic byte encoding (ranks of one job share an ABI: same binary or build).
class Writer {
 public:
  template <typename T>
  Writer& pod(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Writer& u64(std::uint64_t v) { return pod(v); }
  Writer& f64(double v) { return pod(v); }
  Writer& str(std::string_view s) {
    u64(s.size());
    out.append(s.data(), s.size());
    return *this;
  }
  Writer& genome(const Genome& g) {
    u64(g.size());
    out.append(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(std::int32_t));
    return *this;
  }
  Writer& evaluation(const evo::Evaluation& e) {
    u64(static_cast<std::uint64_t>(e.status)).str(e.reason);
    u64(e.fitness.size());
    for (double f : e.fitness) f64(f);
    u64(e.descriptors.size());
    for (double d : e.descriptors) f64(d);
    f64(e.cost).str(e.profile);
    u64(e.metrics.size());
    for (const auto& [k, v] : e.metrics) str(k).f64(v);
    return *this;
  }
  Writer& individual(const evo::Individual& i) {
    genome(i.genome).evaluation(i.eval).u64(i.id).str(i.op).u64(i.generation);
    return *this;
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}
  template <typename T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::uint64_t u64() { return pod<std::uint64_t>(); }
  double f64() { return pod<double>(); }
  std::string str() {
    const auto n = u64();
    need(n);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  Genome genome() {
    const auto n = u64();
    need(n * sizeof(std::int32_t));
    Genome g(n);
    std::memcpy(g.data(), in_.data() + at_, n * sizeof(std::int32_t));
    at_ += n * sizeof(std::int32_t);
    return g;
  }
  evo::Evaluation evaluation() {
    evo::Evaluation e;
    const auto st = u64();
    if (st > static_cast<std::uint64_t>(Status::error)) fail("bad status");
    e.status = static_cast<Status>(st);
    e.reason = str();
    e.fitness.resize(count(8));
    for (auto& f : e.fitness) f = f64();
    e.descriptors.resize(count(8));
    for (auto& d : e.descriptors) d = f64();
    e.cost = f64();
    e.profile = str();
    e.metrics.resize(count(16));
    for (auto& [k, v] : e.metrics) {
      k = str();
      v = f64();
    }
    return e;
  }
  evo::Individual individual() {
    evo::Individual i;
    i.genome = genome();
    i.eval = evaluation();
    i.id = u64();
    i.op = str();
    i.generation = u64();
    return i;
  }
  [[nodiscard]] bool done() const { return at_ == in_.size(); }

 private:
  std::size_t count(std::size_t min_bytes_each) {
    const auto n = u64();
    if (n > (in_.size() - at_) / min_bytes_each) fail("bad count");
    return static_cast<std::size_t>(n);
  }
  void need(std::uint64_t n) {
    if (n > in_.size() - at_) fail("truncated");
  }
  [[noreturn]] void fail(const char* why) const { throw RankError("mpi: unreadable message (" + what_ + "): " + why); }
  std::string_view in_;
  std::size_t at_ = 0;
  std::string what_;
};

inline void send_bytes(MPI_Comm comm, const std::string& buf, int dest, int tag) {
  MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, dest, tag, comm);
}

}  // namespace detail
}  // namespace kevo::mpi
