// The .kir text format: parse (with located errors) and print (round-trips). Grammar: docs/KIR.md.
#pragma once
#include <string>
#include <string_view>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// Parses and checks one kernel: syntax, names, shapes, index extents. Errors are located
// (file:line:column, the line, a caret) and say what was expected. Never crashes or hangs.
Expected<Kernel, Diagnostic> parse_kernel(std::string_view text, std::string file = "<string>");
// Canonical text; parse_kernel(print_kernel(k)) == k.
std::string print_kernel(const Kernel& k);
// Checks a kernel built in C++ (same checks as the parser) — the builder calls it.
Expected<Kernel, Diagnostic> validate(Kernel k);
// Stable hash of a kernel (of its canonical text): same kernel => same hash on every machine.
std::uint64_t kernel_hash(const Kernel& k);

}  // namespace kevo::ir
