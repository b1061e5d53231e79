#include "kevo/target/target.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "builtin.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "kevo/core/json_doc.hpp"

namespace kevo::target {

std::string_view to_string(Engine e) noexcept {
  switch (e) {
    case Engine::tensor: return "tensor";
    case Engine::vector: return "vector";
    case Engine::scalar: return "scalar";
    case Engine::gpsimd: return "gpsimd";
  }
  return "?";
}

double Target::peak_tensor_flops(ir::DType t) const noexcept {
  switch (t) {
    case ir::DType::fp32: return peak_tensor_flops_fp32;
    case ir::DType::fp8_e4m3:
    case ir::DType::fp8_e4m3fn: return peak_tensor_flops_fp8;
    case ir::DType::bf16:
    case ir::DType::fp16: return peak_tensor_flops_bf16;
  }
  return peak_tensor_flops_bf16;
}

bool runs_tensor_scalar(const EngineSpec& e, ir::Fn op0, const ir::Fn* op1) noexcept {
  switch (e.tensor_scalar_ops) {
    case EngineSpec::TensorScalarOps::all: return true;
    case EngineSpec::TensorScalarOps::mul_add:
      return (op0 == ir::Fn::mul && (op1 == nullptr || *op1 == ir::Fn::add)) || (op0 == ir::Fn::add && op1 == nullptr);
    case EngineSpec::TensorScalarOps::rsqrt: return op0 == ir::Fn::rsqrt && op1 == nullptr;
    case EngineSpec::TensorScalarOps::unary:
      return (op0 == ir::Fn::rsqrt || op0 == ir::Fn::reciprocal || op0 == ir::Fn::abs) && op1 == nullptr;
  }
  return false;
}

std::uint64_t Target::hash() const {
  StableHasher h;
  h.str(name).str(generation).u64(host ? 1 : 0);
  h.i64(partitions).i64(sbuf_bytes_per_partition).i64(psum_bytes_per_partition).i64(psum_banks).i64(psum_bank_bytes);
  h.i64(pmax).i64(stationary_fmax).i64(moving_fmax).i64(sbuf_free_max_elems).i64(psum_free_max_elems);
  for (const auto& e : engines)
    h.f64(e.clock_ghz).f64(e.elems_per_cycle_16bit).f64(e.elems_per_cycle_32bit).f64(e.fixed_overhead_cycles).f64(e.min_ii_cycles);
  h.f64(matmul_min_cycles).f64(matmul_fp32_factor).f64(matmul_fixed_cycles).f64(transpose_factor).u64(port_conflicts ? 1 : 0);
  h.i64(row_tile_min);
  if (!matmul_accumulate_after_memset) h.str("matmul.accumulate_after_memset=false");  // (targets that allow it hash as before)
  for (int e = 0; e < kNumEngines; ++e)
    if (!engines[static_cast<std::size_t>(e)].tensor_copy) h.str("engines.tensor_copy=false").i64(e);
  for (int e = 0; e < kNumEngines; ++e)
    if (!engines[static_cast<std::size_t>(e)].reciprocal_bias) h.str("engines.reciprocal_bias=false").i64(e);
  for (int e = 0; e < kNumEngines; ++e) {  // (defaults hash as before)
    const auto& es = engines[static_cast<std::size_t>(e)];
    if (!es.immediate_bias) h.str("engines.immediate_bias=false").i64(e);
    if (es.tensor_scalar_ops != EngineSpec::TensorScalarOps::all)
      h.str("engines.tensor_scalar_ops").i64(e).i64(static_cast<int>(es.tensor_scalar_ops));
  }
  h.i64(dma_queues).f64(dma_queue_bytes_per_ns).f64(hbm_bytes_per_ns).f64(dma_fixed_ns).f64(dma_descriptor_ns);
  h.i64(dma_descriptor_min_bytes).f64(dma_transpose_efficiency);
  if (!dma_transposes) h.str("dma.transposes=false");  // (targets whose engines transpose hash as before)
  if (dma_transpose_block_elems > 0) h.str("dma.transpose_block_elems").i64(dma_transpose_block_elems);
  h.f64(peak_tensor_flops_bf16).f64(peak_tensor_flops_fp8).f64(peak_tensor_flops_fp32).f64(peak_vector_flops);
  if (!dtypes.empty()) {  // (targets that store every dtype hash as before)
    h.str("dtypes").u64(dtypes.size());
    for (const auto d : dtypes) h.str(ir::to_string(d));
  }
  h.u64(sources.size());
  for (const auto& s : sources) h.str(s);
  h.u64(sim_params.size());
  for (const auto& [k, v] : sim_params) h.str(k).f64(v);
  h.str(sim_fitted_by).str(sim_source);
  return h.digest();
}

namespace {

using jsondoc::kind_name;
using jsondoc::Located;
using jsondoc::Node;
using jsondoc::Obj;

constexpr double kBig = 1e30;

Target read_target(const Node& root) {
  Target t;
  std::vector<std::string> top_keys = {"name",          "generation", "host", "memory",     "tile_limits", "engines",
                                       "matmul",        "port_conflicts", "dma", "peak_flops", "sources"};
  // "sim" and "dtypes" are optional: the simulator's parameters for this generation, the dtypes it stores.
  for (const auto& m : root.members)
    if (m.first == "sim" || m.first == "dtypes") top_keys.emplace_back(m.first);
  // A GPU target that lost its "kind" (or misspelt it) reaches this reader: say so rather than
  // list the NeuronCore fields it lacks.
  for (std::size_t i = 0; i < root.members.size(); ++i) {
    const auto& [k, v] = root.members[i];
    if (k == "kind")
      throw Located{v.pos, "'kind' is only for GPU targets, where it must be \"gpu\" (a NeuronCore target has no 'kind')"};
    if (k == "sm_count")
      throw Located{root.key_pos[i], "'sm_count' belongs to a GPU target: add \"kind\": \"gpu\" (docs/GPU.md)"};
  }
  Obj top(root, "", top_keys, {}, "the target");
  t.name = top.name("name");
  t.generation = top.name("generation");
  t.host = top.boolean("host");

  Obj mem(top.at("memory"), "memory",
          {"partitions", "sbuf_bytes_per_partition", "psum_bytes_per_partition", "psum_banks", "psum_bank_bytes"});
  t.partitions = static_cast<int>(mem.integer("partitions", 1, 1024));
  t.sbuf_bytes_per_partition = mem.integer("sbuf_bytes_per_partition", 1024, std::int64_t{1} << 40);
  t.psum_bytes_per_partition = mem.integer("psum_bytes_per_partition", 0, std::int64_t{1} << 40);
  t.psum_banks = static_cast<int>(mem.integer("psum_banks", 1, 64));
  t.psum_bank_bytes = mem.integer("psum_bank_bytes", 64, std::int64_t{1} << 30);
  if (t.psum_banks * t.psum_bank_bytes > t.psum_bytes_per_partition)
    throw Located{mem.at("psum_banks").pos,
                  fmt::format("'memory.psum_banks' x 'memory.psum_bank_bytes' = {} exceeds 'memory.psum_bytes_per_partition' = {}",
                              t.psum_banks * t.psum_bank_bytes, t.psum_bytes_per_partition)};

  Obj lim(top.at("tile_limits"), "tile_limits",
          {"pmax", "stationary_fmax", "moving_fmax", "sbuf_free_max_elems", "psum_free_max_elems"});
  t.pmax = static_cast<int>(lim.integer("pmax", 1, t.partitions));
  t.stationary_fmax = static_cast<int>(lim.integer("stationary_fmax", 1, 1 << 20));
  t.moving_fmax = static_cast<int>(lim.integer("moving_fmax", 1, 1 << 20));
  t.sbuf_free_max_elems = lim.integer("sbuf_free_max_elems", 1, std::int64_t{1} << 40);
  t.psum_free_max_elems = lim.integer("psum_free_max_elems", 1, std::int64_t{1} << 40);

  Obj eng(top.at("engines"), "engines", {"tensor", "vector", "scalar", "gpsimd"});
  const char* names[kNumEngines] = {"tensor", "vector", "scalar", "gpsimd"};
  for (int e = 0; e < kNumEngines; ++e) {
    Obj es(eng.at(names[e]), eng.sub(names[e]),
           {"clock_ghz", "elems_per_cycle_16bit", "elems_per_cycle_32bit", "fixed_overhead_cycles", "min_ii_cycles"},
           {"tensor_copy", "reciprocal_bias", "immediate_bias", "tensor_scalar_ops"});
    auto& s = t.engines[e];
    s.clock_ghz = es.number("clock_ghz", 1e-3, 1e3);
    s.elems_per_cycle_16bit = es.number("elems_per_cycle_16bit", 1e-6, 1e6);
    s.elems_per_cycle_32bit = es.number("elems_per_cycle_32bit", 1e-6, 1e6);
    s.fixed_overhead_cycles = es.number("fixed_overhead_cycles", 0, 1e9);
    s.min_ii_cycles = es.number("min_ii_cycles", 0, 1e9);
    if (es.has("tensor_copy")) s.tensor_copy = es.boolean("tensor_copy");
    if (es.has("reciprocal_bias")) s.reciprocal_bias = es.boolean("reciprocal_bias");
    if (es.has("immediate_bias")) s.immediate_bias = es.boolean("immediate_bias");
    if (es.has("tensor_scalar_ops")) {
      const std::string v = es.string("tensor_scalar_ops");
      if (v == "all") s.tensor_scalar_ops = EngineSpec::TensorScalarOps::all;
      else if (v == "mul_add") s.tensor_scalar_ops = EngineSpec::TensorScalarOps::mul_add;
      else if (v == "rsqrt") s.tensor_scalar_ops = EngineSpec::TensorScalarOps::rsqrt;
      else if (v == "unary") s.tensor_scalar_ops = EngineSpec::TensorScalarOps::unary;
      else
        throw Located{es.at("tensor_scalar_ops").pos,
                      fmt::format("'{}' = \"{}\" must be \"all\", \"mul_add\", \"rsqrt\" or \"unary\"", es.sub("tensor_scalar_ops"), v)};
    }
  }

  Obj mm(top.at("matmul"), "matmul", {"min_cycles", "fp32_factor", "fixed_cycles", "transpose_factor"},
         {"row_tile_min", "accumulate_after_memset"});
  t.matmul_min_cycles = mm.number("min_cycles", 0, 1e9);
  t.matmul_fp32_factor = mm.number("fp32_factor", 1e-3, 1e3);
  t.matmul_fixed_cycles = mm.number("fixed_cycles", 0, 1e9);
  t.transpose_factor = mm.number("transpose_factor", 1e-3, 1e3);
  if (mm.has("accumulate_after_memset")) t.matmul_accumulate_after_memset = mm.boolean("accumulate_after_memset");
  if (mm.has("row_tile_min")) {
    t.row_tile_min = static_cast<int>(mm.integer("row_tile_min", 0, 64));
    if (t.row_tile_min != 0 && t.row_tile_min != 32 && t.row_tile_min != 64)
      throw Located{mm.at("row_tile_min").pos, fmt::format("'matmul.row_tile_min' = {} must be 0, 32 or 64", t.row_tile_min)};
  }
  t.port_conflicts = top.boolean("port_conflicts");

  Obj dma(top.at("dma"), "dma",
          {"queues", "queue_bytes_per_ns", "hbm_bytes_per_ns", "fixed_ns", "descriptor_ns", "descriptor_min_bytes",
           "transpose_efficiency"},
          {"transposes", "transpose_block_elems"});
  // DMA engines per core: 16 on every NeuronCore generation; the simulator takes up to 64
  t.dma_queues = static_cast<int>(dma.integer("queues", 1, 64));
  t.dma_queue_bytes_per_ns = dma.number("queue_bytes_per_ns", 1e-3, 1e4);
  t.hbm_bytes_per_ns = dma.number("hbm_bytes_per_ns", 1e-3, 1e6);
  t.dma_fixed_ns = dma.number("fixed_ns", 0, 1e7);
  t.dma_descriptor_ns = dma.number("descriptor_ns", 0, 1e4);
  t.dma_descriptor_min_bytes = dma.integer("descriptor_min_bytes", 0, std::int64_t{1} << 40);
  t.dma_transpose_efficiency = dma.number("transpose_efficiency", 1e-6, 1.0);
  if (dma.has("transposes")) t.dma_transposes = dma.boolean("transposes");
  if (dma.has("transpose_block_elems")) t.dma_transpose_block_elems = static_cast<int>(dma.integer("transpose_block_elems", 0, 4096));

  Obj pk(top.at("peak_flops"), "peak_flops", {"tensor_bf16", "tensor_fp8", "tensor_fp32", "vector"});
  t.peak_tensor_flops_bf16 = pk.number("tensor_bf16", 1, kBig);
  t.peak_tensor_flops_fp8 = pk.number("tensor_fp8", 1, kBig);
  t.peak_tensor_flops_fp32 = pk.number("tensor_fp32", 1, kBig);
  t.peak_vector_flops = pk.number("vector", 1, kBig);

  if (std::find(top_keys.begin(), top_keys.end(), "dtypes") != top_keys.end()) {
    const Node& dn = top.at("dtypes");
    if (dn.kind != Node::Kind::array || dn.items.empty())
      throw Located{dn.pos, fmt::format("'dtypes' must be a non-empty array of dtype names ({})", ir::dtype_names())};
    for (const Node& d : dn.items) {
      const auto dt = d.kind == Node::Kind::string ? ir::dtype_from_string(d.s) : std::nullopt;
      if (!dt) throw Located{d.pos, fmt::format("'dtypes': expected one of {}", ir::dtype_names())};
      if (std::find(t.dtypes.begin(), t.dtypes.end(), *dt) != t.dtypes.end())
        throw Located{d.pos, fmt::format("'dtypes': '{}' is given twice", d.s)};
      t.dtypes.push_back(*dt);
    }
  }

  const Node& src = top.at("sources");
  if (src.kind != Node::Kind::object)
    throw Located{src.pos, fmt::format("'sources' must be an object of \"field group\": \"source\" strings, found {}",
                                       kind_name(src.kind))};
  if (src.members.empty()) throw Located{src.pos, "'sources' must name the source of the figures"};
  for (std::size_t i = 0; i < src.members.size(); ++i) {
    const auto& [k, v] = src.members[i];
    if (v.kind != Node::Kind::string)
      throw Located{v.pos, fmt::format("'sources.{}' must be a string, found {}", k, kind_name(v.kind))};
    t.sources.push_back(k + ": " + v.s);
  }

  if (std::find(top_keys.begin(), top_keys.end(), "sim") != top_keys.end()) {
    Obj sim(top.at("sim"), "sim", {"params", "fitted_by", "source"});
    t.sim_fitted_by = sim.string("fitted_by");
    t.sim_source = sim.string("source");
    const Node& ps = sim.at("params");
    if (ps.kind != Node::Kind::object)
      throw Located{ps.pos, fmt::format("'sim.params' must be an object of \"name\": number, found {}", kind_name(ps.kind))};
    for (std::size_t i = 0; i < ps.members.size(); ++i) {
      const auto& [k, v] = ps.members[i];
      if (std::find(std::begin(kSimParamNames), std::end(kSimParamNames), k) == std::end(kSimParamNames))
        throw Located{ps.key_pos[i], fmt::format("unknown simulator parameter '{}' in 'sim.params' (known: {})", k,
                                                 fmt::join(kSimParamNames, ", "))};
      for (std::size_t j = 0; j < i; ++j)
        if (ps.members[j].first == k) throw Located{ps.key_pos[i], fmt::format("duplicate field '{}' in 'sim.params'", k)};
      if (v.kind != Node::Kind::integer && v.kind != Node::Kind::number)
        throw Located{v.pos, fmt::format("'sim.params.{}' must be a number, found {}", k, kind_name(v.kind))};
      const auto r = sim_param_range(k);
      if (!std::isfinite(v.num) || v.num < r.lo || v.num > r.hi)
        throw Located{v.pos, fmt::format("'sim.params.{}' = {} is outside its physical range [{:g}, {:g}]", k, v.num, r.lo, r.hi)};
      t.sim_params.emplace_back(k, v.num);
    }
  }
  return t;
}

}  // namespace

Expected<Target, Diagnostic> parse_target(std::string_view json, std::string file) {
  return jsondoc::read(json, std::move(file), read_target);
}

std::vector<std::string> builtin_targets() {
  std::vector<std::string> out;
  for (const auto& b : detail::builtin_table()) out.emplace_back(b.name);
  return out;
}

std::string builtin_target_json(std::string_view name) {
  for (const auto& b : detail::builtin_table())
    if (b.name == name) return std::string(b.json);
  return {};
}

Expected<Target, Diagnostic> load_target(std::string_view name_or_path) {
  for (const auto& b : detail::builtin_table())
    if (b.name == name_or_path) {
      auto t = parse_target(b.json, fmt::format("<built-in {}.json>", b.name));
      if (!t) throw Error("kevo: built-in target " + std::string(b.name) + " is broken: " + t.error().str());
      return t;
    }
  const std::filesystem::path p{std::string(name_or_path)};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) {
    Diagnostic d;
    d.loc.file = std::string(name_or_path);
    d.message = fmt::format("no such target: not a built-in ({}) and not a readable .json file",
                            fmt::join(builtin_targets(), ", "));
    return unexpected(std::move(d));
  }
  std::string text;
  try {
    text = read_file(p);
  } catch (const Error& e) {
    Diagnostic d;
    d.loc.file = std::string(name_or_path);
    d.message = e.what();
    return unexpected(std::move(d));
  }
  return parse_target(text, p.string());
}

}  // namespace kevo::target
