// FLOP and byte counts. Counting rules (docs/KIR.md): a contraction costs 2 FLOPs per
// multiply-add; a map costs one FLOP per function call (operators included) per output element;
// a reduction costs one FLOP per combined element plus its expression's calls per element, and a
// mean one division per output element.
#include "kevo/ir/analysis.hpp"

namespace kevo::ir {

namespace {
std::int64_t calls(const Expr& e) {
  std::int64_t n = e.kind == Expr::Kind::call ? 1 : 0;
  for (const auto& a : e.args) n += calls(a);
  return n;
}
}  // namespace

Analysis analyze(const Kernel& k) {
  Analysis a;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    std::int64_t points = 1, outs = 1;
    const auto idx = k.op_indices(i);
    for (std::size_t j = 0; j < idx.size(); ++j) {
      points *= idx[j].second;
      if (j < op.out_indices.size()) outs *= idx[j].second;
    }
    std::int64_t f = 0;
    switch (op.kind()) {
      case OpKind::contract:
        f = 2 * points;
        a.contraction_flops += f;
        break;
      case OpKind::map: f = calls(op.expr) * outs; break;
      case OpKind::reduce:
        f = (calls(op.expr) + 1) * points + (op.reduce == ReduceOp::mean ? outs : 0);
        break;
    }
    a.op_flops.push_back(f);
    a.flops += f;
  }
  for (const auto& t : k.tensors)
    if (t.role != Role::temp) a.min_hbm_bytes += k.elements(t) * static_cast<std::int64_t>(dtype_bytes(t.dtype));
  a.intensity = a.min_hbm_bytes > 0 ? static_cast<double>(a.flops) / static_cast<double>(a.min_hbm_bytes) : 0.0;
  return a;
}

}  // namespace kevo::ir
