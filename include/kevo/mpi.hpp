// kevo::mpi -- searches across machines over MPI (docs/SCALING.md): an evaluation farm (rank 0
// runs the strategy, every rank evaluates on its own problem and runner) and islands over ranks
// (each rank evolves its own islands; migrants travel over MPI on a ring). Optional module: built
// when CMake finds MPI (KEVO_WITH_MPI). No public header includes <mpi.h>.
#pragma once
#include "kevo/mpi/farm.hpp"
#include "kevo/mpi/islands.hpp"
#include "kevo/mpi/session.hpp"
