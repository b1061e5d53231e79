// The event-driven NeuronCore model. One pass precomputes every instruction's costs from the
// target (so the event loop does no arithmetic on access patterns and allocates nothing); the
// loop then advances a binary heap of events: issue end (queue free again), done (dependents may
// start), DMA descriptor phase end, and DMA completion checks under shared HBM bandwidth.
//
// DMA bandwidth sharing (model version 8): each of the core's DMA engines serves a fixed group of
// SBUF partitions (128 / 16 = 8 on trn2), so a transfer's bytes are split over the engines its
// SBUF-side partitions map to (a DMA transpose on a block-transposing target, and an HBM-to-HBM
// copy, over all of them). Every engine shares its bandwidth equally between the transfers with
// bytes on it (one per queue: round robin between queues, in order within one), and all of them
// together share the core's HBM bandwidth. A transfer's bandwidth phase ends when its last engine
// part does; it completes dma_fixed_ns after that, or (model version 9, dma_tail_ns set)
// dma_tail_ns after it and at least dma_fixed_ns after its start.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <fmt/format.h>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/runner/sim.hpp"
#include "sim_internal.hpp"

namespace kevo::runner {

using lower::AccessPattern;
using lower::Instr;
using lower::Memory;
using lower::Opcode;
using lower::TileProgram;
using target::Engine;
using target::Target;

std::uint64_t SimParams::hash() const {
  StableHasher h;
  h.str("simparams:v3")
      .f64(dma_engines)
      .f64(dma_engine_bytes_per_ns)
      .f64(dma_descriptor_overhead_ns)
      .f64(hbm_efficiency)
      .f64(dma_fixed_ns)
      .f64(dma_tail_ns)
      .f64(dma_sbuf_transpose_efficiency)
      .f64(psum_elems_per_cycle)
      .f64(matmul_exposed_load)
      .f64(matmul_extra_cycles)
      .f64(engine_overhead_scale)
      .u64(port_conflicts ? 1 : 0);
  return h.digest();
}

namespace {

struct ParamField {
  std::string_view name;
  double SimParams::*field;  // null for port_conflicts (a bool)
};
constexpr ParamField kParamFields[] = {
    {"dma_engines", &SimParams::dma_engines},
    {"dma_engine_bytes_per_ns", &SimParams::dma_engine_bytes_per_ns},
    {"dma_descriptor_overhead_ns", &SimParams::dma_descriptor_overhead_ns},
    {"hbm_efficiency", &SimParams::hbm_efficiency},
    {"dma_fixed_ns", &SimParams::dma_fixed_ns},
    {"dma_tail_ns", &SimParams::dma_tail_ns},
    {"dma_sbuf_transpose_efficiency", &SimParams::dma_sbuf_transpose_efficiency},
    {"psum_elems_per_cycle", &SimParams::psum_elems_per_cycle},
    {"matmul_exposed_load", &SimParams::matmul_exposed_load},
    {"matmul_extra_cycles", &SimParams::matmul_extra_cycles},
    {"engine_overhead_scale", &SimParams::engine_overhead_scale},
    {"port_conflicts", nullptr},
};

}  // namespace

std::vector<std::string> sim_param_names() {
  std::vector<std::string> out;
  for (const ParamField& f : kParamFields) out.emplace_back(f.name);
  return out;
}

bool set_sim_param(SimParams& p, std::string_view name, double value) {
  for (const ParamField& f : kParamFields)
    if (f.name == name) {
      if (f.field == nullptr) p.port_conflicts = value != 0;
      else p.*f.field = value;
      return true;
    }
  return false;
}

std::optional<double> get_sim_param(const SimParams& p, std::string_view name) {
  for (const ParamField& f : kParamFields)
    if (f.name == name) return f.field == nullptr ? (p.port_conflicts ? 1.0 : 0.0) : p.*f.field;
  return std::nullopt;
}

SimParams default_sim_params(const Target& t) {
  SimParams p;
  for (const auto& [name, value] : t.sim_params)
    if (!set_sim_param(p, name, value))
      throw Error(fmt::format("target {}: unknown simulator parameter '{}' in 'sim.params' (known: {})", t.name, name,
                              fmt::join(sim_param_names(), ", ")));
  return p;
}

namespace {

// Contiguous elements of one descriptor: the innermost dims merged while they are dense. On-chip
// partitions are separate memories, so the partition dim only merges for HBM.
std::int64_t run_elems(const AccessPattern& ap, bool hbm) {
  struct D {
    std::int64_t size, stride;
  };
  D dims[4] = {{ap.free_size[2], ap.free_stride[2]},
               {ap.free_size[1], ap.free_stride[1]},
               {ap.free_size[0], ap.free_stride[0]},
               {hbm ? ap.part_count : 1, ap.part_stride}};
  std::int64_t run = 1;
  for (const D& d : dims) {
    if (d.size <= 1) continue;
    if (d.stride != run) break;
    run *= d.size;
  }
  return run;
}

std::int64_t innermost_stride(const AccessPattern& ap) {
  for (int k = 2; k >= 0; --k)
    if (ap.free_size[static_cast<std::size_t>(k)] > 1) return ap.free_stride[static_cast<std::size_t>(k)];
  return 1;
}

// An engine access whose inner stride exceeds 16 B: it gets half the access bandwidth.
bool strided_access(const AccessPattern& ap, ir::DType dt) {
  return innermost_stride(ap) * static_cast<std::int64_t>(ir::dtype_bytes(dt)) > 16;
}

// The smallest nonzero stride among the free dims that move (1 for a single element or a
// broadcast): 1 when the pattern reads some contiguous run, whatever order it walks its dims in.
std::int64_t smallest_stride(const AccessPattern& ap) {
  std::int64_t m = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    const std::int64_t st = std::abs(std::int64_t{ap.free_stride[k]});
    if (ap.free_size[k] > 1 && st > 0 && (m == 0 || st < m)) m = st;
  }
  return m == 0 ? 1 : m;
}

bool is_16bit_or_less(ir::DType d) { return ir::dtype_bytes(d) <= 2; }

struct Event {
  double t;
  std::uint64_t seq;
  std::uint32_t kind;
  std::uint32_t arg;
};
struct EventLater {
  bool operator()(const Event& a, const Event& b) const noexcept {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};
enum : std::uint32_t { kIssueEnd, kDone, kXferStart, kXferEnd, kDmaCheck, kRetry };

constexpr std::uint8_t kPortSbuf = 1;  // Vector and GpSimd share the SBUF port on NC-v2
constexpr std::uint8_t kPortPsum = 2;  // Vector and Scalar share the PSUM port on NC-v2
constexpr std::uint8_t kPortCore = 4;  // host: every compute "engine" is the one core's execution units
constexpr std::uint8_t kPorts[] = {kPortSbuf, kPortPsum, kPortCore};

}  // namespace

namespace detail {

std::vector<Occupancy> occupancy(const TileProgram& p, const SimResult& r) {
  const std::size_t nb = p.buffers.size();
  std::vector<double> first(nb, INFINITY), last(nb, -INFINITY);
  for (std::size_t i = 0; i < p.instrs.size() && i < r.start_ns.size(); ++i) {
    const Instr& in = p.instrs[i];
    auto touch = [&](const AccessPattern& ap) {
      if (ap.buffer < 0 || static_cast<std::size_t>(ap.buffer) >= nb) return;
      auto b = static_cast<std::size_t>(ap.buffer);
      first[b] = std::min(first[b], r.start_ns[i]);
      last[b] = std::max(last[b], r.done_ns[i]);
    };
    touch(in.dst);
    for (std::size_t s = 0; s < in.nsrc && s < in.src.size(); ++s) touch(in.src[s]);
    if (in.writes_reduce_res()) touch(in.reduce_res());
  }
  return occupancy(p, first, last);
}

std::vector<Occupancy> occupancy(const TileProgram& p, std::span<const double> first, std::span<const double> last) {
  const std::size_t nb = p.buffers.size();
  std::vector<Occupancy> out;
  for (Memory m : {Memory::sbuf, Memory::psum}) {
    struct Ch {
      double t;
      std::int64_t d;
    };
    std::vector<Ch> ch;
    for (std::size_t b = 0; b < nb; ++b) {
      if (p.buffers[b].mem != m || !(first[b] <= last[b])) continue;
      const std::int64_t bytes = p.buffers[b].bytes_per_partition();
      ch.push_back({first[b], bytes});
      ch.push_back({last[b], -bytes});
    }
    // Frees before allocations at the same instant: a buffer released when another starts is reuse.
    std::sort(ch.begin(), ch.end(), [](const Ch& a, const Ch& b) { return a.t < b.t || (a.t == b.t && a.d < b.d); });
    Occupancy o;
    o.mem = m;
    std::int64_t cur = 0;
    for (const Ch& c : ch) {
      cur += c.d;
      if (!o.points.empty() && o.points.back().first == c.t) o.points.back().second = cur;
      else o.points.emplace_back(c.t, cur);
      o.peak = std::max(o.peak, cur);
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace detail

SimResult simulate(const TileProgram& p, const Target& t, const SimParams& params) {
  const std::size_t n = p.instrs.size();
  const int nq = kFirstDmaQueue + t.dma_lanes();
  if (t.dma_queues <= 0 || t.dma_queues > 200) throw Error(fmt::format("simulate: target {} has {} DMA queues", t.name, t.dma_queues));
  if (p.dep_begin.size() != n + 1 || (n > 0 && p.dep_begin[n] != p.deps.size()))
    throw Error(fmt::format("simulate: program {} has malformed dependency arrays", p.kernel_name));

  // DMA: every transfer moves its payload plus a per-descriptor overhead ("effective bytes") through
  // the core's t.dma_queues DMA engines (which ones: the engine parts below), sharing each engine
  // with the other transfers on it and, for the bytes that touch HBM, the core's HBM bandwidth
  // with all of them; an SBUF-to-SBUF copy runs at `engines_per_xfer` engines' rate.
  const double hbm_bw = t.hbm_bytes_per_ns * params.hbm_efficiency;
  const double engine_bw = params.dma_engine_bytes_per_ns > 0 ? params.dma_engine_bytes_per_ns : t.dma_queue_bytes_per_ns;
  const double engines_per_xfer = params.dma_engines > 0 ? std::min<double>(params.dma_engines, t.dma_queues) : 1.0;
  const double q_bw = engine_bw * engines_per_xfer;  // one on-chip transfer
  const double dma_fixed = params.dma_fixed_ns >= 0 ? params.dma_fixed_ns : t.dma_fixed_ns;
  // model version 9 (dma_tail_ns >= 0): the fixed latency overlaps the transfer; a DMA completes
  // dma_fixed after its start or dma_tail after its bandwidth phase, whichever is later
  const bool dma_overlap = params.dma_tail_ns >= 0;
  const double desc_ns = t.dma_descriptor_ns;
  const double desc_overhead_bytes = params.dma_descriptor_overhead_ns >= 0 ? params.dma_descriptor_overhead_ns * engine_bw : -1.0;
  const std::int64_t desc_min = t.dma_descriptor_min_bytes;
  const double sbuf_transpose_eff =
      params.dma_sbuf_transpose_efficiency > 0 ? params.dma_sbuf_transpose_efficiency : t.dma_transpose_efficiency;
  if (!(hbm_bw > 0) || !(q_bw > 0)) throw Error(fmt::format("simulate: target {} has no DMA bandwidth", t.name));
  const bool ports = params.port_conflicts && t.port_conflicts;

  SimResult r;
  r.instructions = n;
  r.queue_busy_ns.assign(static_cast<std::size_t>(nq), 0.0);
  r.start_ns.assign(n, 0.0);
  r.issue_end_ns.assign(n, 0.0);
  r.done_ns.assign(n, 0.0);
  r.queue.assign(n, 0);

  // ---- precompute costs ----
  std::vector<double> occ(n), lat(n);       // compute: issue time, extra latency; dma: descriptor time, latency
  std::vector<double> xfer_bytes(n, 0.0);   // dma: bandwidth-equivalent bytes
  std::vector<double> payload_share(n, 1.0);  // dma: payload bytes / effective bytes
  std::vector<double> load_ns(n, 0.0);      // matmul: its LoadStationary, paid when it waited for operands
  std::vector<std::uint8_t> is_dma(n, 0), is_hbm(n, 0), port_need(n, 0), is_mm(n, 0);
  std::vector<int> dma_tensor_key;  // the HBM buffer of each of r.dma_tensors (-1: on-chip)
  // The PE array in 4 x 4 blocks of 32 rows and 32 columns (bit 4r + c: rows 32r.., columns
  // 32c..) that a Tensor-engine instruction occupies: all of them, or a matmul's tile
  // (Instr::pe_rows, pe_cols). A matmul in a tile holds its blocks for its whole pass but the
  // engine's queue only for an issue interval, so matmuls in disjoint tiles run together
  // (nki.isa.nc_matmul, "Tiling mode"); an instruction waits until every block it needs is free.
  std::vector<std::uint16_t> pe_mask(n, 0);
  std::vector<double> pe_hold(n, 0.0);  // a tiled matmul: how long its blocks stay busy after its issue ends
  bool pe_tiles = false;                 // any tiled matmul at all (else the blocks are not tracked)
  std::vector<std::int32_t> ibuf(4 * n, -1);  // buffers each instruction touches (for occupancy)
  const auto nbuf = static_cast<std::int32_t>(p.buffers.size());
  auto buf = [&](std::size_t i, const AccessPattern& ap, const char* what) -> const lower::Buffer& {
    if (ap.buffer < 0 || ap.buffer >= nbuf)
      throw Error(fmt::format("simulate: instruction {} ({}) {} refers to buffer {} of {}", i, lower::to_string(p.instrs[i].op), what, ap.buffer, nbuf));
    return p.buffers[static_cast<std::size_t>(ap.buffer)];
  };
  // ---- DMA engine parts (CSR by instruction): the engines an HBM transfer's bytes go through ----
  // Each of the t.dma_queues engines serves ceil(pmax / engines) consecutive SBUF partitions
  // ("each DMA engine is typically responsible for moving data for eight SBUF partitions",
  // aws-neuron-sdk nki-dma-overview); a transfer is split by its SBUF side's partitions. A DMA
  // transpose where the engines transpose in blocks ("all 16x DMA engines ... work co-operatively",
  // trainium2_arch.rst) and a copy with no on-chip side use every engine equally. With fewer engines
  // per transfer than the core has (`dma_engines`; SimParams{}: 1), a transfer runs on as many
  // engines from its queue's on.
  const int n_eng = t.dma_queues;
  const int part_per_eng = std::max(1, (std::max(1, t.pmax) + n_eng - 1) / n_eng);
  std::vector<std::uint32_t> part_begin(n + 1, 0);  // set in the cost pass below
  std::vector<std::uint16_t> part_eng;
  std::vector<double> part_w;
  std::vector<std::uint8_t> is_wide(n, 0);  // an equal part on every engine (the event loop's fast path)
  std::vector<int> part_cnt(static_cast<std::size_t>(n_eng), 0);
  const auto engine_parts = [&](std::size_t i, const Instr& in, const lower::Buffer& sb, const lower::Buffer& db) {
    if (engines_per_xfer < n_eng) {  // fewer engines per transfer than the core has: its queue's
      const int k = std::max(1, static_cast<int>(engines_per_xfer));
      for (int j = 0; j < k; ++j) {
        part_eng.push_back(static_cast<std::uint16_t>((in.at.queue + j) % n_eng));
        part_w.push_back(1.0 / k);
      }
      return;
    }
    const AccessPattern* ap = db.mem != Memory::hbm ? &in.dst : sb.mem != Memory::hbm ? &in.src[0] : nullptr;
    const lower::Buffer& ob = ap == &in.dst ? db : sb;
    const auto wide = [&] { is_wide[i] = 1; };  // an equal part on every engine: no entry
    if (!ap || ob.free_elems <= 0 || (in.op == Opcode::dma_transpose && t.dma_transposes_in_blocks())) {
      wide();
      return;
    }
    const std::int64_t P = std::max<std::int32_t>(1, ap->part_count);
    if (P == std::int64_t{n_eng} * part_per_eng) {  // every partition (no division: this runs per DMA)
      wide();
      return;
    }
    const std::int64_t p0 = ob.start_partition(*ap), step = P > 1 ? std::max<std::int64_t>(1, ap->part_stride / ob.free_elems) : 1;
    const auto eng_of = [&](std::int64_t part) { return std::clamp<std::int64_t>(part / part_per_eng, 0, n_eng - 1); };
    if (step == 1) {  // consecutive partitions: each engine's overlap with them
      for (std::int64_t e = eng_of(p0), last = eng_of(p0 + P - 1); e <= last; ++e) {
        const std::int64_t lo = std::max(p0, e * part_per_eng), hi = e == last ? p0 + P : std::min(p0 + P, (e + 1) * part_per_eng);
        part_eng.push_back(static_cast<std::uint16_t>(e));
        part_w.push_back(static_cast<double>(hi - lo) / static_cast<double>(P));
      }
      return;
    }
    std::fill(part_cnt.begin(), part_cnt.end(), 0);
    for (std::int64_t k = 0; k < P; ++k) ++part_cnt[static_cast<std::size_t>(eng_of(p0 + k * step))];
    for (int e = 0; e < n_eng; ++e)
      if (part_cnt[static_cast<std::size_t>(e)] > 0) {
        part_eng.push_back(static_cast<std::uint16_t>(e));
        part_w.push_back(static_cast<double>(part_cnt[static_cast<std::size_t>(e)]) / static_cast<double>(P));
      }
  };
  for (std::size_t i = 0; i < n; ++i) {
    part_begin[i] = static_cast<std::uint32_t>(part_eng.size());
    const Instr& in = p.instrs[i];
    if (in.nsrc > in.src.size()) throw Error(fmt::format("simulate: instruction {} has nsrc {}", i, in.nsrc));
    for (std::uint32_t k = p.dep_begin[i]; k < p.dep_begin[i + 1]; ++k)
      if (p.deps[k] >= i) throw Error(fmt::format("simulate: instruction {} depends on later instruction {}", i, p.deps[k]));
    const lower::Buffer& db = buf(i, in.dst, "dst");
    ibuf[4 * i] = in.dst.buffer;
    for (std::size_t k = 0; k < in.nsrc; ++k) ibuf[4 * i + 1 + k] = in.src[k].buffer;
    if (in.writes_reduce_res()) {
      if (in.nsrc > 2) throw Error(fmt::format("simulate: activation {} with reduce_res has {} sources", i, in.nsrc));
      (void)buf(i, in.reduce_res(), "reduce_res");
      ibuf[4 * i + 3] = in.reduce_res().buffer;
    }
    is_mm[i] = in.op == Opcode::nc_matmul ? 1 : 0;
    if (in.at.dma) {
      if (in.at.queue >= t.dma_queues && !(in.op == Opcode::dma_transpose && in.at.queue == t.dma_transpose_queue()))
        throw Error(fmt::format("simulate: instruction {} uses DMA queue {}, target {} has {}{}", i, in.at.queue, t.name, t.dma_queues,
                                t.dma_transposes_in_blocks() ? fmt::format(" (and {} for transposes)", t.dma_transpose_queue()) : ""));
      if (in.nsrc < 1) throw Error(fmt::format("simulate: DMA instruction {} has no source", i));
      const lower::Buffer& sb = buf(i, in.src[0], "src[0]");
      r.queue[i] = static_cast<std::uint8_t>(kFirstDmaQueue + in.at.queue);
      is_dma[i] = 1;
      const bool shbm = sb.mem == Memory::hbm, dhbm = db.mem == Memory::hbm;
      is_hbm[i] = (shbm || dhbm) ? 1 : 0;
      // A DMA between dtypes converts on the way (nki.isa.dma_copy): the engines read the source's
      // bytes and write the destination's, and HBM sees only its own side's. The engine time is
      // the larger side's; the HBM share and the descriptor runs are HBM's side's.
      const auto ssz = static_cast<std::int64_t>(ir::dtype_bytes(sb.dtype)), dsz = static_cast<std::int64_t>(ir::dtype_bytes(db.dtype));
      const std::int64_t esz = dhbm ? dsz : shbm ? ssz : std::max(ssz, dsz);
      const std::int64_t elems = in.src[0].elems();
      const std::int64_t bytes = elems * esz;
      const std::int64_t engine_bytes = elems * std::max(ssz, dsz);
      std::int64_t run = std::min(run_elems(in.src[0], shbm), run_elems(in.dst, dhbm));
      double eff = static_cast<double>(engine_bytes);
      if (in.op == Opcode::dma_transpose && !t.dma_transposes) {
        // no transpose in the DMA datapath (NeuronCore-v2): one descriptor per element, as a
        // strided gather
        run = 1;
      } else if (in.op == Opcode::dma_transpose) {
        // the transposing side is handled by the DMA engine itself, provided the source holds
        // contiguous runs at all; a source with no unit stride (a tile of every J-th row of an
        // interleaved block) is read element by element
        run = smallest_stride(in.src[0]) == 1 ? run_elems(in.dst, dhbm) : 1;
        eff /= std::max(0.05, is_hbm[i] ? t.dma_transpose_efficiency : sbuf_transpose_eff);
        if (t.dma_transposes_in_blocks() && !dhbm && elems > 0) {
          // the engines write the destination a [pmax partitions, block] block at a time, all of
          // them on one block (Target::dma_transpose_block_elems): a transpose pays each block it
          // touches whole, its partitions rounded up to pmax and each contiguous run of its free
          // dim to the block's elements
          const auto up = [](std::int64_t x, std::int64_t b) { return (x + b - 1) / b * b; };
          const std::int64_t P = std::max<std::int64_t>(1, in.dst.part_count);
          const std::int64_t drun = std::max<std::int64_t>(1, run_elems(in.dst, false));
          const std::int64_t runs = up(elems / P, drun) / drun;
          const double paid = static_cast<double>(up(P, std::max(1, t.pmax)) * runs * up(drun, t.dma_transpose_block_elems));
          eff *= std::max(1.0, paid / static_cast<double>(elems));
        }
      }
      run = std::max<std::int64_t>(1, run);
      const std::int64_t ndesc = (elems + run - 1) / run;
      const std::int64_t run_bytes = run * esz;
      if (desc_overhead_bytes >= 0) eff += static_cast<double>(ndesc) * desc_overhead_bytes;
      else if (run_bytes < desc_min) eff += static_cast<double>(ndesc) * static_cast<double>(desc_min - run_bytes);
      xfer_bytes[i] = eff;
      payload_share[i] = static_cast<double>(bytes) / eff;
      occ[i] = static_cast<double>(ndesc) * desc_ns;
      lat[i] = dma_overlap ? params.dma_tail_ns : dma_fixed;
      r.dma_bytes += static_cast<double>(bytes);
      if (is_hbm[i]) r.hbm_bytes += static_cast<double>(bytes);
      r.dma_effective_bytes += eff;
      r.dma_descriptors += ndesc;
      {
        // per tensor, keyed by its HBM buffer (-1: on-chip transfers)
        const int key = shbm ? in.src[0].buffer : dhbm ? in.dst.buffer : -1;
        const auto at = std::find(dma_tensor_key.begin(), dma_tensor_key.end(), key);
        const auto ti = static_cast<std::size_t>(at - dma_tensor_key.begin());
        if (at == dma_tensor_key.end()) {
          dma_tensor_key.push_back(key);
          r.dma_tensors.push_back(SimResult::DmaTensor{key >= 0 ? (shbm ? sb.name : db.name) : std::string("on-chip")});
        }
        SimResult::DmaTensor& d = r.dma_tensors[ti];
        d.bytes += static_cast<double>(bytes);
        d.effective_bytes += eff;
        d.descriptors += ndesc;
        ++d.transfers;
        if (in.op == Opcode::dma_transpose) ++d.transposes;
      }
      if (is_hbm[i]) engine_parts(i, in, sb, db);
      continue;
    }
    const int e = static_cast<int>(in.at.engine);
    if (e < 0 || e >= target::kNumEngines) throw Error(fmt::format("simulate: instruction {} has engine {}", i, e));
    r.queue[i] = static_cast<std::uint8_t>(e);
    const target::EngineSpec& es = t.engines[e];
    const double clock = es.clock_ghz > 0 ? es.clock_ghz : 1.0;
    bool touches_psum = db.mem == Memory::psum, touches_sbuf = db.mem == Memory::sbuf;
    bool all16 = is_16bit_or_less(db.dtype);
    bool strided = strided_access(in.dst, db.dtype);
    std::int64_t src_free = 0;
    for (std::size_t s = 0; s < in.nsrc; ++s) {
      const lower::Buffer& sb = buf(i, in.src[s], "src");
      touches_psum |= sb.mem == Memory::psum;
      touches_sbuf |= sb.mem == Memory::sbuf;
      all16 &= is_16bit_or_less(sb.dtype);
      strided |= strided_access(in.src[s], sb.dtype);
      src_free = std::max(src_free, in.src[s].free_elems());
    }
    if (in.writes_reduce_res()) touches_psum |= buf(i, in.reduce_res(), "reduce_res").mem == Memory::psum;
    double cycles = 0, latency = 0;
    const auto engine = static_cast<Engine>(e);
    if (engine == Engine::tensor && (in.op == Opcode::nc_matmul || in.op == Opcode::nc_transpose)) {
      double m = 0, nn = 0;
      bool fp32 = false;
      if (in.op == Opcode::nc_matmul) {
        if (in.nsrc < 2) throw Error(fmt::format("simulate: nc_matmul {} needs two sources", i));
        m = static_cast<double>(in.src[0].free_elems());
        nn = static_cast<double>(in.src[1].free_elems());
        fp32 = ir::dtype_bytes(buf(i, in.src[0], "src").dtype) >= 4 || ir::dtype_bytes(buf(i, in.src[1], "src").dtype) >= 4;
      } else {
        if (in.nsrc < 1) throw Error(fmt::format("simulate: nc_transpose {} needs a source", i));
        // Through the PE array: the data is stationary and an identity [P, P] moves.
        m = static_cast<double>(in.src[0].free_elems());
        nn = static_cast<double>(in.src[0].part_count);
        fp32 = ir::dtype_bytes(buf(i, in.src[0], "src").dtype) >= 4;
      }
      cycles = std::max(std::min(t.matmul_min_cycles, m), nn);
      if (fp32) cycles *= t.matmul_fp32_factor;
      if (in.op == Opcode::nc_transpose) cycles *= t.transpose_factor;
      const double rows = static_cast<double>(in.src[0].part_count);
      if (t.host && in.op == Opcode::nc_matmul) {
        // The host's "Tensor engine" is the core's SIMD units running sgemm, not a PE array: a
        // matmul costs its FLOPs at the target's Tensor peak for its operands' dtype
        // (targets/host.json `peak_flops`, the roofline's own figure). On a NeuronCore the
        // PE-array formula above is that peak already (128 x 128 x 2 x clock at full rows).
        const ir::DType da = buf(i, in.src[0], "src").dtype, dbt = buf(i, in.src[1], "src").dtype;
        const ir::DType dt = fp32 ? ir::DType::fp32
                             : (ir::dtype_bytes(da) == 1 && ir::dtype_bytes(dbt) == 1) ? ir::DType::fp8_e4m3
                                                                                       : ir::DType::bf16;
        const double peak = t.peak_tensor_flops(dt);
        if (peak > 0) cycles = 2.0 * rows * m * nn / peak * 1e9 * clock;
      } else if (t.host) {
        // host: a transpose is a strided copy through the SIMD units, at the Tensor engine's
        // per-row element rate (targets/host.json `engines.tensor`), not a PE-array pass
        const double rate = fp32 ? es.elems_per_cycle_32bit : es.elems_per_cycle_16bit;
        if (rate > 0) cycles = rows * m / (static_cast<double>(t.partitions) * rate);
      }
      cycles += params.matmul_extra_cycles;
      latency = t.matmul_fixed_cycles;
      if (in.op == Opcode::nc_matmul && params.matmul_exposed_load > 0) {
        load_ns[i] = params.matmul_exposed_load * std::max(std::min(t.matmul_min_cycles, m), m) *
                     (fp32 ? t.matmul_fp32_factor : 1.0) / clock;
        // a stationary read with an inner stride above 16 B (a strided view of an interleaved
        // block, docs/SCHEDULE.md) loads at half the access bandwidth, as the other engines' reads
        if (strided_access(in.src[0], buf(i, in.src[0], "src").dtype)) load_ns[i] *= 2;
      }
    } else {
      double elems = static_cast<double>(std::max(in.dst.free_elems(), src_free));
      if (in.op == Opcode::tensor_reduce && in.nsrc >= 1) elems = static_cast<double>(in.src[0].free_elems());
      double passes = 1;
      if (in.op == Opcode::tensor_tensor && in.nsrc >= 2) {
        // [SDK-old]: one pass when an input is in PSUM, or for bf16 add/sub/mul with both
        // contiguous inputs in SBUF; two passes otherwise.
        const lower::Buffer& a = buf(i, in.src[0], "src");
        const lower::Buffer& b = buf(i, in.src[1], "src");
        const bool psum_in = a.mem == Memory::psum || b.mem == Memory::psum;
        const bool fast16 = a.mem == Memory::sbuf && b.mem == Memory::sbuf && a.dtype == ir::DType::bf16 &&
                            b.dtype == ir::DType::bf16 && !strided &&
                            (in.fn == ir::Fn::add || in.fn == ir::Fn::sub || in.fn == ir::Fn::mul);
        passes = (psum_in || fast16) ? 1 : 2;
      }
      // [SDK] nki.isa.scalar_tensor_tensor: N cycles when data and operand1 are both bf16, op0 is
      // subtract and op1 multiply, and N is even; 2N otherwise
      if (in.op == Opcode::scalar_tensor_tensor && in.nsrc >= 2) {
        const bool fast = buf(i, in.src[0], "src").dtype == ir::DType::bf16 && buf(i, in.src[1], "src").dtype == ir::DType::bf16 &&
                          in.fn == ir::Fn::sub && in.fn1 == ir::Fn::mul && in.src[0].free_elems() % 2 == 0;
        passes = fast ? 1 : 2;
      }
      // [SDK-old] nki.isa.tensor_copy_predicated: max(MIN_II, N) with the source or the predicate
      // in PSUM, max(MIN_II, 2N) with both in SBUF
      if (in.op == Opcode::tensor_copy_predicated) {
        bool psum_in = false;
        for (int s = 0; s < in.nsrc; ++s) psum_in = psum_in || buf(i, in.src[static_cast<std::size_t>(s)], "src").mem == Memory::psum;
        passes = psum_in ? 1 : 2;
        // a source of another dtype than the destination is converted first (NKI's operands share
        // one): one more pass, as the emitted kernel's tensor_copy
        if (in.nsrc >= 2 && buf(i, in.src[1], "src").dtype != buf(i, in.dst, "dst").dtype) passes += 1;
      }
      double rate = std::max(1e-9, all16 && !touches_psum ? es.elems_per_cycle_16bit : es.elems_per_cycle_32bit);
      if (touches_psum && params.psum_elems_per_cycle > 0) rate = std::min(rate, params.psum_elems_per_cycle);
      cycles = passes * elems / rate;
      if (strided) cycles *= 2;  // inner stride above 16 B halves access bandwidth
      // [SDK] nki.isa.iota and nki.isa.affine_select: 150 + N GpSimd cycles
      if (in.op == Opcode::iota || in.op == Opcode::affine_select) cycles += 150;
      // [SDK] nki.isa.bn_aggr: max(MIN_II, 13 * N/3) Vector cycles for N input elements per partition
      if (in.op == Opcode::bn_aggr) cycles = 13.0 * static_cast<double>(src_free) / 3.0;
      cycles = std::max(cycles, es.min_ii_cycles);
      // [SDK] nki.isa.activation_reduce: max(MIN_II, N) + MIN_II Scalar cycles (the row sums' readout)
      if (in.writes_reduce_res()) cycles += es.min_ii_cycles;
      latency = es.fixed_overhead_cycles * params.engine_overhead_scale;
      if (ports && !t.host) {
        if (engine == Engine::gpsimd || (engine == Engine::vector && touches_sbuf)) port_need[i] |= kPortSbuf;
        if ((engine == Engine::vector || engine == Engine::scalar) && touches_psum) port_need[i] |= kPortPsum;
      }
    }
    // The host's engines are one core: its compute instructions run one at a time.
    if (ports && t.host) port_need[i] |= kPortCore;
    occ[i] = cycles / clock;
    lat[i] = latency / clock;
    if (engine == Engine::tensor && !t.host) {
      pe_mask[i] = 0xFFFF;
      const bool rows = in.pe_rows > 0 && in.pe_rows < t.pmax, cols = in.pe_cols > 0 && in.pe_cols < t.pmax;
      if (in.op == Opcode::nc_matmul && (rows || cols)) {
        const int r0 = rows ? in.pe_row0 / 32 : 0, r1 = rows ? std::min(4, (in.pe_row0 + in.pe_rows + 31) / 32) : 4;
        const int c0 = cols ? in.pe_col0 / 32 : 0, c1 = cols ? std::min(4, (in.pe_col0 + in.pe_cols + 31) / 32) : 4;
        pe_mask[i] = 0;
        pe_tiles = true;
        for (int rr = r0; rr < r1; ++rr)
          for (int cc = c0; cc < c1; ++cc) pe_mask[i] |= static_cast<std::uint16_t>(1u << (4 * rr + cc));
        // it issues in the engine's minimum issue interval, and the next matmul in other blocks
        // starts behind it: no figure for that interval is published (a guess, docs/SIMULATOR.md)
        const double issue = std::min(occ[i], std::max(1.0, es.min_ii_cycles) / clock);
        pe_hold[i] = occ[i] - issue;
        occ[i] = issue;
        lat[i] += pe_hold[i];  // its result is done when its whole pass is
      }
    }
  }

  part_begin[n] = static_cast<std::uint32_t>(part_eng.size());

  // without tiled matmuls an in-order Tensor queue already serialises the array's use
  if (!pe_tiles) std::fill(pe_mask.begin(), pe_mask.end(), std::uint16_t{0});

  // ---- queues (CSR by queue, program order) and successors ----
  const auto unq = static_cast<std::size_t>(nq);
  std::vector<std::uint32_t> q_begin(unq + 1, 0), q_items(n), head(unq);
  for (std::size_t i = 0; i < n; ++i) ++q_begin[r.queue[i] + 1];
  for (std::size_t q = 0; q < unq; ++q) q_begin[q + 1] += q_begin[q];
  for (std::size_t q = 0; q < unq; ++q) head[q] = q_begin[q];
  {
    std::vector<std::uint32_t> fill(q_begin.begin(), q_begin.end() - 1);
    for (std::size_t i = 0; i < n; ++i) q_items[fill[r.queue[i]]++] = static_cast<std::uint32_t>(i);
  }
  // An accumulating matmul after another matmul on the same in-order Tensor queue is pipelined by
  // the hardware (PSUM accumulation groups), so that edge is implied by queue order and dropped.
  // Likewise a write-after-read between two instructions of one in-order queue: the later one
  // starts after the earlier one's issue ends, when its reads are done; the write waits for
  // nothing more (no data flows along that edge, so it pays no access latency).
  const bool war_known = p.dep_kind.size() == p.deps.size();
  auto implied = [&](std::uint32_t k, std::size_t i) {
    const std::uint32_t pred = p.deps[k];
    if (r.queue[pred] != r.queue[i]) return false;
    return (is_mm[pred] && is_mm[i]) || (war_known && p.dep_kind[k] == lower::kDepWar);
  };
  // Successor lists (CSR by predecessor), one per event that releases an edge: the predecessor's
  // completion (`kOnDone`, counted in `pending`); its issue end, for a write-after-read between two
  // instructions of one DMA queue, which starts its *ready* instructions in program order, so one
  // waiting for its inputs does not hold back a later one whose inputs are there (the compiler's
  // ASAP order), and the reader's issue must have ended (`kOnIssue`, counted in `ipend`); or, for a
  // fence (lower::kDepFence), the completion of the predecessor and of every instruction before it
  // on its queue (`kOnDrain`, counted in `pending`). An edge implied by an in-order queue is in none.
  enum : int { kOnDone, kOnIssue, kOnDrain };
  const auto release_by = [&](std::uint32_t k, std::size_t i) -> int {
    if (war_known && p.dep_kind[k] == lower::kDepFence) return kOnDrain;
    if (!implied(k, i)) return kOnDone;
    return is_dma[i] ? kOnIssue : -1;
  };
  struct Succ {
    std::vector<std::uint32_t> begin, items;
  };
  std::array<Succ, 3> succ;
  for (auto& sl : succ) sl.begin.assign(n + 1, 0);
  std::vector<std::uint32_t> pending(n, 0), ipend(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::uint32_t k = p.dep_begin[i]; k < p.dep_begin[i + 1]; ++k)
      if (const int l = release_by(k, i); l >= 0) {
        ++succ[static_cast<std::size_t>(l)].begin[p.deps[k] + 1];
        ++(l == kOnIssue ? ipend : pending)[i];
      }
  for (auto& sl : succ) {
    for (std::size_t i = 0; i < n; ++i) sl.begin[i + 1] += sl.begin[i];
    sl.items.resize(sl.begin[n]);
  }
  {
    std::array<std::vector<std::uint32_t>, 3> fill;
    for (std::size_t l = 0; l < 3; ++l) fill[l].assign(succ[l].begin.begin(), succ[l].begin.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (std::uint32_t k = p.dep_begin[i]; k < p.dep_begin[i + 1]; ++k)
        if (const int l = release_by(k, i); l >= 0)
          succ[static_cast<std::size_t>(l)].items[fill[static_cast<std::size_t>(l)][p.deps[k]]++] = static_cast<std::uint32_t>(i);
  }
  const Succ &on_done = succ[kOnDone], &on_issue = succ[kOnIssue], &on_drain = succ[kOnDrain];
  // Per queue, how many of its instructions (q_items order) have completed without a gap.
  std::vector<std::uint32_t> done_prefix(q_begin.begin(), q_begin.end() - 1);
  std::vector<std::uint8_t> is_done(on_drain.items.empty() ? 0 : n, 0);
  // Per DMA queue, its ready instructions (a min-heap by program index) and how many started.
  std::vector<std::vector<std::uint32_t>> rdy(unq);
  std::vector<std::uint32_t> nstarted(unq, 0);
  auto make_ready = [&](std::uint32_t i) {
    auto& h = rdy[r.queue[i]];
    h.push_back(i);
    std::push_heap(h.begin(), h.end(), std::greater<>{});
  };
  for (std::size_t i = 0; i < n; ++i)
    if (is_dma[i] && pending[i] == 0 && ipend[i] == 0) make_ready(static_cast<std::uint32_t>(i));

  // ---- event loop ----
  constexpr std::uint32_t kNone = 0xffffffffu;
  std::vector<double> ready_at(n, 0.0);
  std::vector<std::uint32_t> dep_gate(n, kNone), gate(n, kNone);
  std::vector<std::uint8_t> qbusy(unq, 0);
  std::vector<double> q_free_at(unq, 0.0);
  std::vector<std::uint32_t> q_last(unq, kNone);
  std::uint8_t port_busy = 0;
  std::array<double, 16> pe_free_at{};  // when each 32 x 32 block of the PE array is free (pe_mask)
  std::array<std::uint32_t, 16> pe_last{};
  pe_last.fill(kNone);
  double port_free_at[kPortCore + 1] = {};
  std::uint32_t port_last[kPortCore + 1] = {kNone, kNone, kNone, kNone, kNone};

  std::vector<Event> heap;
  heap.reserve(std::min<std::size_t>(4 * n + 16, 1 << 16));
  std::uint64_t seq = 0;
  double now = 0;
  auto push = [&](double tt, std::uint32_t kind, std::uint32_t arg) {
    heap.push_back({tt, seq++, kind, arg});
    std::push_heap(heap.begin(), heap.end(), EventLater{});
  };

  // Shared-bandwidth DMA state (model version 8; the header comment). All parts on one engine move
  // at the same rate, so each engine keeps the bytes served to any one of its parts so far
  // (`served`); a part that started at V with b bytes ends when `served` reaches V + b, and an
  // engine's parts end in the order of their ends (a min-heap per engine, in a flat array of
  // `slots` per engine: one part per DMA queue at most). An event is one pass over the engines.
  // While only wide transfers (an equal part on every engine) are in flight and every engine holds
  // the same parts with the same bytes left, the engines are alike and engine 0 stands for all of
  // them (`alike`): one part per transfer instead of one per engine. A narrow transfer copies
  // engine 0 to the others first; once only wide ones are left and the engines agree, they fold
  // back.
  struct EnginePart {
    double end = 0;  // `served` at which it is done
    std::uint32_t xfer = 0;
  };
  struct DmaEngine {
    double served = 0, payload = 0;  // payload: Σ payload shares of its parts
    std::uint32_t count = 0;         // its parts in flight
  };
  const auto part_later = [](const EnginePart& x, const EnginePart& y) { return x.end > y.end; };
  const auto slots = static_cast<std::size_t>(t.dma_lanes());  // the transposes' queue included
  std::vector<DmaEngine> eng(static_cast<std::size_t>(n_eng));
  std::vector<EnginePart> eng_parts(eng.size() * slots);
  std::vector<double> inv_count(slots + 1, 0.0);  // 1 / parts: no division in the passes
  for (std::size_t c = 1; c < inv_count.size(); ++c) inv_count[c] = 1.0 / static_cast<double>(c);
  std::vector<std::uint8_t> parts_open(n, 0);  // a transfer's parts not yet done (<= engines = dma_queues <= 200)
  double served_at = 0, eng_bw_now = 0;         // one engine's rate, scaled to the HBM share
  std::uint32_t dma_version = 0;
  std::size_t next_eng = 0;  // the engine whose first part the planned check ends
  bool alike = true;         // engine 0 stands for every engine
  int narrow_xfers = 0;      // transfers in flight that are not wide
  int xfers = 0;  // all transfers in bandwidth phase (HBM or not), for dma_active_ns
  double xfer_since = 0;
  const auto heap_of = [&](std::size_t e) { return eng_parts.begin() + static_cast<std::ptrdiff_t>(e * slots); };
  auto xfer_begin = [&] {
    if (xfers++ == 0) xfer_since = now;
  };
  auto xfer_end = [&] {
    if (--xfers == 0) r.dma_active_ns += now - xfer_since;
  };
  std::vector<EnginePart> fold_a(slots), fold_b(slots);
  const auto by_xfer = [](const EnginePart& x, const EnginePart& y) { return x.xfer < y.xfer; };
  auto unfold = [&] {  // engine 0 stood for all: give every engine its own copy
    const auto h0 = heap_of(0);
    for (std::size_t e = 1; e < eng.size(); ++e) {
      eng[e] = eng[0];
      std::copy(h0, h0 + eng[0].count, heap_of(e));
    }
    for (std::uint32_t j = 0; j < eng[0].count; ++j) parts_open[h0[j].xfer] = static_cast<std::uint8_t>(eng.size());
    alike = false;
  };
  auto try_fold = [&] {  // only wide transfers left: fold if every engine holds the same bytes left
    const auto rel = [&](std::size_t e, std::vector<EnginePart>& out) {
      const auto h = heap_of(e);
      out.assign(h, h + eng[e].count);
      for (auto& x : out) x.end -= eng[e].served;
      std::sort(out.begin(), out.end(), by_xfer);
    };
    rel(0, fold_a);
    for (std::size_t e = 1; e < eng.size(); ++e) {
      if (eng[e].count != eng[0].count) return;
      rel(e, fold_b);
      for (std::size_t j = 0; j < fold_a.size(); ++j)
        if (fold_a[j].xfer != fold_b[j].xfer || std::abs(fold_a[j].end - fold_b[j].end) > 1e-9 * std::abs(fold_a[j].end) + 1e-6) return;
    }
    for (const auto& x : fold_a) parts_open[x.xfer] = 1;
    alike = true;
    next_eng = 0;
  };
  // Brings every engine's `served` up to now at the rates since the last pass; with `settle`, ends
  // the parts that are done (the planned one, and any that rounding left a hair short); then
  // plans the next check: each part an equal share of its engine, every engine scaled down
  // together to the HBM bandwidth their payload needs.
  auto dma_pass = [&](bool settle, bool plan) {
    const double dt = now - served_at;
    served_at = now;
    double need = 0, key = INFINITY;  // key: min over engines of (first part's bytes left) x parts
    const std::size_t engines = alike ? 1 : eng.size();
    for (std::size_t e = 0; e < engines; ++e) {
      DmaEngine& g = eng[e];
      if (g.count == 0) continue;
      const auto h = heap_of(e);
      g.served += eng_bw_now * inv_count[g.count] * dt;
      if (settle) {
        if (e == next_eng) g.served = std::max(g.served, h->end);
        while (g.count > 0 && h->end <= g.served + 1e-9 * h->end + 1e-6) {
          const std::uint32_t a = h->xfer;
          std::pop_heap(h, h + g.count, part_later);
          --g.count;
          g.payload -= payload_share[a];
          if (--parts_open[a] == 0) {
            xfer_end();
            push(now, kIssueEnd, a);
            if (!is_wide[a]) --narrow_xfers;
          }
        }
        if (g.count == 0) {
          g.payload = 0;  // no rounding carried into the next busy spell
          continue;
        }
      }
      if (!plan) continue;
      need += g.payload * inv_count[g.count];
      if ((h->end - g.served) * g.count < key) {
        key = (h->end - g.served) * g.count;
        next_eng = e;
      }
    }
    ++dma_version;  // a check planned before this pass is stale either way
    if (!plan || !(need > 0)) return;
    need *= engine_bw * static_cast<double>(alike ? eng.size() : 1);  // alike: engine 0 stood for all
    eng_bw_now = engine_bw * (need > hbm_bw ? hbm_bw / need : 1.0);
    push(now + std::max(0.0, key) / eng_bw_now, kDmaCheck, dma_version);
  };

  auto try_start = [&](std::size_t q) {
    if (qbusy[q]) return;
    std::uint32_t i = kNone;
    double pe_at = 0;
    std::uint32_t pe_by = kNone;
    if (q >= static_cast<std::size_t>(kFirstDmaQueue)) {
      auto& h = rdy[q];
      if (h.empty()) return;
      std::pop_heap(h.begin(), h.end(), std::greater<>{});
      i = h.back();
      h.pop_back();
      ++nstarted[q];
    } else {
      if (head[q] == q_begin[q + 1]) return;
      i = q_items[head[q]];
      if (pending[i] != 0 || (port_need[i] & port_busy) != 0) return;
      // blocks of the PE array still held by a tiled matmul: start when they are free
      if (pe_mask[i] != 0)
        for (std::size_t gg = 0; gg < 16; ++gg)
          if ((pe_mask[i] >> gg & 1u) && pe_free_at[gg] > pe_at) {
            pe_at = pe_free_at[gg];
            pe_by = pe_last[gg];
          }
      if (pe_at > now) {
        push(pe_at, kRetry, static_cast<std::uint32_t>(q));
        return;
      }
      ++head[q];
    }
    qbusy[q] = 1;
    r.start_ns[i] = now;
    // What held this instruction back last: a dependency, its queue, or a shared port.
    std::uint32_t g = dep_gate[i];
    double gt = ready_at[i];
    if (q_last[q] != kNone && q_free_at[q] > gt) {
      gt = q_free_at[q];
      g = q_last[q];
    }
    for (const std::uint8_t b : kPorts)
      if ((port_need[i] & b) && port_last[b] != kNone && port_free_at[b] > gt) {
        gt = port_free_at[b];
        g = port_last[b];
      }
    if (pe_by != kNone && pe_at > gt) {
      gt = pe_at;
      g = pe_by;
    }
    gate[i] = g;
    port_busy |= port_need[i];
    // A matmul whose operands arrived after the Tensor engine went idle could not have its
    // stationary loaded behind the previous multiply: it pays the load now.
    double issue = occ[i];
    if (load_ns[i] > 0 && (q_last[q] == kNone || ready_at[i] > q_free_at[q])) issue += load_ns[i];
    if (pe_mask[i] != 0)
      for (std::size_t gg = 0; gg < 16; ++gg)
        if (pe_mask[i] >> gg & 1u) {
          pe_free_at[gg] = now + issue + pe_hold[i];
          pe_last[gg] = static_cast<std::uint32_t>(i);
        }
    if (is_dma[i]) push(now + occ[i], kXferStart, i);
    else push(now + issue, kIssueEnd, i);
  };

  for (std::size_t q = 0; q < unq; ++q) try_start(q);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), EventLater{});
    const Event ev = heap.back();
    heap.pop_back();
    now = ev.t;
    switch (ev.kind) {
      case kIssueEnd: {
        const std::uint32_t i = ev.arg;
        const std::size_t q = r.queue[i];
        r.issue_end_ns[i] = now;
        r.queue_busy_ns[q] += now - r.start_ns[i];
        qbusy[q] = 0;
        q_free_at[q] = now;
        q_last[q] = i;
        push(is_dma[i] && dma_overlap ? std::max(now + lat[i], r.start_ns[i] + dma_fixed) : now + lat[i], kDone, i);
        for (std::uint32_t k = on_issue.begin[i]; k < on_issue.begin[i + 1]; ++k) {
          const std::uint32_t s = on_issue.items[k];
          if (--ipend[s] == 0 && pending[s] == 0) make_ready(s);
        }
        if (port_need[i]) {
          port_busy &= static_cast<std::uint8_t>(~port_need[i]);
          for (const std::uint8_t b : kPorts)
            if (port_need[i] & b) {
              port_free_at[b] = now;
              port_last[b] = i;
            }
          try_start(q);
          for (std::size_t e = 0; e < static_cast<std::size_t>(target::kNumEngines); ++e)
            if (e != q) try_start(e);
        } else {
          try_start(q);
        }
        break;
      }
      case kDone: {
        const std::uint32_t i = ev.arg;
        r.done_ns[i] = now;
        const auto release = [&](std::uint32_t s, std::uint32_t by) {
          if (now >= ready_at[s]) {
            ready_at[s] = now;
            dep_gate[s] = by;
          }
          if (--pending[s] == 0) {
            if (is_dma[s] && ipend[s] == 0) make_ready(s);
            try_start(r.queue[s]);
          }
        };
        for (std::uint32_t k = on_done.begin[i]; k < on_done.begin[i + 1]; ++k) release(on_done.items[k], i);
        if (!is_done.empty()) {
          is_done[i] = 1;
          const std::size_t q = r.queue[i];
          while (done_prefix[q] < q_begin[q + 1] && is_done[q_items[done_prefix[q]]] != 0) {
            const std::uint32_t x = q_items[done_prefix[q]++];
            for (std::uint32_t k = on_drain.begin[x]; k < on_drain.begin[x + 1]; ++k) release(on_drain.items[k], i);
          }
        }
        break;
      }
      case kXferStart: {
        const std::uint32_t i = ev.arg;
        xfer_begin();
        if (is_hbm[i]) {
          dma_pass(false, false);  // served up to now at the old rates
          if (alike && !is_wide[i]) unfold();
          if (!is_wide[i]) ++narrow_xfers;
          const auto add_part = [&](std::size_t e, double b) {
            DmaEngine& g = eng[e];
            const auto h = heap_of(e);
            h[g.count] = {g.served + b, i};
            std::push_heap(h, h + ++g.count, part_later);
            g.payload += payload_share[i];
            ++parts_open[i];
          };
          if (is_wide[i]) {
            const double b = xfer_bytes[i] / static_cast<double>(eng.size());
            if (b > 0)
              for (std::size_t e = 0, ne = alike ? 1 : eng.size(); e < ne; ++e) add_part(e, b);  // alike: engine 0 for all
          } else {
            for (std::uint32_t k = part_begin[i]; k < part_begin[i + 1]; ++k)
              if (const double b = part_w[k] * xfer_bytes[i]; b > 0) add_part(part_eng[k], b);
          }
          if (parts_open[i] == 0) {  // no bytes
            if (!is_wide[i]) --narrow_xfers;
            push(now, kXferEnd, i);
          }
          dma_pass(false, true);
        } else {
          push(now + xfer_bytes[i] / q_bw, kXferEnd, i);  // on-chip copy: its own engines' bandwidth
        }
        break;
      }
      case kXferEnd:
        xfer_end();
        push(now, kIssueEnd, ev.arg);
        break;
      case kRetry:
        try_start(ev.arg);
        break;
      case kDmaCheck:
        if (ev.arg != dma_version) break;  // the rates changed since it was planned
        dma_pass(true, true);
        if (!alike && narrow_xfers == 0) try_fold();
        break;
      default: break;
    }
  }
  for (std::size_t q = 0; q < unq; ++q) {
    const bool dmaq = q >= static_cast<std::size_t>(kFirstDmaQueue);
    if (dmaq ? nstarted[q] != q_begin[q + 1] - q_begin[q] : head[q] != q_begin[q + 1])
      throw Error(fmt::format("simulate: program {} deadlocked at instruction {} (a dependency cycle)", p.kernel_name,
                              dmaq ? q_items[q_begin[q]] : q_items[head[q]]));
  }

  // ---- results ----
  std::uint32_t last = kNone;
  for (std::size_t i = 0; i < n; ++i)
    if (last == kNone || r.done_ns[i] >= r.latency_ns) {
      last = static_cast<std::uint32_t>(i);
      r.latency_ns = r.done_ns[i];
    }
  for (int e = 0; e < target::kNumEngines; ++e) r.engine_busy_ns[static_cast<std::size_t>(e)] = r.queue_busy_ns[static_cast<std::size_t>(e)];
  double hi = r.latency_ns;
  std::size_t steps = 0;
  for (std::uint32_t i = last; i != kNone && steps <= n; i = gate[i], ++steps) {
    const double c = std::max(0.0, std::min(r.done_ns[i], hi) - r.start_ns[i]);
    const std::size_t cls = r.queue[i] >= kFirstDmaQueue ? static_cast<std::size_t>(target::kNumEngines) : r.queue[i];
    r.critical_ns[cls] += c;
    hi = std::min(hi, r.start_ns[i]);
  }
  static constexpr const char* kNames[] = {"tensor", "vector", "scalar", "gpsimd", "dma"};
  std::size_t best = 0;
  for (std::size_t k = 1; k < r.critical_ns.size(); ++k)
    if (r.critical_ns[k] > r.critical_ns[best]) best = k;
  r.bottleneck = n == 0 ? "none" : kNames[best];
  std::vector<double> bfirst(p.buffers.size(), INFINITY), blast(p.buffers.size(), -INFINITY);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < 4; ++k) {
      const std::int32_t b = ibuf[4 * i + k];
      if (b < 0) continue;
      bfirst[static_cast<std::size_t>(b)] = std::min(bfirst[static_cast<std::size_t>(b)], r.start_ns[i]);
      blast[static_cast<std::size_t>(b)] = std::max(blast[static_cast<std::size_t>(b)], r.done_ns[i]);
    }
  for (const detail::Occupancy& o : detail::occupancy(p, bfirst, blast)) {
    if (o.mem == Memory::sbuf) r.peak_sbuf_bytes_per_partition = o.peak;
    else r.peak_psum_bytes_per_partition = o.peak;
  }
  return r;
}

}  // namespace kevo::runner
