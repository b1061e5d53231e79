// Private to lib/ir: the semantic checker shared by the parser (with source positions) and
// validate() (C++-built kernels, no positions), and printer pieces used in messages.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::ir::detail {

inline constexpr std::size_t kMaxTextBytes = std::size_t{1} << 20;
inline constexpr int kMaxExprDepth = 256;
// The error past kMaxExprDepth. A chain such as a + b + c nests one level per operator, which a
// flat sum of many terms reaches without a parenthesis, so the message says what counts.
inline std::string nested_too_deep() {
  return "expression nested deeper than " + std::to_string(kMaxExprDepth) +
         " levels (parentheses, calls, unary minus and each operator of a chain such as a + b + c count one "
         "level each): split it over several statements";
}
inline constexpr std::size_t kMaxOps = 4096;
inline constexpr std::size_t kMaxTensors = 1024;
inline constexpr std::size_t kMaxRank = 4;
inline constexpr std::int64_t kMaxDimSize = std::int64_t{1} << 31;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
inline constexpr std::size_t kMaxNameLength = 64;
inline constexpr std::int64_t kMaxShift = std::int64_t{1} << 31;  // largest stride or |offset| of a shifted index

// Source positions (byte offsets) of one statement's parts; expr holds one per Expr node in preorder.
struct OpLoc {
  std::size_t stmt = 0, out = 0;
  std::vector<std::size_t> out_idx, red_idx, expr;
};
struct SourceMap {
  std::string_view text;
  std::string file;
  std::size_t kernel_name = 0;
  std::vector<std::size_t> dim_pos;     // per Kernel::dims entry: where its size is given
  std::vector<std::size_t> tensor_pos;  // per declared tensor (inputs, outputs)
  std::vector<OpLoc> ops;
};

// Semantic checks; temps in k.tensors are re-inferred from their writes (must be fp32 and agree),
// dims are put in order of first use. Returns the canonical kernel.
Expected<Kernel, Diagnostic> check(Kernel k, const SourceMap* src);

bool is_identifier(std::string_view s) noexcept;
std::string print_expr(const Expr& e);
std::string print_op(const Op& op);

}  // namespace kevo::ir::detail
