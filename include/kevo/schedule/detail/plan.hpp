// The plan: a genome resolved against its space — fused nests, loop orders, tile sizes, buffer
// placement and every on-chip buffer with its size — plus the validity checks (SBUF/PSUM
// capacity, tile limits, PSUM accumulation groups, fusion legality). The lowering emits
// instructions from a plan; sampled validity and repair use plans alone, so a genome is valid
// exactly when make_plan succeeds.
// detail/: planning internals shared by the schedule, lower, verify, search and records modules
// and kevo's tests; not included by kevo/schedule.hpp and not a stable API (it changes with the
// nest kinds, lib/nests/).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/invalid.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/detail/structure.hpp"

namespace kevo::schedule {

// Why a genome is invalid is a kevo::Invalid (kevo/core/invalid.hpp) with, where one exists, the
// one gene change that most likely fixes it (used by repair). make_plan's codes: sbuf_overflow,
// psum_overflow, psum_banks, tile_limit, unsupported (the target's limits); precision (partial sums
// kept in a narrow dtype over too many roundings); illegal_fusion, illegal_order (an element read
// before it is produced, or never written); unfusable (an on-chip layout the fused ops cannot share).

// acc sbuf dtype=out: the most k blocks whose partial sums may be rounded to a 2-byte output
// dtype (the verify tolerance holds at 16 and fails from 32; see docs/SCHEDULE.md).
inline constexpr std::int64_t kAccOutMaxBlocks = 8;

struct BufSpec {
  std::string name;
  bool psum = false;
  ir::DType dtype = ir::DType::fp32;
  int partitions = 1;
  std::int64_t free_elems = 1;
  int nbufs = 1;
  [[nodiscard]] std::int64_t bytes_per_partition() const;
};

// A per-tile computation of map/reduce ops on [P, F] tiles (a vector nest's body or a
// contraction's epilogue): which buffer holds each op's value, each expression node's
// intermediate, and each loaded access.
struct TileCompute {
  std::vector<int> ops;                             // op indices, program order
  std::vector<int> dst;                             // per op: value buffer (reduce: fp32 accumulator)
  std::vector<bool> store;                          // per op: its tensor leaves the nest (stored to HBM)
  std::vector<std::vector<int>> node_buf;           // per op, per expression node (pre-order): temp or -1
  std::vector<std::vector<int>> sel_buf;  // per op, per node: a select node's predicate (0/1; uint8 in NKI)
  // per op, per node: a select's taken branch converted to the dtype of the select's tile (the
  // op's output dtype at the root, else fp32), where it differs (nki.isa.tensor_copy_predicated:
  // "src and dst must share the same data type")
  std::vector<std::vector<int>> conv_buf;
  // per op: a reduction along the free index, a [P, 1] fp32 tile for each later step's partial
  // (nki.isa.tensor_reduce overwrites its destination: the partial is reduced into it and added to
  // the accumulator by a tensor_tensor), else -1
  std::vector<int> partial;
  // per op, per node: `x - s` (s a [P, 1] value) on an engine whose tensor_scalar has no subtract
  // (the Scalar engine of trn1-trn3): -s, the bias of the identity activation x + (-s), [P, 1] fp32
  std::vector<std::vector<int>> neg_buf;
  std::vector<std::pair<std::string, int>> loads;   // access key "T[i,j]" -> load buffer
  // Means and variances computed together by bn_stats/bn_aggr (the variance op's body is not
  // evaluated and has no temps).
  struct BnStats {
    std::size_t mean = 0, var = 0;  // positions in `ops`
    int stats = -1, aggr = -1;      // buffers: [P, 6 per kBnStatsFmax-element chunk] and [P, 2], fp32
  };
  std::vector<BnStats> bn;
};

struct ContractPlan {
  int slot = -1;
  struct Loop {
    int cls;
    bool block;
  };
  std::array<std::int64_t, 3> tile{1, 1, 1}, ntiles{1, 1, 1}, bf{1, 1, 1}, nblocks{1, 1, 1};
  std::array<std::int64_t, 3> ext{1, 1, 1};  // the extents of the three index classes
  std::vector<Loop> loops;                  // outer -> inner (block loops, then tile loops)
  int stat = 0;                             // stationary operand (0 or 1); the out partition class is `stat`
  std::array<Transpose, 2> tr{Transpose::none, Transpose::none};
  // the dtype each operand's tiles have on chip, as the matmul reads them: the tensor's, or fp32
  // where the other operand is fp32 (nki.isa.nc_matmul takes fp32 with fp32 only)
  std::array<ir::DType, 2> mm_dtype{ir::DType::bf16, ir::DType::bf16};
  std::array<int, 2> load_level{0, 0};      // -1 = root (per outer iteration), else loop position
  std::array<int, 2> load_bufs{1, 1}, load_q{1, 1};
  std::array<DmaGran, 2> load_dma{DmaGran::tile, DmaGran::tile};
  std::array<TransposeGran, 2> tr_gran{TransposeGran::tile, TransposeGran::tile};  // of dma_transpose loads
  bool acc_sbuf = false;
  bool acc_out_dtype = false;               // acc sbuf: partial sums kept in C's dtype (else fp32)
  AccZero acc_zero = AccZero::start;        // the k-spanning accumulator starts by a start flag or a memset
  // prologue spread: each transfer of an operand's first load (the held prologue) is split over
  // all of the target's DMA queues instead of its load's `queues`
  bool prologue_spread = false;
  // rest tiles: every block of the nest after its first (the first iteration of every block loop
  // outside the k block loop, in the first outer iteration) runs its output tiles one at a time,
  // each over every k block, evicted and stored as it finishes. The first block keeps the
  // genome's order, k blocks outermost, so the first matmuls need only the first k slice of the
  // operands; the later ones, whose operands are on chip by then, finish their tiles one after
  // another, so that their stores spread over the compute instead of bunching at each block's
  // end, and only the last tile's eviction and store follow the last matmul.
  bool rest_tiles = false;
  // kedge slices: the matmuls over the partial last k tile (r rows) run in the Tensor engine's row
  // tiling mode (nki.isa.nc_matmul tile_position/tile_size), in row tiles of the target's smallest
  // size that holds r rows (Target::row_tile_min, or 64), taking the tiles of the PE array in turn,
  // so that consecutive ones run at the same time. Partition p feeds PE row p, so the loads place
  // a copy of both operands' edge rows in every row tile of the k tile's partitions.
  bool kedge_slices = false;
  // sedge slices: the matmuls of the stationary's partial last tile (s columns) run in the Tensor
  // engine's column tiling mode, in column tiles of the smallest size the target has that holds
  // s columns, the output tile of moving tile j in column tile j mod (tile / size): neighbouring
  // edge matmuls of one k step (a moving tile loop inside the stationary's) run at the same time.
  // A column tile writes the PSUM partitions of its columns, so the edge output tile of moving
  // tile j sits on those partitions in PSUM and in the SBUF staging tile it is copied to, and its
  // store reads them there (no rows move across partitions).
  bool sedge_slices = false;
  // rows interleave: in a k block of bf[2] full tiles of tile[2] rows, the block's tile t holds
  // k rows (block start) + p*bf[2] + t on partitions p, so a partition's rows of the block are
  // adjacent in the operands' layout: a load covering the block moves bf[2] rows per partition
  // in one run where rows are contiguous. Every load of both operands follows the same order,
  // so the contraction over partitions sums the same products. A k block with a partial tile, or
  // fewer than bf[2] tiles, keeps the natural order (tile t holds rows t*tile[2] + p).
  bool interleave = false;
  // rows interleave_out|_all (full space): the same order for the stationary operand's free index,
  // the output's partition index: in a block of bf[stat] full tiles, output tile t holds rows
  // (block start) + p*bf[stat] + t on partitions p, so a store covering the block writes bf[stat]
  // adjacent output rows per partition. The stationary operand's loads follow it. Not with an
  // epilogue or `out=pe_transpose` (the plan rejects both: `unsupported`).
  bool out_interleave = false;
  int psum_bufs = 1;
  int scope = 0;                            // loop position whose iterations one PSUM accumulation group spans
  int store_level = -1;
  int store_bufs = 1, store_q = 1;
  DmaGran store_dma = DmaGran::tile;
  target::Engine evict = target::Engine::vector;
  bool evict_alternate = false;  // evict alternate: PSUM evictions take turns, Vector first, then Scalar
  // buffers
  std::array<int, 2> buf_load{-1, -1}, buf_nat{-1, -1}, buf_tpsum{-1, -1};
  int buf_psum = -1;
  // stationary <out_tr_operand> out=pe_transpose: each stored output's footprint is transposed
  // through the PE array (nc_transpose into PSUM, copy into a staging tile) per 128 columns of
  // the moving index, then stored with the output's contiguous index along the free dim
  bool store_tr = false;
  std::vector<std::pair<ir::DType, int>> buf_otpsum;  // per dtype of the tiles transposed (nc_transpose keeps it)
  int buf_ostage = -1;
  int buf_c = -1;          // holds C's final tile values: fp32 accumulator (acc sbuf), C staging, or a rotating tile
  bool c_footprint = false;  // buf_c spans the store footprint (else one rotating tile)
  // Epilogue loads that move with the moving index alone (TileCompute::loads keys: a bias `b[n]`
  // beside output rows on the partitions, broadcast down them): one buffer of one slot holding the
  // whole extent, each moving tile's columns loaded at its first use and read there by every
  // later output tile of that column. Loaded per output tile, a partition-broadcast operand moved
  // its bytes once per partition per output tile (a 1024^3 matmul with a bias: 4.19 MB for 4 KB).
  std::vector<std::string> resident_cols;

  // Tiles per class covered by the loops strictly inside `level` (-1 = all loops), maximum over iterations.
  [[nodiscard]] std::array<std::int64_t, 3> footprint(int level) const;
  [[nodiscard]] int pos_of(int cls, bool block) const;
  // Elements of class `cls` that a footprint of `tiles` tiles spans in its on-chip buffer: the
  // extent itself when the footprint holds every tile (then it starts at 0 and its last tile may
  // be partial), else whole tiles. Laid out tile after tile, so a footprint over the whole
  // extent keeps a partition's rows of consecutive tiles of another class adjacent (one DMA run).
  [[nodiscard]] std::int64_t span(int cls, std::int64_t tiles) const {
    const auto u = static_cast<std::size_t>(cls);
    return tiles >= ntiles[u] ? ext[u] : tiles * tile[u];
  }
  [[nodiscard]] bool nontrivial(const Loop& l) const;
  // The k rows of global k tile kt: first row and row step between partitions (bf[2] inside an
  // interleaved block, else 1).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> k_rows(std::int64_t kt) const {
    return block_rows(kt, bf[2], tile[2], ext[2], interleave);
  }
  // The same for global tile st of the stationary index: its first row and the row step between
  // the output's partitions.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> s_rows(std::int64_t st) const {
    const auto u = static_cast<std::size_t>(stat);
    return block_rows(st, bf[u], tile[u], ext[u], out_interleave);
  }
  // Whole interleaved k (stationary) blocks from tile kt (st) on within `avail` tiles: 0 unless
  // the tile starts one.
  [[nodiscard]] std::int64_t k_blocks(std::int64_t kt, std::int64_t avail) const {
    return whole_blocks(kt, avail, bf[2], tile[2], ext[2], interleave);
  }
  [[nodiscard]] std::int64_t s_blocks(std::int64_t st, std::int64_t avail) const {
    const auto u = static_cast<std::size_t>(stat);
    return whole_blocks(st, avail, bf[u], tile[u], ext[u], out_interleave);
  }

 private:
  // Tile t of an index of extent ext cut in tiles of T rows and blocks of J tiles: first row and
  // row step between partitions, interleaved (on) inside a block of J full tiles.
  static std::pair<std::int64_t, std::int64_t> block_rows(std::int64_t t, std::int64_t J, std::int64_t T, std::int64_t ext,
                                                          bool on) {
    if (on && J > 1 && (t / J + 1) * J * T <= ext) return {t / J * J * T + t % J, J};
    return {t * T, 1};
  }
  static std::int64_t whole_blocks(std::int64_t t, std::int64_t avail, std::int64_t J, std::int64_t T, std::int64_t ext,
                                   bool on) {
    std::int64_t n = 0;
    if (J > 1 && t % J == 0)
      while ((n + 1) * J <= avail && block_rows(t + n * J, J, T, ext, on).second > 1) ++n;
    return n;
  }
};

enum class IssueOrder : std::uint8_t { steps, ready, list };

struct VectorPlan {
  int slot = -1;
  std::string pidx, fidx;       // partition and free index names (fidx empty: free size 1)
  std::int64_t pext = 1, fext = 1, ptile = 1, ftile = 1;
  bool f_reduced = false;       // the nest's reductions run along the free index
  bool complete_rows = false;   // some op consumes a reduction inside the nest: whole rows, one pass
  std::vector<std::string> outer, inner;  // looped indices (tile 1): kept outermost / reduced innermost
  std::vector<std::int64_t> outer_ext, inner_ext;
  std::vector<std::string> reduce_set;    // the reduce indices shared by the nest's reductions
  int bufs = 1, queues = 1;
  // Window (the `window yes` gene, one looped reduce index): each load that moves with the
  // reduce index along one tensor dim (window_geom) is loaded once per output tile, its halo
  // included, and each reduction step reads an offset view of it.
  bool window = false;
  // Fold (`window fold`): the root reduction, a product of at most two accesses, runs once per
  // output tile on [P, F, taps] views of its windows (one multiply, one tensor_reduce over the
  // taps) instead of one step per tap; its product temp holds F * taps elements.
  bool fold = false;
  std::int64_t chunk = 1;  // fold: free elements per multiply + reduce pair (the tile is computed in chunks)
  // fold, `hold psum`: the multiply's operand `hold_arg` (0 or 1 of the product), which does not
  // move with the output columns, is copied into the PSUM tile `buf_hold` ([P, taps] fp32, `bufs`
  // slots) once per output tile, and every multiply reads it there.
  bool hold_psum = false;
  int hold_arg = -1, buf_hold = -1;
  // `pad halo`: a shifted load whose tile reaches past the input's border zeroes only the
  // out-of-range border (memsets disjoint from the DMA of the in-range part), not the whole tile.
  bool pad_halo = false;
  // `transpose` (VectorSlot::transpose): how a load of a plain input whose innermost index is
  // the partition index and that also moves along the free index (transposed_load) reaches its
  // [P, F] tile: none/strided (one element per descriptor), dma_transpose (one nki.isa.dma_transpose
  // from HBM), pe_transpose (per <= 128 free elements a natural [F, P] load into `buf_nat`, an
  // nc_transpose into the PSUM tile `buf_tpsum` ([P, <= one bank]), then a copy into the tile);
  // `buf_nat` and `buf_tpsum` hold one tile per input dtype (nki.isa.nc_transpose writes its
  // input's dtype).
  // Stores go the other way under either transpose value (nki.isa.dma_transpose writes SBUF): an
  // output whose innermost index is the partition index is transposed per <= 128 free elements
  // through the PE array into `buf_opsum` ([<= 128, P], one per dtype of the tiles transposed),
  // copied into `buf_ost` (one staging tile per output dtype) and stored as rows of P contiguous
  // elements.
  Transpose transpose = Transpose::none;
  std::vector<std::pair<ir::DType, int>> buf_nat, buf_ost, buf_tpsum, buf_opsum;
  // A reduced index down the partitions (`layout p=<reduced index>`): every step of an output
  // tile (its partition tiles, free tiles and looped indices) folds into the reductions'
  // accumulators [P, w] elementwise, the first step a full partition tile; after the last, each
  // accumulator (scaled for a mean) goes per <= 128 of its w columns through the PE array into
  // `buf_ptr` ([w, P] in PSUM), is reduced along the free dim into a column of `buf_pres` (one
  // per output dtype) and stored with w down the partitions. No op in the nest may read such a
  // reduction (complete_rows is then illegal_fusion).
  bool p_reduced = false;
  int buf_ptr = -1;
  std::vector<std::pair<ir::DType, int>> buf_pres;
  // Loads that are the same tile in every step of the nest (TileCompute::loads keys): a plain
  // access that moves with no index the nest loops over, with its partition and free index each
  // held in one tile where it uses them (`W[c]` beside rows `X[r, c]` whose row is one free tile:
  // a norm's gamma, a bias). Each is loaded once, at its first use, into a buffer of one slot and
  // read there by every later step; loaded per step, a partition-broadcast operand moves its
  // bytes once per partition per row tile.
  std::vector<std::string> resident;
  // `issue` (VectorSlot::issue): the nest's instructions issued step after step, or reordered by
  // an estimated schedule (lib/lower/issue.hpp: `ready`, earliest start by dependencies alone;
  // `list`, a list schedule of in-order engines and DMA queues), so an engine's in-order queue
  // runs a later step's ready work while an earlier step waits on another engine.
  IssueOrder issue = IssueOrder::steps;
};

// The plan's buffer of a per-dtype staging list (VectorPlan::buf_nat, buf_ost, buf_pres) for
// `dt`, or -1 when the list has none.
inline int buf_for(const std::vector<std::pair<ir::DType, int>>& bufs, ir::DType dt) {
  for (const auto& [d, b] : bufs)
    if (d == dt) return b;
  return -1;
}

// Whether a vector nest with partition index `pidx` and free index `fidx` loads `access`
// transposed under a `transpose` gene: a plain access whose innermost index is pidx and that
// also uses fidx (so its partitions are HBM's contiguous run and its free elements are strided).
bool transposed_load(const ir::Expr& access, const std::string& pidx, const std::string& fidx);
// The plain access an op writes: `out[out_indices]`.
ir::Expr out_access(const ir::Op& op);

// The on-chip window of an access over a vector nest's looped reduce index r (extent T) for
// free tiles of F elements: r moves along exactly one tensor dim `dim` (coefficient a_r), which
// the partition index does not move and the free index moves with coefficient a_f (0: the
// access is not wide); the window holds elems = a_f*(F-1) + a_r*(T-1) + 1 consecutive positions
// of that dim. ok = false when the access has no such window (it is loaded per step).
struct WindowGeom {
  bool ok = false;
  std::size_t dim = 0;
  std::int64_t a_r = 0, a_f = 0, elems = 0;
};
WindowGeom window_geom(const ir::Expr& access, const std::string& pidx, const std::string& fidx, const std::string& r,
                       std::int64_t F, std::int64_t T);

// A flash nest (FlashSlot): per batch index and query-row tile, kv tiles in order with a
// running max, running sum and an fp32 output accumulator on chip; buffers by role.
struct FlashPlan {
  int slot = -1;
  std::int64_t tq = 1, tkv = 1;           // query-row and kv tile sizes
  std::int64_t nq = 1, nkv = 1, outer = 1;  // tiles of rows and kv, iterations of the batch indices
  std::int64_t tk = 1, nk = 1;            // tiles of qk's contracted index (<= pmax each)
  std::int64_t chunks = 1;                // 128-row (pmax) chunks of a kv tile for the PV matmul
  std::array<Transpose, 2> tr{Transpose::none, Transpose::none};  // Q-like and K-like operand of qk
  std::array<int, 3> queues{1, 1, 1};     // DMA queues of Q, K, V loads
  int bufs = 1, psum_bufs = 1;
  bool skew = false;                      // software-pipelined: loads and S of kv tile j+1 before tile j's softmax and PV
  std::int64_t qblock = 1;                // row tiles sharing each K and V tile (<= nq)
  IssueOrder issue = IssueOrder::steps;   // the order the nest's instructions are issued in (as VectorPlan::issue)
  target::Engine evict = target::Engine::vector;
  // buffers (indices into NestPlan::buffers; -1 when unused)
  std::array<int, 2> buf_t{-1, -1};       // Qᵀ / Kᵀ: [tk partitions, nk * tile]
  std::array<int, 2> buf_nat{-1, -1}, buf_tpsum{-1, -1};  // pe_transpose staging
  int buf_v = -1;                         // V: [min(tkv,pmax) partitions, chunks * vd]
  int buf_spsum = -1, buf_s = -1;         // scores in PSUM, evicted to SBUF (fp32) unless s_in_psum
  bool s_in_psum = false;                 // the maps on the scores read them from PSUM (none on GpSimd)
  int buf_rmax = -1, buf_m = -1, buf_negm = -1, buf_corr = -1, buf_l = -1;  // [tq, 1] fp32 (m: 2 slots)
  int buf_e = -1;                         // exp tile [tq, tkv] fp32, or -1 where the exp writes buf_ec
  int buf_ec = -1;                        // e in the ecast op's dtype (FlashSlot::ecast), or -1
  int buf_etpsum = -1, buf_et = -1;       // eᵀ per chunk: PSUM staging and SBUF [pmax, chunks * tq]
  int buf_pvpsum = -1, buf_acc = -1;      // PV in PSUM, fp32 output accumulator [tq, vd]
  int buf_out = -1;                       // pv's output cast for its store (it leaves the nest)
  int buf_mx_out = -1, buf_l_out = -1;    // the row max / row sum cast for their stores (they leave the nest)
  TileCompute post;                       // maps on pv's output (tc of the nest holds the maps on the scores)
  std::int64_t banks = 0;                 // PSUM banks in use
};

// An online-softmax nest (OnlineSlot): per batch index and row tile, the first pass over the
// row's tiles (running max and sum), then the second (e and the maps after the sum, stored).
struct OnlinePlan {
  int slot = -1;
  std::int64_t tr = 1, tj = 1;            // row and column tile sizes
  std::int64_t nr = 1, nj = 1, outer = 1;  // row tiles, column tiles, iterations of the batch indices
  int bufs = 1, queues = 1;
  IssueOrder issue = IssueOrder::steps;
  // buffers (indices into NestPlan::buffers; -1 when unused)
  int buf_x = -1;                         // A's tile [tr, tj] in its dtype (x bufs)
  int buf_e = -1;                         // e's tile [tr, tj] in e's dtype (x bufs)
  int buf_rmax = -1, buf_negm = -1, buf_corr = -1;  // [tr, 1] fp32 (x bufs; the row sums land in rmax's)
  int buf_m = -1, buf_l = -1;             // running max and sum [tr, 1] fp32 (m: 2 slots per row tile)
  int buf_mx_out = -1, buf_l_out = -1;    // the row max / sum cast for their stores (they leave the nest)
};

struct NestPlan {
  NestKind kind = NestKind::vector;
  std::string name;
  int root_op = -1;
  std::vector<int> ops;
  ContractPlan c;   // kind == contract
  VectorPlan v;     // kind == vector
  FlashPlan f;      // kind == flash
  OnlinePlan o;     // kind == online (tc holds the maps after the sum)
  TileCompute tc;   // vector body, or the contraction's epilogue (ops after the root)
  std::vector<BufSpec> buffers;
  std::int64_t sbuf_bytes = 0, psum_bytes = 0;
};

struct Plan {
  std::vector<NestPlan> nests;
  std::vector<target::Engine> op_engine;  // per op: engine of its vector-side instructions
  std::vector<int> op_nest;
};

Expected<Plan, Invalid> make_plan(const ScheduleSpace& space, const Genome& g);

namespace detail {
// Test seam for the mutation check of the differential test (test/verify): when false, the
// coverage half of the dependence rule (every index of a fused op is iterated by its nest) is
// skipped. Never set it outside tests; it is not synchronised.
extern bool check_coverage;
}  // namespace detail

// Expression helpers shared with the lowering.
void preorder(const ir::Expr& e, std::vector<const ir::Expr*>& out);
bool expr_uses(const ir::Expr& e, const std::string& index);
std::string access_key(const ir::Expr& access);

// How a unary map's argument joins the activation that applies it: nki.isa.activation computes
// fn(x * scale + bias) with an immediate scale and an immediate or per-partition [P, 1] bias, so
// `fn(x + k)`, `fn(x - k)`, `fn(k - x)`, `fn(x * k)` and `fn(k * x)` with k a constant are one
// instruction (`constant`: the argument needs no tile of its own), as are `fn(x + s)`,
// `fn(s + x)`, `fn(x - s)` and `fn(s - x)` with x moving along the free index `fidx` and s not
// (`partition`: s is the bias; `x - s` first negates s into a [P, 1] tile, the argument's own).
// `none` for anything else (casts, other functions, both sides along fidx): the argument is
// evaluated into its tile, then the activation reads it. Also `none` for a reciprocal whose
// argument needs a bias where the target's Scalar engine has none for it (NeuronCore-v2,
// target::EngineSpec::reciprocal_bias): only `reciprocal(x * k)` joins there. And `none` for a
// constant bias (`fn(x + k)`, `fn(x - k)`, `fn(k - x)`) where the Scalar engine takes no constant
// bias (NeuronCore-v2, target::EngineSpec::immediate_bias): `fn(x * k)` still joins.
enum class AffineArg : std::uint8_t { none, constant, partition };
// `x - s` with x along the free index `fidx` and s a value not along it (not a constant): on an
// engine whose tensor_scalar has no subtract, an identity activation with the bias -s.
bool sub_of_column(const ir::Expr& e, const std::string& fidx);
AffineArg affine_arg(const ir::Expr& e, const std::string& fidx, const target::Target& t);

// Two scalar operators in one instruction: nki.isa.tensor_scalar computes (x op0 s0) op1 s1 at the
// cost of one operator, s0 and s1 immediates or per-partition [P, 1] values. `e` is such a pair when
// it is an arithmetic operator (+ - * / max min) of a value s1 not along the free index `fidx` and
// an inner arithmetic operator of a value x along `fidx` and a value s0 not (in either order: `s0 -
// x` reverses op0; `s1 - (...)` has no instruction form, so s1 on the left needs + * max or min).
// Returns the argument index (0 or 1) of the inner operator, or -1.
int scalar_pair(const ir::Expr& e, const std::string& fidx);
// The same shape with a tile for s1: `(x op0 s0) op1 y`, x and y along `fidx` and s0 not, is one
// nki.isa.scalar_tensor_tensor on the Vector engine (a norm's `(x · rstd) · gamma`). Returns the
// argument index of the inner operator, or -1 (also where scalar_pair holds).
int scalar_tensor_pair(const ir::Expr& e, const std::string& fidx);

}  // namespace kevo::schedule
