// Derivation of a contraction nest's genes (ContractSlot): index roles, tiles, blocks, loop orders,
// stationary operand, transposes, load/store levels, buffers, accumulation, eviction, the
// prologue's DMA queues and the rows' partition order.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <set>

#include "schedule/deriver.hpp"

namespace kevo::schedule::detail {

// Rows shorter than this many bytes (1 KiB) are stored one DMA descriptor each for too little data
constexpr std::int64_t kShortRowBytes = 1024;

// The genes of the contraction nest op j roots, or why the contraction is unsupported.
std::optional<Unsupported> derive_contract(const Deriver& d, std::size_t j) {
  auto& s = d.s;
  auto& sp = d.sp;
  const auto& k = d.k;
  const auto& t = d.t;
  auto& o = s.ops[j];
  const auto& op = k.ops[j];
  const std::string& grp = o.name;
  const bool every_orientation = d.opt.every_orientation;
  const bool every_structure = d.opt.every_structure;
  const auto ord = [&](const std::string& n, std::vector<std::int64_t> v, const std::string& g) {
    return static_cast<int>(sp.add(Gene::ordinal(n, std::move(v), g)));
  };
  const auto cat = [&](const std::string& n, std::vector<std::string> v, const std::string& g) {
    return static_cast<int>(sp.add(Gene::categorical(n, std::move(v), g)));
  };
  const auto unsupported = [&](Unsupported::Why why, std::string op_name, std::string message) {
    return std::optional<Unsupported>(Unsupported{why, k.name, std::move(op_name), std::move(message)});
  };
  ContractSlot c;
  c.op = static_cast<int>(j);
  // a column sum (ones_contraction): operand 0 is the implicit ones over the reduced index
  c.ones = ones_contraction(op);
  ir::Expr ones_access;
  if (c.ones) {
    ones_access.kind = ir::Expr::Kind::access;
    ones_access.tensor = "ones";
    ones_access.indices = op.reduce_indices;
  }
  const ir::Expr* a[2] = {c.ones ? &ones_access : &op.expr.args[0], c.ones ? &op.expr : &op.expr.args[1]};
  if (a[0]->kind != ir::Expr::Kind::access || a[1]->kind != ir::Expr::Kind::access)
    return unsupported(Unsupported::Why::contraction_operands, o.name, "a contraction must multiply two tensor accesses");
  // a convolution (ir::conv_taps): the taps join the k class, each tap's rows of the channel
  // index after the previous tap's (ContractSlot::taps)
  c.taps = c.ones ? std::vector<std::string>{} : ir::conv_taps(op);
  if (op.reduce_indices.size() != 1 + c.taps.size())
    return unsupported(Unsupported::Why::contraction_indices, o.name,
                       fmt::format("a contraction over {} indices is not supported (one contracted index)", op.reduce_indices.size()));
  std::string kx = op.reduce_indices[0];
  for (const auto& r : op.reduce_indices)
    if (!contains(c.taps, r)) kx = r;
  if (!contains(a[0]->indices, kx) || !contains(a[1]->indices, kx))
    return unsupported(Unsupported::Why::contraction_index_unshared, o.name,
                       fmt::format("a contraction must contract an index both operands use ('{}' is not)", kx));
  c.operand = {a[0]->tensor, a[1]->tensor};
  // m: innermost out index used by operand 0 only; n: by operand 1 only; the rest loop outside.
  for (const auto& x : op.out_indices) {
    const bool in0 = contains(a[0]->indices, x), in1 = contains(a[1]->indices, x);
    if (in0 && !in1) c.idx[0] = x;
    if (in1 && !in0) c.idx[1] = x;
  }
  c.idx[2] = kx;
  for (int cl = 0; cl < 3; ++cl) {
    c.present[cl] = !c.idx[cl].empty();
    if (c.present[cl]) {
      for (std::size_t q = 0; q < o.idx.size(); ++q)
        if (o.idx[q] == c.idx[cl]) c.ext[cl] = o.ext[q];
      c.cls_list.push_back(cl);
    }
  }
  c.kc = c.ext[2];
  for (const auto& r : c.taps) {
    c.tap_ext.push_back(o.extent(r));
    c.ext[2] *= c.tap_ext.back();
  }
  for (const auto& x : op.out_indices)
    if (x != c.idx[0] && x != c.idx[1]) c.outer.push_back(x);
  if (c.ones && op.reduce == ir::ReduceOp::mean) c.scale = 1.0 / static_cast<double>(c.ext[2]);
  for (int q = 0; q < 2; ++q) {
    const auto& ix = a[q]->indices;
    c.needs_transpose[q] = ix.back() == kx && c.present[q];
  }
  // a convolution's plain operand whose dims after the channel's are all taps (weights
  // [o, c, r, s]): a strided [c, o] tile moves an element per descriptor, so it is offered the
  // transposes of a k-innermost operand (ContractSlot::tap_run)
  for (std::size_t q = 0; q < 2 && !c.taps.empty(); ++q) {
    const auto& ix = a[q]->indices;
    if (!ir::is_plain(*a[q]) || !c.present[q] || c.needs_transpose[q]) continue;
    const auto kpos = std::find(ix.begin(), ix.end(), kx), qpos = std::find(ix.begin(), ix.end(), c.idx[q]);
    // (every tap after the channel: a tap before it would put that tap's rows far apart)
    if (qpos > kpos || ix.end() - kpos - 1 != static_cast<std::ptrdiff_t>(c.taps.size())) continue;
    std::int64_t run = 1;
    for (auto it = kpos + 1; it != ix.end(); ++it) run *= contains(c.taps, *it) ? o.extent(*it) : 0;
    if (run > 1) {
      c.needs_transpose[q] = true;
      c.tap_run[q] = run;
    }
  }
  const auto& tg = t;
  const std::int64_t fcap = std::max(tg.stationary_fmax, tg.moving_fmax);
  for (int cl : c.cls_list) {
    const std::int64_t cap = cl == 2 ? tg.pmax : fcap;
    auto tv = tile_values(c.ext[cl], cap);
    if (cl == 2 && !c.taps.empty()) {
      // with taps, k tiles never straddle two taps: the channel extent's divisors among the
      // usual sizes, else its largest divisor that fits the partitions
      tv = tile_values(c.kc, cap);
      std::erase_if(tv, [&](std::int64_t v) { return c.kc % v != 0; });
      std::int64_t most = std::min(cap, c.kc);
      while (c.kc % most != 0) --most;
      if (std::find(tv.begin(), tv.end(), most) == tv.end()) {
        tv.push_back(most);
        std::sort(tv.begin(), tv.end());
      }
    }
    const std::int64_t max_tiles = (c.ext[cl] + tv.front() - 1) / tv.front();
    c.tile[cl] = ord(grp + ".tile." + c.idx[cl], tv, grp);
    c.block[cl] = ord(grp + ".block." + c.idx[cl], block_values(max_tiles), grp);
  }
  std::vector<std::string> bl, tl;
  for (int cl : c.cls_list) {
    bl.push_back(c.idx[cl] + ".b");
    tl.push_back(c.idx[cl]);
  }
  c.order_b = static_cast<int>(sp.add(Gene::permutation(grp + ".order.blocks", bl, grp)));
  c.order_t = static_cast<int>(sp.add(Gene::permutation(grp + ".order.tiles", tl, grp)));
  std::string l0 = c.operand[0], l1 = c.operand[1];
  if (l0 == l1) l1 += ".2";  // (not "#2": "#" starts a comment in schedule text)
  // the operand whose free index is the output's innermost index: with it stationary the
  // output tile is transposed with respect to C's layout (a third stationary value offers
  // it with the tile transposed on chip before the store)
  // It is offered where it removes waste: the PE array costs a matmul by its moving size, so
  // an extent cut into stationary tiles with a partial last one pays full matmuls for it
  // (M = 271: 384 rows' worth for 271); with that operand stationary instead of the other
  // the stationary tiles are fewer per element. Elsewhere the third value would only add
  // transposes (and dilute the search: test/search's GA-against-random check).
  if (!op.out_indices.empty())
    for (int q = 0; q < 2; ++q)
      if (c.present[static_cast<std::size_t>(q)] && c.present[static_cast<std::size_t>(1 - q)] &&
          c.idx[static_cast<std::size_t>(q)] == op.out_indices.back()) {
        const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(t.stationary_fmax, t.pmax));
        const auto waste = [&](int x) {  // stationary rows paid per useful row
          const auto e = c.ext[static_cast<std::size_t>(x)];
          return static_cast<double>((e + cap - 1) / cap * cap) / static_cast<double>(e);
        };
        if (every_orientation || waste(q) < waste(1 - q)) c.out_tr_operand = q;
      }
  std::vector<std::string> sv{l0, l1};
  if (c.out_tr_operand >= 0) sv.push_back((c.out_tr_operand == 0 ? l0 : l1) + ".out_pe");
  c.stationary = cat(grp + ".stationary", sv, grp);
  c.level_labels = {"auto", "root"};
  for (auto& b : bl) c.level_labels.push_back(b);
  for (auto& x : tl) c.level_labels.push_back(x);
  for (int q = 0; q < 2; ++q) {
    const std::string nm = q == 0 ? l0 : l1;
    // dma_transpose_block: one transpose per k tile of the footprint (a choice of the method, so
    // that no gene is neutral when the method is not dma_transpose)
    // (the full space adds dma_transpose_region: one 3-D transpose for the footprint's full k tiles)
    if (c.needs_transpose[q]) {
      std::vector<std::string> how{"strided", "dma_transpose", "pe_transpose", "dma_transpose_block"};
      if (every_structure && c.taps.empty()) how.emplace_back("dma_transpose_region");
      c.transpose[q] = cat(grp + ".transpose." + nm, std::move(how), grp);
    }
    if (c.ones && q == 0) continue;  // set in SBUF, never loaded: no load genes
    c.load_level[q] = cat(grp + ".load." + nm, c.level_labels, grp);
    // hand kernels rotate 8-16 load slots; SBUF capacity bounds the depth (sbuf_overflow)
    c.load_bufs[q] = ord(grp + ".bufs." + nm, {1, 2, 3, 4, 6, 8, 12, 16}, grp);
    // the full space adds pair (one transfer per two tiles), between tile and row so that
    // coarsening (KernelProblem::repair: the next value) stays monotone
    // (with taps, a transfer stays inside one k tile: a region spanning k tiles would cross taps)
    std::vector<std::string> gran{"tile", "row", "region"};
    if (every_structure) gran.insert(gran.begin() + 1, "pair");
    if (!c.taps.empty()) gran.pop_back();
    c.load_dma[q] = cat(grp + ".dma." + nm, std::move(gran), grp);
    c.load_q[q] = ord(grp + ".queues." + nm, {1, 2, 4}, grp);
  }
  // sbuf.out: SBUF partial sums kept in the output's dtype (acc sbuf dtype=out)
  c.acc = cat(grp + ".acc", {"psum", "sbuf", "sbuf.out"}, grp);
  // PSUM rotation up to the target's banks (psum_banks rejects what does not fit)
  std::vector<std::int64_t> pb;
  for (std::int64_t b = 1; b <= std::min<std::int64_t>(8, std::max<std::int64_t>(2, t.psum_banks)); ++b)
    if (b <= 4 || b % 2 == 0) pb.push_back(b);
  c.psum_bufs = ord(grp + ".acc.bufs", pb, grp);
  c.acc_zero = cat(grp + ".acc.zero", {"start", "memset"}, grp);
  std::vector<std::string> sl{"auto", "root"};
  for (int cl : c.cls_list)
    if (cl != 2) sl.push_back(c.idx[cl] + ".b");
  for (int cl : c.cls_list)
    if (cl != 2) sl.push_back(c.idx[cl]);
  c.store_level = cat(grp + ".store", sl, grp);
  c.store_bufs = ord(grp + ".store.bufs", {1, 2, 3, 4}, grp);
  c.store_dma = cat(grp + ".store.dma", {"tile", "row", "region"}, grp);
  c.store_q = ord(grp + ".store.queues", {1, 2, 4}, grp);
  // alternate: PSUM evictions take turns on Vector and Scalar (where one engine's copies would
  // pace the matmuls: a short k leaves a [128, 512] eviction per two or three matmuls)
  c.evict = cat(grp + ".evict", {"vector", "scalar", "alternate"}, grp);
  // the prologue's transfers (each operand's first load, held until the first matmul that reads
  // it) over the load's own `queues`, or spread over all of the target's DMA queues, so that
  // every queue fetches the first matmuls' data first instead of sharing HBM with later transfers
  c.prologue = cat(grp + ".prologue", {"own", "spread"}, grp);
  // the partition order of a full k block's rows (ContractPlan::interleave): offered where k can
  // have two tiles at its smallest tile size, since one tile per block orders nothing
  // (the full space adds the output's partition index: interleave_out, interleave_all)
  const auto kmin = c.present[2] ? tile_values(c.ext[2], t.pmax).front() : c.ext[2];
  // `tiles` in the full space only (searched, it added noise to the GA and bench/shapes reached
  // 85% on no more shapes); the searched space keeps the gene, with its one value, so that both
  // spaces have the same genes
  if (c.present[2] && (c.ext[2] + kmin - 1) / kmin >= 2) {
    c.rest = every_structure ? cat(grp + ".rest", {"blocks", "tiles"}, grp) : cat(grp + ".rest", {"blocks"}, grp);
    // the output's orders are searched where its rows are short: a store of rows under
    // kShortRowBytes pays a DMA descriptor per row for less than that much data, and only
    // an interleaved partition order lets one descriptor carry several rows
    bool short_rows = false;
    if (const ir::Tensor* out = k.tensor(op.out); out != nullptr && !out->dims.empty())
      short_rows = k.shape(*out).back() * static_cast<std::int64_t>(ir::dtype_bytes(out->dtype)) < kShortRowBytes;
    if (c.taps.empty())  // (taps keep the natural order: an interleaved block would cross taps)
      c.rows = every_structure || short_rows
                 ? cat(grp + ".rows", {"natural", "interleave", "interleave_out", "interleave_all"}, grp)
                 : cat(grp + ".rows", {"natural", "interleave"}, grp);
  }
  // the k edge in the PE array's row tiles: where the target has row tiling and K leaves a
  // partial tile of at most 64 rows at the partition tile size (at smaller tile sizes the edge is
  // smaller still, or there is none and the gene is neutral)
  if (c.present[2] && c.taps.empty() && t.row_tile_min > 0 && c.ext[2] > t.pmax && c.ext[2] % t.pmax > 0 && c.ext[2] % t.pmax <= 64)
    c.kedge = cat(grp + ".kedge", {"full", "slices"}, grp);
  // the stationary's free edge in column tiles: where either operand's free extent leaves a
  // partial tile of at most 64 columns at 128-column tiles (neutral while the other is stationary)
  if (t.row_tile_min > 0) {
    bool edge = false;
    for (int q = 0; q < 2; ++q) {
      const auto e = c.ext[static_cast<std::size_t>(q)];
      edge = edge || (c.present[static_cast<std::size_t>(q)] && e > t.stationary_fmax && e % t.stationary_fmax > 0 &&
                      e % t.stationary_fmax <= 64);
    }
    if (edge) c.sedge = cat(grp + ".sedge", {"full", "slices"}, grp);
  }
  o.contract = static_cast<int>(s.contracts.size());
  s.contracts.push_back(std::move(c));
  return std::nullopt;
}

// Default values of this kind's genes in `g` (ScheduleSpace::default_genome, before repair).
void defaults_contract(const Deriver& d, Genome& g) {
  const auto& s = d.s;
  auto& sp = d.sp;
  const auto& t = d.t;
  const auto set = [&](int gi, int val) { set_value(sp, g, gi, val); };
  for (const auto& c : s.contracts) {
    for (int cl : c.cls_list) {
      const auto& gg = sp.gene(static_cast<std::size_t>(c.tile[cl]));
      const std::int64_t want = cl == 0 ? t.stationary_fmax : cl == 1 ? t.moving_fmax : t.pmax;
      set(c.tile[cl], value_index(gg, want));
    }
    for (int q = 0; q < 2; ++q) set(c.load_bufs[q], 1);
    // transposes through the PE array, as NKI kernels usually do (strided DMA of 2-byte elements is slow)
    for (int q = 0; q < 2; ++q) set(c.transpose[q], 2);
    // a convolution's weights (the plain operand) stationary, its shifted input moving, as NKI's
    // convolutions run: the output's channels on the partitions, its positions along the free dim
    if (!c.taps.empty()) {
      const auto& args = d.k.ops[static_cast<std::size_t>(c.op)].expr.args;
      const int w = ir::is_plain(args[0]) ? 0 : 1;
      set(c.stationary, w);
      set(c.load_level[w], 1);  // root: loaded once for every output row (lower: CCache::shared)
    }
    set(c.psum_bufs, 1);
    set(c.store_bufs, 1);
  }
}

}  // namespace kevo::schedule::detail

namespace kevo::schedule::detail {

// Three schedules a hand tuner of an NKI matmul starts from (kTemplates below), two of them the
// structure of the NKI matmul tutorial's later versions (aws-neuron/aws-neuron-sdk
// nki/guides/tutorials/matrix_multiplication: blocks of 128x512 tiles, operands loaded once per
// block and double-buffered, PSUM accumulation), all with kevo's DMA-side choices: the transposed
// operand a block at a time, the first loads over every DMA queue, a k block's rows interleaved,
// evictions alternating between Vector and Scalar. Every contraction nest of the kernel gets the
// same template; genes a nest does not have, or values it does not offer, keep the base's (the nearest
// offered number below for ordinal genes), and derive() repairs the result.
namespace {
// One rule-written contraction schedule as data: the genes every template sets, by value.
struct Template {
  std::array<std::int64_t, 3> block;  // block factors of m, n, k
  std::array<std::int32_t, 3> order_b;  // block loops of the classes m (0), n (1), k (2), outermost first
  std::array<int, 2> load_at;         // each operand's load level: the block of class c (0-2), or -1: root
  std::array<std::int64_t, 2> load_bufs;
  std::array<const char*, 2> load_dma;
  std::array<std::int64_t, 2> load_q;
  const char* acc;
  std::int64_t psum_bufs;
  int store_at;  // the block of class c, or -2: auto
  std::int64_t store_bufs, store_q;
};
// The first blocks both free indices (4 x 2 tiles, k blocks of 4) and loads each operand at its
// own block; the second takes tall blocks (8 x 1, k blocks of 8), the moving operand loaded once
// and each operand moved by whole regions; the third puts the k blocks outside the stationary
// operand's loop, so that the moving operand is streamed once, a k block at a time, and the
// stationary one (A, transposed) is held per n block, with the partial sums over k blocks in SBUF
// in fp32 — the structure of a narrow output's kernels, whose whole output fits on chip (e.g.
// 1536x256x6646, and 271x4736x6656's best at 20,000 evaluations).
const Template kTemplates[] = {
    {{4, 2, 4}, {0, 1, 2}, {0, 1}, {2, 2}, {"row", "row"}, {4, 4}, "psum", 1, -2, 3, 2},
    {{8, 1, 8}, {1, 0, 2}, {0, -1}, {2, 1}, {"region", "region"}, {4, 4}, "psum", 1, 0, 2, 4},
    {{2, 8, 4}, {1, 2, 0}, {1, 2}, {1, 2}, {"tile", "region"}, {1, 2}, "sbuf", 2, -2, 2, 1},
};
}  // namespace

void experts_contract(const Deriver& d, const Genome& base, std::vector<Genome>& out) {
  const auto& s = d.s;
  auto& sp = d.sp;
  if (s.contracts.empty()) return;
  for (const Template& tp : kTemplates) {
    Genome g = base;
    const auto num = [&](int gi, std::int64_t want) {
      if (gi >= 0) set_value(sp, g, gi, value_index(sp.gene(static_cast<std::size_t>(gi)), want));
    };
    const auto lab = [&](int gi, const std::string& l) {
      if (gi < 0) return;
      const auto& ls = sp.gene(static_cast<std::size_t>(gi)).labels;
      const auto it = std::find(ls.begin(), ls.end(), l);
      if (it != ls.end()) set_value(sp, g, gi, static_cast<int>(it - ls.begin()));
    };
    const auto perm = [&](int gi, const std::array<std::int32_t, 3>& p) {
      if (gi < 0 || sp.gene(static_cast<std::size_t>(gi)).labels.size() != p.size()) return;
      std::copy(p.begin(), p.end(), sp.slots(g, static_cast<std::size_t>(gi)).begin());
    };
    for (const auto& c : s.contracts) {
      const auto level = [&](int at) { return at >= 0 ? c.idx[static_cast<std::size_t>(at)] + ".b" : at == -1 ? "root" : "auto"; };
      for (std::size_t x = 0; x < 3; ++x) num(c.block[x], tp.block[x]);
      // loops of the present classes in class order m, n, k; tiles k m n
      if (c.present[0] && c.present[1] && c.present[2]) {
        perm(c.order_b, tp.order_b);
        perm(c.order_t, {{2, 0, 1}});
      }
      set_value(sp, g, c.stationary, 0);
      for (std::size_t q = 0; q < 2; ++q) {
        if (c.needs_transpose[q]) lab(c.transpose[q], d.t.dma_transposes ? "dma_transpose_block" : "pe_transpose");
        lab(c.load_level[q], level(tp.load_at[q]));
        num(c.load_bufs[q], tp.load_bufs[q]);
        lab(c.load_dma[q], tp.load_dma[q]);
        num(c.load_q[q], tp.load_q[q]);
      }
      lab(c.acc, tp.acc);
      num(c.psum_bufs, tp.psum_bufs);
      lab(c.acc_zero, "start");
      lab(c.store_level, level(tp.store_at));
      num(c.store_bufs, tp.store_bufs);
      lab(c.store_dma, "row");
      num(c.store_q, tp.store_q);
      lab(c.evict, "alternate");
      lab(c.prologue, "spread");
      lab(c.rows, "interleave");
    }
    out.push_back(std::move(g));
  }
}

}  // namespace kevo::schedule::detail
