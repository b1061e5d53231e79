// libFuzzer target for the lowering's differential test over (kernel text, genome bytes): the
// input is a .kir kernel, a 0 byte, then genome bytes (one per gene slot, taken modulo the gene's
// choices; a permutation is a Fisher-Yates shuffle driven by its bytes; missing bytes keep the
// default schedule's values). The first genome byte, when odd, asks the space to repair the
// genome first. Every (kernel, genome) that derives must lower to a program equal to the
// reference evaluator in program and adversarial order, or be rejected with a typed reason;
// anything else aborts with the case printed. Kernels over 2^16 elements per tensor or 8 ops are
// skipped (the interpreter must stay fast). With KEVO_FUZZ_WRITE_SEEDS=<dir> it writes a seed
// corpus (random kernels and the rmsnorm of issue 15) there and exits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "kevo/core/rng.hpp"
#include "kevo/ir/random.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/target/target.hpp"
#include "kevo/verify/differential.hpp"

namespace {

const kevo::target::Target& trn2() {
  static const kevo::target::Target t = *kevo::target::load_target("trn2");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("KEVO_FUZZ_WRITE_SEEDS");
  if (!dir) return 0;
  kevo::ir::RandomKernelOptions o;
  o.max_contracted_indices = 1;
  o.max_tensor_elements = 1 << 12;
  o.max_extent = 64;
  int n = 0;
  for (std::uint64_t s = 0; s < 24; ++s) {
    const std::string text = kevo::ir::print_kernel(kevo::ir::random_kernel(s, o));
    std::string genome;
    kevo::Rng r(s, 1);
    for (int i = 0; i < 48; ++i) genome.push_back(static_cast<char>(r.below(256)));
    std::ofstream(std::string(dir) + "/random_" + std::to_string(n++) + ".bin", std::ios::binary)
        << text << '\0' << genome;
  }
  const std::string rms =
      "kernel rmsnorm(X: fp32[R=64, C=96], g: fp32[C]) -> (Y: fp32[R, C]) {\n"
      "  ms[r] = mean(c) X[r, c] * X[r, c]\n  inv[r] = rsqrt(ms[r] + 1e-6)\n  Y[r, c] = X[r, c] * inv[r] * g[c]\n}\n";
  std::ofstream(std::string(dir) + "/rmsnorm.bin", std::ios::binary) << rms << '\0' << std::string(24, '\1');
  std::printf("wrote %d seeds to %s\n", n + 1, dir);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view bytes = nul == std::string_view::npos ? std::string_view{} : all.substr(nul + 1);
  auto k = kevo::ir::parse_kernel(text, "fuzz.kir");
  if (!k || k->ops.size() > 8) return 0;
  for (const auto& t : k->tensors)
    if (k->elements(t) > (1 << 16)) return 0;
  auto space = kevo::schedule::ScheduleSpace::try_derive(*k, trn2());
  if (!space) return 0;  // no schedule space for this kernel (a typed value, e.g. a contraction over 2 indices)
  const kevo::Space& sp = space->genes();
  kevo::Genome g = space->default_genome();
  std::size_t b = 1;
  for (std::size_t i = 0; i < sp.size() && b < bytes.size(); ++i) {
    auto slots = sp.slots(g, i);
    if (sp.gene(i).kind == kevo::GeneKind::permutation) {
      for (std::size_t j = slots.size(); j > 1 && b < bytes.size(); --j)
        std::swap(slots[j - 1], slots[static_cast<std::uint8_t>(bytes[b++]) % j]);
    } else {
      slots[0] = static_cast<std::int32_t>(static_cast<std::uint8_t>(bytes[b++]) % sp.gene(i).choices());
    }
  }
  if (!bytes.empty() && (static_cast<std::uint8_t>(bytes[0]) & 1)) {
    kevo::Rng r(static_cast<std::uint8_t>(bytes[0]));
    space->repair(g, r);
  }
  const auto r = kevo::verify::differential(*space, g, 7);
  if (r.verdict == kevo::verify::DiffVerdict::disagree) {
    std::fprintf(stderr, "lowering disagrees with the reference: %s\n%s\n---\n%s\n", r.reason.c_str(),
                 kevo::ir::print_kernel(*k).c_str(), space->print(g).c_str());
    std::abort();
  }
  return 0;
}
