// Why a schedule (a genome of any schedule space: NeuronCore or Triton) is invalid: the one
// invalid-schedule type of kevo, shared by planning, lowering, repair and the GPU space. An
// invalid schedule is an ordinary value (Expected<..., Invalid>), never an exception, and never
// reaches a runner.
#pragma once
#include <string>

namespace kevo {

struct Invalid {
  // A stable snake_case reason, e.g. sbuf_overflow, psum_overflow, psum_banks, tile_limit,
  // too_large, illegal_fusion, illegal_order, unfusable, precision, unsupported (NeuronCore);
  // smem_overflow, register_overflow, too_many_threads, ... (Triton). Never empty.
  std::string code;
  // One line for people, e.g. "needs 230 KiB per partition, trn1 has 192 KiB".
  std::string message;
  // The one gene change that most likely fixes it (used by repair): gene index and value index,
  // or -1 when there is no such hint.
  int fix_gene = -1;
  int fix_value = -1;

  [[nodiscard]] bool has_fix() const noexcept { return fix_gene >= 0 && fix_value >= 0; }
  // "code: message", as the CLI, the C API and the Python module print it.
  [[nodiscard]] std::string str() const { return code + ": " + message; }
};

}  // namespace kevo
