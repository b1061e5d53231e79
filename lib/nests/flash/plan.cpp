// Planning of a flash nest (FlashSlot): tiles, transposes and every buffer.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "schedule/planner.hpp"

namespace kevo::schedule::detail {

std::optional<Invalid> plan_flash(const Ctx& cx, NestPlan& n, int fi) {
  const auto& t = cx.s.target;
  const auto& k = cx.s.kernel;
  const auto& fs = cx.s.flashes[static_cast<std::size_t>(fi)];
  FlashPlan& f = n.f;
  f.slot = fi;
  const auto& o1 = cx.s.ops[static_cast<std::size_t>(fs.qk)];
  const auto& c1 = cx.s.contracts[static_cast<std::size_t>(o1.contract)];
  const auto& c2 = cx.s.contracts[static_cast<std::size_t>(cx.s.ops[static_cast<std::size_t>(fs.pv)].contract)];
  const std::int64_t bank = t.psum_bank_bytes / 4;
  f.tq = std::min(cx.num(fs.tile_row), fs.ext_row);
  f.tkv = std::min(cx.num(fs.tile_kv), fs.ext_kv);
  f.nq = (fs.ext_row + f.tq - 1) / f.tq;
  f.nkv = (fs.ext_kv + f.tkv - 1) / f.tkv;
  f.outer = 1;
  for (const auto& x : fs.outer) f.outer *= o1.extent(x, 1);
  f.tk = std::min<std::int64_t>(t.pmax, fs.ext_hd);
  f.nk = (fs.ext_hd + f.tk - 1) / f.tk;
  f.chunks = (f.tkv + t.pmax - 1) / t.pmax;
  f.bufs = static_cast<int>(cx.num(fs.bufs));
  f.psum_bufs = static_cast<int>(cx.num(fs.psum_bufs));
  f.skew = cx.val(fs.skew) == 1;
  // row tiles sharing each K and V tile: each keeps its Qᵀ, running max, sum and accumulator
  f.qblock = std::min<std::int64_t>(cx.num(fs.qblock), f.nq);
  const int qb = static_cast<int>(f.qblock);
  f.issue = static_cast<IssueOrder>(cx.val(fs.issue));
  // skewed, kv tile j+1's K, V and scores are written before tile j's softmax and PV read tile j's:
  // they need a second rotation slot each, or tile j would read tile j+1's
  if (f.skew && (f.bufs < 2 || f.psum_bufs < 2))
    return Invalid{"illegal_order",
                   fmt::format("{}: skew=yes issues the next kv tile's loads and scores before this tile's PV, which needs "
                               "bufs >= 2 and psum >= 2 (has bufs={} psum={})",
                               n.name, f.bufs, f.psum_bufs),
                   f.bufs < 2 ? fs.bufs : fs.psum_bufs, 1};
  // (alternate is the contraction nest's: the flash nest evicts on Vector then)
  f.evict = cx.val(c1.evict) == 1 ? target::Engine::scalar : target::Engine::vector;
  const std::int64_t vcap = std::min<std::int64_t>(t.moving_fmax, bank);
  if (fs.ext_vd > vcap)
    return Invalid{"tile_limit",
                  fmt::format("{}: {}={} exceeds one PV matmul's moving free size {} on {} (the flash nest does not split it)",
                              n.name, fs.vd, fs.ext_vd, vcap, t.name),
                  fs.gene, 0};
  const int qo = fs.q_operand, ko = 1 - fs.q_operand;
  // nki.isa.nc_matmul takes fp32 with fp32 only: where one operand of S = Q·Kᵀ (or of P·V) is fp32,
  // the other is held in fp32 on chip (as in the contraction nest, ContractPlan::mm_dtype)
  const auto dt = [&](const std::string& tn) { return cx.s.tensor(tn).dtype; };
  const bool qk_fp32 = ir::dtype_bytes(dt(c1.operand[0])) == 4 || ir::dtype_bytes(dt(c1.operand[1])) == 4;
  for (int r = 0; r < 2; ++r) {
    const int q = r == 0 ? qo : ko;
    const auto uq = static_cast<std::size_t>(q);
    // the flash nest transposes per tile: dma_transpose_block and _region are dma_transpose there
    const int tv = cx.val(c1.transpose[q]);
    f.tr[static_cast<std::size_t>(r)] = !c1.needs_transpose[uq]      ? Transpose::none
                                        : tv >= kTransposeDmaBlock ? Transpose::dma_transpose
                                                                   : static_cast<Transpose>(1 + tv);
    if (f.tr[static_cast<std::size_t>(r)] == Transpose::dma_transpose && ir::dtype_bytes(cx.s.tensor(c1.operand[uq]).dtype) != 2)
      return Invalid{"unsupported",
                    fmt::format("{}: dma_transpose moves 2-byte elements only; {} is {}", n.name, c1.operand[uq],
                                ir::to_string(cx.s.tensor(c1.operand[uq]).dtype)),
                    c1.transpose[q], 0};
    if (f.tr[static_cast<std::size_t>(r)] == Transpose::dma_transpose && qk_fp32)
      return Invalid{"unsupported",
                     fmt::format("{}: {} is {} and the other operand fp32, so the matmul takes it in fp32 (nki.isa.nc_matmul); "
                                 "dma_transpose keeps its input's dtype (pe_transpose or strided converts)",
                                 n.name, c1.operand[uq], ir::to_string(dt(c1.operand[uq]))),
                     c1.transpose[q], 0};
    f.queues[static_cast<std::size_t>(r)] = static_cast<int>(cx.num(c1.load_q[q]));
  }
  f.queues[2] = static_cast<int>(cx.num(c2.load_q[1 - fs.e_operand]));

  // PSUM: scores and PV (x psum_bufs), eᵀ staging (2), PE-transpose staging of Q (1) and K (2).
  f.banks = 2 * f.psum_bufs + 2 + (f.tr[0] == Transpose::pe_transpose ? 1 : 0) + (f.tr[1] == Transpose::pe_transpose ? 2 : 0);
  if (f.banks > t.psum_banks) {
    int gene = fs.gene, v = 0;
    if (f.psum_bufs > 1) {
      gene = fs.psum_bufs;
    } else if (f.tr[1] == Transpose::pe_transpose) {
      gene = c1.transpose[ko];
      v = ir::dtype_bytes(cx.s.tensor(c1.operand[static_cast<std::size_t>(ko)]).dtype) == 2 ? 1 : 0;
    }
    return Invalid{"psum_banks",
                  fmt::format("{}: needs {} PSUM banks (scores and PV x {} rotation{}, eT staging{}{}), {} has {}", n.name,
                              f.banks, f.psum_bufs, f.psum_bufs == 1 ? "" : "s",
                              f.tr[0] == Transpose::pe_transpose ? ", Q transposes" : "",
                              f.tr[1] == Transpose::pe_transpose ? ", K transposes" : "", t.name, t.psum_banks),
                  gene, v};
  }

  const std::int64_t tile_of[2] = {f.tq, f.tkv};
  for (int r = 0; r < 2; ++r) {
    const int q = r == 0 ? qo : ko;
    const auto& tn = c1.operand[static_cast<std::size_t>(q)];
    const int nb = r == 0 ? std::min(f.bufs, 2) * qb : f.bufs;
    f.buf_t[static_cast<std::size_t>(r)] =
        add_buf(n, BufSpec{fmt::format("{}T", tn), false, qk_fp32 ? ir::DType::fp32 : dt(tn), static_cast<int>(f.tk), f.nk * tile_of[r], nb});
    if (f.tr[static_cast<std::size_t>(r)] == Transpose::pe_transpose) {
      const int rows = static_cast<int>(std::min<std::int64_t>(tile_of[r], t.pmax));
      const std::int64_t ch = (tile_of[r] + t.pmax - 1) / t.pmax;
      f.buf_nat[static_cast<std::size_t>(r)] = add_buf(n, BufSpec{tn + ".nat", false, dt(tn), rows, ch * f.tk, 2});
      f.buf_tpsum[static_cast<std::size_t>(r)] = add_buf(
          n, BufSpec{tn + ".T", true, dt(tn), static_cast<int>(f.tk), std::max(tile_of[r], bank), r == 0 ? 1 : 2});
    }
  }
  const auto& vt = c2.operand[static_cast<std::size_t>(1 - fs.e_operand)];
  const int kvrows = static_cast<int>(std::min<std::int64_t>(f.tkv, t.pmax));
  const int P = static_cast<int>(f.tq);
  const auto& ename0 = k.ops[static_cast<std::size_t>(fs.ex)].out;
  const ir::DType p_dt = dt(fs.ecast >= 0 ? k.ops[static_cast<std::size_t>(fs.ecast)].out : ename0);
  const bool pv_fp32 = ir::dtype_bytes(dt(vt)) == 4 || ir::dtype_bytes(p_dt) == 4;
  f.buf_v = add_buf(n, BufSpec{vt, false, pv_fp32 ? ir::DType::fp32 : dt(vt), kvrows, f.chunks * fs.ext_vd, f.bufs});
  const auto& sname = k.ops[static_cast<std::size_t>(fs.qk)].out;
  f.buf_spsum = add_buf(n, BufSpec{sname + ".psum", true, ir::DType::fp32, P, bank, f.psum_bufs});
  // maps on the scores read S from PSUM unless one runs on GpSimd (no PSUM access); else S is evicted
  f.s_in_psum = !fs.pre.empty();
  for (int o : fs.pre) f.s_in_psum = f.s_in_psum && cx.op_engine(o) != target::Engine::gpsimd;
  if (!f.s_in_psum) f.buf_s = add_buf(n, BufSpec{sname, false, dt(sname), P, f.tkv, f.bufs});
  f.buf_rmax = add_buf(n, BufSpec{"rowmax", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_m = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.mx)].out, false, ir::DType::fp32, P, 1, 2 * qb});
  f.buf_negm = add_buf(n, BufSpec{"negmax", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_corr = add_buf(n, BufSpec{"corr", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_l = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.sum)].out, false, ir::DType::fp32, P, 1, 2 * qb});
  const auto& ename = k.ops[static_cast<std::size_t>(fs.ex)].out;
  // P for its transposes and PV: e itself, or e cast (FlashSlot::ecast) in the cast's dtype. The
  // exp writes P directly (its row sums are of the unrounded values), so a cast e has no tile.
  const std::string pname = fs.ecast >= 0 ? k.ops[static_cast<std::size_t>(fs.ecast)].out : ename;
  // Pᵀ in PSUM: nki.isa.nc_transpose writes its input's dtype
  f.buf_etpsum = add_buf(n, BufSpec{ename + ".T.psum", true, dt(pname), kvrows, bank, 2});
  if (fs.ecast >= 0) f.buf_ec = add_buf(n, BufSpec{pname, false, dt(pname), P, f.tkv, f.bufs});
  else f.buf_e = add_buf(n, BufSpec{ename, false, dt(ename), P, f.tkv, f.bufs});
  f.buf_et = add_buf(n, BufSpec{pname + ".T", false, pv_fp32 ? ir::DType::fp32 : dt(pname), kvrows, f.chunks * f.tq, f.bufs});
  const auto& pvop = k.ops[static_cast<std::size_t>(fs.pv)];
  f.buf_pvpsum = add_buf(n, BufSpec{pvop.out + ".psum", true, ir::DType::fp32, P, bank, f.psum_bufs});
  f.buf_acc = add_buf(n, BufSpec{pvop.out + ".acc", false, ir::DType::fp32, P, fs.ext_vd, 2 * qb});
  const OutsideReads outside(cx.s, n.ops);
  // values final at the end of the kv loop that leave the nest: pv's output, the row max and sum
  const auto leaves = [&](int op) {
    const auto& nm = k.ops[static_cast<std::size_t>(op)].out;
    return cx.s.tensor(nm).role == ir::Role::output || outside.contains(nm);
  };
  if (leaves(fs.pv)) f.buf_out = add_buf(n, BufSpec{pvop.out, false, dt(pvop.out), P, fs.ext_vd, 2});
  if (leaves(fs.mx)) f.buf_mx_out = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.mx)].out + ".out", false,
                                                        dt(k.ops[static_cast<std::size_t>(fs.mx)].out), P, 1, 2});
  if (leaves(fs.sum)) f.buf_l_out = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.sum)].out + ".out", false,
                                                        dt(k.ops[static_cast<std::size_t>(fs.sum)].out), P, 1, 2});

  if (!fs.pre.empty()) {
    std::vector<std::pair<std::string, int>> produced{{sname, f.buf_s}};
    std::vector<std::vector<std::string>> pidx{k.ops[static_cast<std::size_t>(fs.qk)].out_indices};
    if (auto r = build_tc(cx, n, n.tc, fs.pre, P, f.tkv, fs.row, fs.kv, f.bufs, produced, pidx, outside)) return r;
  }
  if (!fs.post.empty()) {
    const auto& xr = k.ops[static_cast<std::size_t>(fs.mx)].out_indices;
    std::vector<std::pair<std::string, int>> produced{
        {pvop.out, f.buf_acc}, {k.ops[static_cast<std::size_t>(fs.mx)].out, f.buf_m}, {k.ops[static_cast<std::size_t>(fs.sum)].out, f.buf_l}};
    std::vector<std::vector<std::string>> pidx{pvop.out_indices, xr, xr};
    if (auto r = build_tc(cx, n, f.post, fs.post, P, fs.ext_vd, fs.row, fs.vd, 2, produced, pidx, outside)) return r;
  }
  return std::nullopt;
}

// The gene change most likely to shrink this nest's SBUF use (make_plan's sbuf_overflow hint).
std::pair<int, int> sbuf_fix_flash(const Ctx& cx, const NestPlan& n) {
  const auto& fs = cx.s.flashes[static_cast<std::size_t>(n.f.slot)];
  for (int gi : {fs.bufs, fs.tile_kv})
    if (cx.val(gi) > 0) return {gi, cx.val(gi) - 1};
  return {fs.gene, 0};
}

}  // namespace kevo::schedule::detail
