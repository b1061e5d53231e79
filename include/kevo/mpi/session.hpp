// An MPI session: initialises MPI (thread level "serialized": kevo calls MPI from one thread at a
// time) unless the embedder already did, and gives the rank, the world size and the rank's place on
// its host. Every kevo MPI object works on its own duplicate of MPI_COMM_WORLD, so an embedder's
// messages never meet kevo's.
#pragma once
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "kevo/core/error.hpp"

namespace kevo::mpi {

// True when an MPI launcher started this process: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE),
// MPICH/Hydra (PMI_SIZE), Slurm's srun with PMIx (PMIX_RANK) or PMI-2 (PMI_RANK). Reads the
// environment only; MPI is not initialised.
bool launched_by_mpi() noexcept;

// A rank of the job stopped answering within its bound (FarmOptions/IslandOptions::timeout_s), or
// sent something kevo cannot read. The message names the rank and what was awaited.
class RankError : public Error {
 public:
  using Error::Error;
};

class Session {
 public:
  // Initialises MPI if needed (MPI_Init_thread, MPI_THREAD_SERIALIZED). Throws kevo::Error when
  // MPI cannot provide that thread level.
  Session();
  ~Session();  // MPI_Finalize when this session initialised MPI
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  [[nodiscard]] int rank() const noexcept;
  [[nodiscard]] int size() const noexcept;
  // The rank's index among the ranks of its host (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED) and
  // their number: what selects a rank's local device. Also exported to the environment as
  // KEVO_MPI_RANK, KEVO_MPI_SIZE, KEVO_MPI_LOCAL_RANK and KEVO_MPI_LOCAL_SIZE, so a cmd: worker
  // started by this rank can pick its NeuronCore or GPU whatever the launcher.
  [[nodiscard]] int local_rank() const noexcept;
  [[nodiscard]] int local_size() const noexcept;
  [[nodiscard]] std::string host() const;
  // Collective: rank 0's `value` on every rank (e.g. a results directory named by rank 0's clock).
  [[nodiscard]] std::string broadcast(std::string value) const;
  // Ends every rank of the job (MPI_Abort on MPI_COMM_WORLD) with `code`.
  [[noreturn]] void abort(int code) const;

  struct Impl;
  [[nodiscard]] Impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kevo::mpi
