# Third-party packages, all from Debian (cmake/install-deps.sh installs them).
# They stay private to the modules that use them: no public kevo header includes
# Eigen, Boost.Graph, TBB or cereal, so user code compiles fast.
find_package(fmt REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(Boost 1.74 REQUIRED)            # Boost.Graph is header-only
find_package(TBB REQUIRED)
find_package(cereal REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
find_package(SQLite3 REQUIRED)             # tuning records (libsqlite3-dev)
find_package(CURL QUIET)
find_package(tomlplusplus QUIET)
find_package(CLI11 QUIET)
find_package(BLAS QUIET)
# OpenBLAS by name: verify's interpreter (and ir's reference under the sanitizers) hand their
# products to it (lib/verify/CMakeLists.txt, lib/ir/CMakeLists.txt)
find_library(KEVO_OPENBLAS_LIBRARY NAMES openblas)
# ONNX (optional): the model module (kevo model, kevo.from_torch). Debian: libonnx-dev libprotobuf-dev.
find_package(Protobuf QUIET)
if(Protobuf_FOUND)
  find_package(ONNX CONFIG QUIET)
endif()
if(TARGET onnx)
  set(KEVO_WITH_MODEL ON)
else()
  set(KEVO_WITH_MODEL OFF)
  message(STATUS "kevo: ONNX (libonnx-dev, libprotobuf-dev) not found: the model module (kevo model) is skipped")
endif()

# The Python module: Debian's python3 (the interpreter its numpy and pytest belong to) unless
# Python_EXECUTABLE says otherwise; pybind11 from pybind11-dev.
if(KEVO_BUILD_PYTHON)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 2.6 REQUIRED CONFIG)
endif()

# MPI (optional): the kevo_mpi module (searches across machines, docs/SCALING.md) and its tests
# under mpirun. Debian: libopenmpi-dev openmpi-bin. Without MPI kevo builds and tests as before.
find_package(MPI QUIET COMPONENTS CXX)  # the C API through the C++ compiler (a C++-only project finds it too)
if(MPI_CXX_FOUND)
  option(KEVO_WITH_MPI "Build the kevo_mpi module (MPI found)" ON)
else()
  option(KEVO_WITH_MPI "Build the kevo_mpi module (MPI not found)" OFF)
endif()
if(KEVO_WITH_MPI AND NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "KEVO_WITH_MPI is ON but MPI was not found (install libopenmpi-dev openmpi-bin)")
endif()
