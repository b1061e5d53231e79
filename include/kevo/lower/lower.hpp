// Lowering: kernel + genome + target -> TileProgram, or a typed reason why the genome is invalid
// (invalid genomes are normal values; no runner ever sees them).
#pragma once
#include <string>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/lower/program.hpp"
#include "kevo/schedule/space.hpp"

namespace kevo::lower {

struct Invalid {
  std::string code;     // sbuf_overflow, psum_overflow, tile_limit, partition_start, psum_banks, unsupported, ...
  std::string message;  // e.g. "needs 230 KiB per partition, trn1 has 192 KiB"
  [[nodiscard]] std::string str() const { return code + ": " + message; }
};

Expected<TileProgram, Invalid> lower(const schedule::ScheduleSpace& space, const Genome& g);

}  // namespace kevo::lower
