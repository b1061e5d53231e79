#include "kevo/lower/program.hpp"

#include <algorithm>

namespace kevo::lower {

std::string_view to_string(Memory m) noexcept {
  switch (m) {
    case Memory::hbm: return "hbm";
    case Memory::sbuf: return "sbuf";
    case Memory::psum: return "psum";
  }
  return "?";
}

std::string_view to_string(Opcode o) noexcept {
  switch (o) {
    case Opcode::dma_copy: return "dma_copy";
    case Opcode::dma_transpose: return "dma_transpose";
    case Opcode::nc_matmul: return "nc_matmul";
    case Opcode::nc_transpose: return "nc_transpose";
    case Opcode::activation: return "activation";
    case Opcode::tensor_tensor: return "tensor_tensor";
    case Opcode::tensor_scalar: return "tensor_scalar";
    case Opcode::tensor_reduce: return "tensor_reduce";
    case Opcode::tensor_copy: return "tensor_copy";
    case Opcode::memset: return "memset";
    case Opcode::iota: return "iota";
    case Opcode::bn_stats: return "bn_stats";
    case Opcode::bn_aggr: return "bn_aggr";
    case Opcode::tensor_copy_predicated: return "tensor_copy_predicated";
    case Opcode::affine_select: return "affine_select";
    case Opcode::scalar_tensor_tensor: return "scalar_tensor_tensor";
  }
  return "?";
}

std::int64_t Buffer::elements() const noexcept {
  if (mem == Memory::hbm) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  return static_cast<std::int64_t>(partitions) * free_elems * nbufs;
}

std::int64_t Buffer::start_partition(const AccessPattern& a) const noexcept {
  const std::int64_t row = std::max<std::int64_t>(1, free_elems);
  return partition_at(a.offset, std::max(1, partitions) * row, row);
}

std::int64_t Buffer::bytes_per_partition() const noexcept {
  if (mem == Memory::hbm) return 0;
  // PSUM is counted at 4 bytes an element whatever the dtype: a 16-bit transposed tile still holds
  // its bank (as the plan counts it, schedule/plan.cpp BufSpec::bytes_per_partition)
  const std::int64_t eb = mem == Memory::psum ? 4 : static_cast<std::int64_t>(ir::dtype_bytes(dtype));
  return free_elems * eb * nbufs;
}

}  // namespace kevo::lower
