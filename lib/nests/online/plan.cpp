// Planning of an online-softmax nest (OnlineSlot): tiles and every buffer.
#include <fmt/format.h>

#include <algorithm>

#include "schedule/planner.hpp"

namespace kevo::schedule::detail {

std::optional<Invalid> plan_online(const Ctx& cx, NestPlan& n, int oi) {
  const auto& k = cx.s.kernel;
  const auto& os = cx.s.onlines[static_cast<std::size_t>(oi)];
  OnlinePlan& o = n.o;
  o.slot = oi;
  o.tr = std::min(cx.num(os.tile_row), os.ext_row);
  o.tj = std::min(cx.num(os.tile_j), os.ext_j);
  o.nr = (os.ext_row + o.tr - 1) / o.tr;
  o.nj = (os.ext_j + o.tj - 1) / o.tj;
  o.outer = 1;
  const auto& ms = cx.s.ops[static_cast<std::size_t>(os.mx)];
  for (const auto& x : os.outer) o.outer *= ms.extent(x, 1);
  o.bufs = static_cast<int>(cx.num(os.bufs));
  o.queues = static_cast<int>(cx.num(os.queues));
  o.issue = static_cast<IssueOrder>(cx.val(os.issue));
  const auto op = [&](int i) -> const ir::Op& { return k.ops[static_cast<std::size_t>(i)]; };
  const auto dt = [&](const std::string& tn) { return cx.s.tensor(tn).dtype; };
  const int P = static_cast<int>(o.tr);
  const std::string& a = op(os.mx).expr.tensor;
  const std::string& ename = op(os.ex).out;
  o.buf_x = add_buf(n, BufSpec{"ld." + a, false, dt(a), P, o.tj, o.bufs});
  o.buf_e = add_buf(n, BufSpec{ename, false, dt(ename), P, o.tj, o.bufs});
  o.buf_rmax = add_buf(n, BufSpec{"rowmax", false, ir::DType::fp32, P, 1, o.bufs});
  o.buf_negm = add_buf(n, BufSpec{"negmax", false, ir::DType::fp32, P, 1, o.bufs});
  o.buf_corr = add_buf(n, BufSpec{"corr", false, ir::DType::fp32, P, 1, o.bufs});
  o.buf_m = add_buf(n, BufSpec{op(os.mx).out, false, ir::DType::fp32, P, 1, 4});
  o.buf_l = add_buf(n, BufSpec{op(os.sum).out, false, ir::DType::fp32, P, 1, 2});
  const OutsideReads outside(cx.s, n.ops);
  const auto leaves = [&](int i) { return cx.s.tensor(op(i).out).role == ir::Role::output || outside.contains(op(i).out); };
  if (leaves(os.mx)) o.buf_mx_out = add_buf(n, BufSpec{op(os.mx).out + ".out", false, dt(op(os.mx).out), P, 1, 2});
  if (leaves(os.sum)) o.buf_l_out = add_buf(n, BufSpec{op(os.sum).out + ".out", false, dt(op(os.sum).out), P, 1, 2});
  std::vector<std::pair<std::string, int>> produced{{ename, o.buf_e}, {op(os.mx).out, o.buf_m}, {op(os.sum).out, o.buf_l}};
  std::vector<std::vector<std::string>> pidx{op(os.ex).out_indices, op(os.mx).out_indices, op(os.sum).out_indices};
  return build_tc(cx, n, n.tc, os.post, P, o.tj, os.row, os.j, o.bufs, produced, pidx, outside);
}

// The gene change most likely to shrink this nest's SBUF use (make_plan's sbuf_overflow hint).
std::pair<int, int> sbuf_fix_online(const Ctx& cx, const NestPlan& n) {
  const auto& os = cx.s.onlines[static_cast<std::size_t>(n.o.slot)];
  for (int gi : {os.bufs, os.tile_j})
    if (cx.val(gi) > 0) return {gi, cx.val(gi) - 1};
  return {os.gene, 0};
}

}  // namespace kevo::schedule::detail
