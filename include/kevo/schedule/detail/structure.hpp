// The derived structure of a schedule space: which ops may fuse into which loop nests, the
// roles of each contraction's indices, and which genes hold each decision. The schedule module
// builds it once per (kernel, target); the plan (plan.hpp) and the lowering read it.
// detail/: planning internals, not included by kevo/schedule.hpp and not a stable API.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/genes.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/ir/reshape.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace kevo::schedule {

// flash: a contraction, a row softmax and a second contraction over the softmax's reduced index,
// lowered as one nest with online (running max / running sum) softmax; see FlashSlot.
// online: a row softmax over rows longer than one tile, its statistics by a running max and sum
// over the row's tiles, then the output from a second read; see OnlineSlot.
enum class NestKind : std::uint8_t { contract, vector, flash, online };

// Choices of the categorical genes, in label order.
enum class Transpose : std::uint8_t { none, strided, dma_transpose, pe_transpose };
// pair: one transfer per two tiles of the footprint (full space only: DeriveOptions::every_structure)
enum class DmaGran : std::uint8_t { tile, pair, row, region };
inline constexpr const char* kTransposeLabels[] = {"none", "strided", "dma_transpose", "pe_transpose"};
// The transpose gene's choices: strided, dma_transpose (per tile), pe_transpose, and
// dma_transpose_block (one dma_transpose per k tile of the load footprint). The acc gene's:
// psum, sbuf (fp32 partial sums), sbuf.out (partial sums in the output's dtype).
inline constexpr int kTransposeDmaBlock = 3;
// dma_transpose_region (full space only): one 3-D dma_transpose for all full k tiles of the load
// footprint (nki.isa.dma_transpose's permutation (2, 1, 0)), the partial last one as a block.
inline constexpr int kTransposeDmaRegion = 4;
inline constexpr int kAccSbufOut = 2;
inline constexpr const char* kDmaLabels[] = {"tile", "pair", "row", "region"};
// The gene values only the full space offers (DeriveOptions::every_structure); the parser names
// the option when a searched-space schedule uses one.
inline constexpr std::string_view kFullSpaceLabels[] = {kDmaLabels[1], "dma_transpose_region", "interleave_out", "interleave_all",
                                                        "tiles"};
// The rows gene's values: natural, interleave (k), and in the full space interleave_out (the
// output's partition index) and interleave_all (both).
inline constexpr int kRowsK = 1, kRowsOut = 2, kRowsAll = 3;
inline constexpr const char* kEngineLabels[] = {"vector", "scalar", "gpsimd"};
enum class TransposeGran : std::uint8_t { tile, block, region };
enum class AccZero : std::uint8_t { start, memset };

// Genes of a nest rooted at a contraction. Classes: 0 = m (free index of operand 0),
// 1 = n (free index of operand 1), 2 = k (the contracted index).
struct ContractSlot {
  int op = -1;
  std::array<std::string, 3> idx;        // primary index name per class ("" when absent)
  std::array<std::int64_t, 3> ext{1, 1, 1};
  std::array<bool, 3> present{false, false, false};
  std::vector<std::string> outer;         // batch and extra indices, looped outermost with tile 1
  std::array<std::string, 2> operand;     // tensor names of the two operands
  // A sum of one access over an index that is not the access's innermost (`S[c] = sum(r) X[r, c]`):
  // operand 0 is an implicit column of ones (`ones`, X's dtype), set by a memset in SBUF once per
  // nest instance and never loaded, so the PE array sums over the partitions as NKI kernels do;
  // operand 1 is the access. The ones have no load, transpose or buffer genes.
  bool ones = false;
  // A column mean (`mean(r)`): 1 / R, by which each finished output tile is multiplied in SBUF
  // (the sum accumulates unscaled, in PSUM or SBUF, as a column sum's); 1 otherwise.
  double scale = 1.0;
  std::array<bool, 2> needs_transpose{false, false};  // K is the operand's innermost (contiguous) dim
  // A convolution (ir::conv_taps: `Y[o, w] = sum(c, f) X[c, w + f] * W[o, c, f]`): idx[2] is the
  // channel index both operands use plainly, of extent kc, and the taps are the other contracted
  // indices. The k class spans every tap: k row t * kc + i is channel i at tap t (taps row-major
  // in this order, extents tap_ext), so ext[2] = kc * the taps' extents, and k tile sizes divide
  // kc (a tile never straddles two taps). The lowering offsets each tap's loads and zeroes the
  // positions a shifted operand reads outside its dims.
  std::vector<std::string> taps;
  std::vector<std::int64_t> tap_ext;
  std::int64_t kc = 1;
  // Per operand, where its dims after the channel's are all taps (weights `[o, c, r, s]`): their
  // elements per channel (r x s), a row's taps of a channel side by side. Such an operand is
  // offered the transposes (needs_transpose); the PE transpose loads a channel tile's rows with
  // every tap in one run and transposes the tap's columns (every tap_run-th). 1 elsewhere.
  std::array<std::int64_t, 2> tap_run{1, 1};
  std::vector<int> cls_list;              // present classes in order m, n, k
  std::vector<std::string> level_labels;  // load/store level choices: auto, root, <x>.b..., <x>...
  int tile[3] = {-1, -1, -1}, block[3] = {-1, -1, -1};
  int order_b = -1, order_t = -1, stationary = -1;
  int transpose[2] = {-1, -1}, load_level[2] = {-1, -1}, load_bufs[2] = {-1, -1}, load_dma[2] = {-1, -1},
      load_q[2] = {-1, -1};
  int acc = -1, psum_bufs = -1, store_level = -1, store_bufs = -1, store_dma = -1, store_q = -1, evict = -1;
  int acc_zero = -1;   // start|memset: how the accumulator spanning k starts from zero
  int prologue = -1;   // own|spread: the first load's transfers over their own queues or over all of them
  // blocks|tiles: the blocks after the nest's first run as the genome orders them (every
  // accumulator finishing at the last k block) or one output tile at a time, each stored as it
  // finishes (ContractPlan::rest_tiles); -1 where k has one tile at every tile size (no k blocks)
  int rest = -1;
  // natural|interleave: the partition order of the k rows of a full k block (ContractPlan::k_rows);
  // the full space adds interleave_out (the output's partition index instead: ContractPlan::s_rows)
  // and interleave_all (both); -1 where k has one tile at every tile size
  int rows = -1;
  // full|slices: the matmuls over the partial last k tile run over the whole PE array, or in the
  // Tensor engine's row tiling mode (ContractPlan::kedge_slices); -1 where the target has no row
  // tiling or K leaves no partial tile of at most 64 rows at the partition tile size
  int kedge = -1;
  // full|slices: the matmuls of the stationary operand's partial last tile (its free index's
  // edge, at most 64 columns) run over the whole PE array or in column tiles
  // (ContractPlan::sedge_slices); -1 where the target has no tiling mode or neither operand's free
  // extent leaves such an edge at 128-column tiles
  int sedge = -1;
  // The operand whose free index is the output's innermost (contiguous) index, or -1: with it
  // stationary the output tile sits [contiguous index on partitions, other free], so the store is
  // strided unless the tile is transposed on chip first. Its `stationary` gene then has a third
  // value (kStationaryOutPe): that operand stationary, output tiles transposed through the PE
  // array before the store (`stationary B out=pe_transpose`).
  int out_tr_operand = -1;
};
inline constexpr int kStationaryOutPe = 2;

// Genes of a nest rooted at a map or reduce op: partition/free index choice and tile sizes.
struct VectorSlot {
  int op = -1;
  std::vector<std::string> dom;  // the root op's indices (out then reduce)
  std::vector<std::int64_t> ext;
  std::vector<std::array<int, 2>> layouts;  // (p, f) positions in dom; f = -1: no free index
  std::vector<int> tile;                    // gene per dom index (-1 when the index can never be tiled)
  int layout = -1, bufs = -1, queues = -1;
  // steps|ready|list: the order the nest's instructions are issued in, step after step or by an
  // estimated schedule (VectorPlan::issue)
  int issue = -1;
  // no|yes|fold, for a reduction reading shifted inputs: loads that move with the looped
  // reduction index are held on chip for the whole output tile (a shifted input with its halo,
  // a filter) and each step reads an offset view of them (VectorPlan::window); fold: no steps,
  // one instruction over a [P, F, taps] view then one reduce over the taps (VectorPlan::fold).
  int window = -1;
  int chunk = -1;  // window fold: output columns per multiply + reduce pair (at most the free tile)
  // sbuf|psum, window fold: the multiply's operand that does not move with the output columns (a
  // filter) is copied into PSUM once per output tile, so each multiply reads one input from PSUM
  // (VectorPlan::hold_psum).
  int hold = -1;
  // tile|halo, when the root op reads shifted inputs: how a tile that reaches past the input's
  // border is zeroed before the DMA of its in-range part: tile = one memset of the whole tile
  // (`nl.zeros` then a load; the DMA waits for it), halo = memsets of the out-of-range border
  // only, disjoint from the DMA (VectorPlan::pad_halo).
  int pad = -1;
  // strided|dma_transpose|pe_transpose, where some layout lays a plain input's innermost
  // (contiguous) index on partitions and another of its indices along the free dim (a column
  // reduction `S[c] = max(r) X[r, c]`, a transposing map): such loads read one element per DMA
  // descriptor (strided), or move through a DMA transpose (2-byte dtypes) or through the PE array
  // (a natural load, nc_transpose into PSUM, a copy into the tile; VectorPlan::transpose).
  int transpose = -1;
};

// Static facts about one op and the genes that concern it.
struct OpSlot {
  int op = -1;
  ir::OpKind kind = ir::OpKind::map;
  std::string name;                   // the output tensor's name; names the op and its potential nest
  std::vector<std::string> idx;       // out indices then reduce indices
  std::vector<std::int64_t> ext;
  int chain_root = -1;                // first op of the static fusion chain this op belongs to
  int fuse_gene = -1;                 // boolean: join the nest of the previous op (when fusable at all)
  int engine_gene = -1;               // vector|scalar|gpsimd for the op's vector-engine instructions
  // A variance var = mean_f(square(E - mu)) of mu = mean_f(E) (layernorm): `stats_gene`
  // (reduce|bn) may compute mu and var together with bn_stats/bn_aggr; stats_mean is mu's op.
  int stats_gene = -1, stats_mean = -1;
  int contract = -1, vec = -1;        // index into SpaceImpl::contracts / ::vectors (the genes used when it roots a nest)
  // the extent of index x in this op, `absent` when the op has no such index
  [[nodiscard]] std::int64_t extent(std::string_view x, std::int64_t absent = 0) const noexcept {
    for (std::size_t q = 0; q < idx.size(); ++q)
      if (idx[q] == x) return ext[q];
    return absent;
  }
};

// The flash-attention pattern, found structurally: a contraction `s` (scores), elementwise maps
// on it with its own indices (`pre`: scale, mask), a max-reduce `mx` of the last over one free
// index `kv` of `s`, a map `e = exp(last - mx)`, a sum-reduce `l` of `e` over `kv`, a second
// contraction `o` over `kv` with `e` as one operand, and optional maps on `o` with `o`'s indices
// (`post`: the division by `l`). Every intermediate is a temp read only inside the pattern
// (the last op's output may leave it). One boolean gene turns the online-softmax nest on.
struct FlashSlot {
  int qk = -1;                 // op index of the first contraction (its slot: SpaceImpl::ops[qk].contract)
  std::vector<int> pre;        // maps on the scores
  int mx = -1, ex = -1, sum = -1, pv = -1;
  // e = exp((s - mx) * c) (or c * (s - mx)), c a positive constant: the exponent's scale after the
  // subtraction (1 for e = exp(s - mx)); the online softmax scales both activations by it
  double exp_scale = 1.0;
  int ecast = -1;              // optional `ec = cast<T>(e)` after the sum, read by pv in e's place
                               // (P held in T for its transposes and the PV matmul, as hand kernels do)
  std::vector<int> post;       // maps on pv's output
  int first = -1, last = -1;   // op range covered by the nest
  int q_operand = 0;           // operand of qk carrying the row index (its other operand carries kv)
  int e_operand = 0;           // operand of pv that is e (the other is V)
  std::string row, kv, hd, vd; // query rows, key/value positions, qk's contracted index, V's free index
  std::int64_t ext_row = 1, ext_kv = 1, ext_hd = 1, ext_vd = 1;
  std::vector<std::string> outer;  // batch indices (qk's other out indices), looped outermost
  std::string name;            // pv's output name: names the genes (flash.<name>...) and the nest
  int gene = -1;               // boolean: lower the pattern as one online-softmax nest
  int tile_row = -1, tile_kv = -1, bufs = -1, psum_bufs = -1;
  int skew = -1;               // boolean: the next kv tile's loads and scores before this tile's softmax
  int qblock = -1;             // ordinal 1, 2, 4: row tiles that share each K and V tile loaded
  int issue = -1;              // categorical steps|ready|list: the nest's issue order (IssueOrder)
};

// The online-softmax pattern, found structurally: a max-reduce `mx` of a tensor A over one index
// `j` (A read with the max's out indices plus j), a map `e = exp(A - mx)`, a sum-reduce `s` of `e`
// over `j`, and maps after them with A's indices (`post`: the division by `s`) reading e, s, mx,
// earlier posts and tensors from outside the pattern. `e` is a temp read only inside it. One
// boolean gene turns the nest on: per row tile, a first pass over the row's tiles keeps the
// running max and sum (the sum rescaled by exp(m_old - m_new) as the max grows), a second pass
// reads A again and computes e and the posts per tile; the first pass's last tile, whose exp used
// the final max already, is not read again.
struct OnlineSlot {
  int mx = -1, ex = -1, sum = -1;
  std::vector<int> post;       // maps after the sum
  int first = -1, last = -1;   // op range covered by the nest
  std::string row, j;          // the row index (on partitions) and the reduced index (free)
  std::int64_t ext_row = 1, ext_j = 1;
  std::vector<std::string> outer;  // the max's other out indices, looped outermost
  std::string name;            // the last post's output name: names the genes (online.<name>...) and the nest
  int gene = -1;               // boolean: lower the pattern as one online-softmax nest
  int tile_row = -1, tile_j = -1, bufs = -1, queues = -1;
  int issue = -1;              // categorical steps|ready|list (IssueOrder)
};

struct SpaceImpl {
  // The kernel the space schedules: `source` with its long indices split across partitions
  // (split_long_indices; `source` itself when nothing splits). Same tensors, order and bytes.
  ir::Kernel kernel;
  ir::Kernel source;                // the user's kernel (ScheduleSpace::kernel)
  std::vector<ir::Split> splits;    // what split_long_indices split, in order
  std::vector<ir::Merge> merges;    // what it merged first (a pure map's few rows with its long index)
  std::vector<std::string> view_steps;  // both, in the order taken (ScheduleSpace::splits)
  target::Target target;
  DeriveOptions options;  // what the space offers beyond the searched default
  Space space;
  std::vector<OpSlot> ops;
  std::vector<ContractSlot> contracts;
  std::vector<VectorSlot> vectors;
  std::vector<FlashSlot> flashes;
  std::vector<OnlineSlot> onlines;
  Genome defaults;
  std::vector<Genome> experts;  // ScheduleSpace::expert_genomes
  // Each tensor's readers: the ops whose expressions access it, ascending (set by derive; what
  // planning asks of every nest, answered without walking the whole kernel per nest)
  std::map<std::string, std::vector<int>, std::less<>> readers;

  [[nodiscard]] const ir::Tensor& tensor(std::string_view name) const;
  [[nodiscard]] int tensor_index(std::string_view name) const;
  [[nodiscard]] std::int64_t dim_of(std::string_view index) const;  // extent of a loop index
};

}  // namespace kevo::schedule
