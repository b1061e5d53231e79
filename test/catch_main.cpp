// Catch2's main for every test binary. A binary that links kevo's interpreter sets OpenBLAS up the
// way the kevo command does (verify::configure_process_blas, an opt-in for applications); the
// weak reference stays null in binaries without it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

namespace kevo::verify {
void configure_process_blas() __attribute__((weak));
}

int main(int argc, char* argv[]) {
  if (kevo::verify::configure_process_blas) kevo::verify::configure_process_blas();
  return Catch::Session().run(argc, argv);
}
