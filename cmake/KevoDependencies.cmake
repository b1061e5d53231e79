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
find_package(CURL QUIET)
find_package(tomlplusplus QUIET)
find_package(CLI11 QUIET)
find_package(BLAS QUIET)
