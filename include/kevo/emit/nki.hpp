// The NKI emitter: prints a lowered TileProgram as a Python kernel for the current NKI API
// (import nki / nki.language as nl / nki.isa as nisa, @nki.jit, nl.ndarray buffers, one nisa call
// per instruction), so a Trainium user can run the schedule kevo found. Straight-line code: NKI
// unrolls Python loops at trace time anyway. Format and limits: docs/EMIT.md.
#pragma once
#include <string>

#include "kevo/ir/kernel.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::emit {

struct EmitOptions {
  std::string function_name;   // default: the kernel's name, made a Python identifier
  bool group_comments = true;  // a "# nest g: <group name>" line where the fused loop nest changes
  bool engine_args = true;     // pass engine=nisa.engine.<e> to instructions that take one
};

// The kernel as Python source. Inputs of `k` become parameters (in Kernel::tensors order),
// outputs are allocated in nl.shared_hbm and returned. Throws kevo::Error when the program
// refers to buffers or tensors that do not exist.
std::string emit_nki(const lower::TileProgram& p, const ir::Kernel& k, const EmitOptions& opt = {});

// NKI spellings, exposed for tests and tools.
std::string_view nki_dtype(ir::DType) noexcept;  // "nl.bfloat16", "nl.float32", "nl.float16", "nl.float8_e4m3"
std::string_view nki_op(ir::Fn) noexcept;        // "nl.add", "nl.exp", "nl.gelu_apprx_tanh", ...
std::string_view nisa_name(lower::Opcode) noexcept;  // "nc_matmul", "dma_copy", ...

}  // namespace kevo::emit
