// libFuzzer target for the .kir parser: any byte string must parse to a kernel or give a located
// diagnostic — never crash, hang or leak — and anything accepted must round-trip through the
// printer. With KEVO_FUZZ_WRITE_SEEDS=<dir> it writes every workload's text there and exits
// (fuzz/run_bounded.sh builds its seed corpus this way).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("KEVO_FUZZ_WRITE_SEEDS");
  if (!dir) return 0;
  int n = 0;
  for (const auto& w : kevo::ir::workloads()) {
    for (const std::string& spec : {w.name, w.example}) {
      auto k = kevo::ir::workload(spec);
      if (!k) continue;
      std::ofstream(std::string(dir) + "/" + w.name + "_" + std::to_string(n++) + ".kir")
          << kevo::ir::print_kernel(*k);
    }
  }
  std::printf("wrote %d seeds to %s\n", n, dir);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto k = kevo::ir::parse_kernel(text, "fuzz.kir");
  if (!k) {
    const auto& d = k.error();
    if (d.loc.line < 1 || d.loc.column < 1 || d.message.empty()) std::abort();
    (void)d.str();
    return 0;
  }
  const std::string printed = kevo::ir::print_kernel(*k);
  auto again = kevo::ir::parse_kernel(printed, "printed.kir");
  if (!again || !(*again == *k)) {
    std::fprintf(stderr, "round trip failed:\n%s\n", printed.c_str());
    std::abort();
  }
  (void)kevo::ir::kernel_hash(*k);
  return 0;
}
