// The MPI session: initialisation, kevo's communicator, rank-local placement.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm.hpp"

namespace kevo::mpi {

bool launched_by_mpi() noexcept {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

Session::Session() : impl_(std::make_unique<Impl>()) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("mpi: MPI_Init_thread failed");
    impl_->owns = true;
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error(fmt::format("mpi: this MPI provides thread level {} but kevo needs MPI_THREAD_SERIALIZED", provided));
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("mpi: MPI was initialised below MPI_THREAD_SERIALIZED; kevo calls MPI from a thread of its own");
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->world);
  MPI_Comm_set_errhandler(impl_->world, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_rank(impl_->world, &impl_->rank);
  MPI_Comm_size(impl_->world, &impl_->size);
  MPI_Comm local;
  MPI_Comm_split_type(impl_->world, MPI_COMM_TYPE_SHARED, impl_->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &impl_->local_rank);
  MPI_Comm_size(local, &impl_->local_size);
  MPI_Comm_free(&local);
  ::setenv("KEVO_MPI_RANK", std::to_string(impl_->rank).c_str(), 1);
  ::setenv("KEVO_MPI_SIZE", std::to_string(impl_->size).c_str(), 1);
  ::setenv("KEVO_MPI_LOCAL_RANK", std::to_string(impl_->local_rank).c_str(), 1);
  ::setenv("KEVO_MPI_LOCAL_SIZE", std::to_string(impl_->local_size).c_str(), 1);
}

Session::~Session() {
  if (impl_->world != MPI_COMM_NULL) MPI_Comm_free(&impl_->world);
  if (impl_->owns) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

int Session::rank() const noexcept { return impl_->rank; }
int Session::size() const noexcept { return impl_->size; }
int Session::local_rank() const noexcept { return impl_->local_rank; }
int Session::local_size() const noexcept { return impl_->local_size; }

std::string Session::host() const {
  char name[MPI_MAX_PROCESSOR_NAME];
  int n = 0;
  MPI_Get_processor_name(name, &n);
  return std::string(name, static_cast<std::size_t>(n));
}

std::string Session::broadcast(std::string value) const {
  std::uint64_t n = value.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, impl_->world);
  value.resize(n);
  MPI_Bcast(value.data(), static_cast<int>(n), MPI_CHAR, 0, impl_->world);
  return value;
}

void Session::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  // The launcher forwards a rank's output asynchronously and drops what is still in flight when
  // MPI_Abort kills the job: give it a moment, so the message that says why reaches the user.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kevo::mpi
