#include "kevo/gpu/space.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace kevo::gpu {

std::int64_t TritonSchedule::get(std::string_view name, std::int64_t fallback) const {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return fallback;
}
std::string TritonSchedule::label(std::string_view name, std::string_view fallback) const {
  for (const auto& [k, v] : labels)
    if (k == name) return v;
  return std::string(fallback);
}

namespace {

std::int64_t next_pow2(std::int64_t x) {
  std::int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// Sets gene `name` of g to the choice whose value (ordinal) or label (categorical) matches.
void set(const Space& s, Genome& g, std::string_view name, std::int64_t value) {
  const auto i = s.find(name);
  if (!i) return;
  const Gene& gene = s.gene(*i);
  for (std::size_t c = 0; c < gene.choices(); ++c)
    if (gene.values.at(c) == value) s.slots(g, *i)[0] = static_cast<std::int32_t>(c);
}
void set_label(const Space& s, Genome& g, std::string_view name, std::string_view label) {
  const auto i = s.find(name);
  if (!i) return;
  const Gene& gene = s.gene(*i);
  for (std::size_t c = 0; c < gene.choices(); ++c)
    if (gene.labels[c] == label) s.slots(g, *i)[0] = static_cast<std::int32_t>(c);
}

}  // namespace

TritonSpace TritonSpace::derive(const GpuKernel& k, const GpuTarget& t) {
  TritonSpace s;
  s.k_ = k;
  s.t_ = t;
  Space& sp = s.space_;
  switch (k.family) {
    case Family::matmul:
      sp.add(Gene::ordinal("block_m", {64, 128, 256}, "tile"));
      sp.add(Gene::ordinal("block_n", {64, 128, 256}, "tile"));
      sp.add(Gene::ordinal("block_k", {32, 64, 128}, "tile"));
      sp.add(Gene::ordinal("warps", {4, 8}, "launch"));
      sp.add(Gene::ordinal("stages", {2, 3, 4, 5}, "launch"));
      sp.add(Gene::ordinal("group_m", {1, 4, 8, 16}, "order"));
      sp.add(Gene::ordinal("split_k", {1, 2, 4}, "order"));
      sp.add(Gene::categorical("program", {"tile", "persistent"}, "order"));
      if (k.has_epilogue()) sp.add(Gene::categorical("epilogue", {"fused", "separate"}, "epilogue"));
      // operand layouts: each operand read as stored, or from a transposed contiguous copy that
      // launch() makes on every call (the copy is inside the timed call: its cost is counted)
      sp.add(Gene::categorical("a_layout", {"as_stored", "transposed_copy"}, "layout"));
      sp.add(Gene::categorical("b_layout", {"as_stored", "transposed_copy"}, "layout"));
      break;
    case Family::row: {
      std::vector<std::int64_t> blocks;
      const std::int64_t top = std::min<std::int64_t>(next_pow2(k.C), 65536);
      for (std::int64_t b = std::min<std::int64_t>(1024, top); b <= top; b *= 2) blocks.push_back(b);
      sp.add(Gene::ordinal("block_c", blocks, "tile"));
      sp.add(Gene::ordinal("rows", {1, 2, 4}, "tile"));
      sp.add(Gene::ordinal("warps", {2, 4, 8, 16, 32}, "launch"));
      // 1: the row in registers (block_c holds it); 2: statistics, then the output, each a loop over
      // block_c-column chunks -- with block_c holding the row, pass 2 reloads it (from L2 with
      // cache=keep), which is what Inductor launches for an 8192-wide RMSNorm
      sp.add(Gene::ordinal("passes", {1, 2}, "tile"));
      // software pipelining of the chunk loops (two passes only; Inductor's reductions use 1)
      sp.add(Gene::ordinal("stages", {1, 2, 3}, "launch"));
      // eviction hints on X's loads. stream: X's last read evicts first, gamma/beta evict last
      // (every row rereads them); keep (Inductor's looped reductions): pass 1 reads X evict_last
      // so that pass 2 finds the row in L2, pass 2 reads it evict_first.
      sp.add(Gene::categorical("cache", {"normal", "stream", "keep"}, "launch"));
      // the output's stores: normal, or streaming (cache_modifier ".cs": evict first, Y is not reread)
      sp.add(Gene::categorical("store", {"normal", "stream"}, "launch"));
      // one program per ROWS rows, or one program per resident slot looping over row groups
      sp.add(Gene::categorical("program", {"row", "persistent"}, "order"));
      break;
    }
    case Family::attention:
      sp.add(Gene::ordinal("block_m", {64, 128}, "tile"));
      sp.add(Gene::ordinal("block_n", {32, 64, 128}, "tile"));
      sp.add(Gene::ordinal("warps", {4, 8}, "launch"));
      sp.add(Gene::ordinal("stages", {1, 2, 3, 4}, "launch"));
      if (k.causal) sp.add(Gene::categorical("order", {"heavy_first", "in_order"}, "order"));
      break;
  }
  return s;
}

TritonSchedule TritonSpace::decode(const Genome& g) const {
  TritonSchedule r;
  for (std::size_t i = 0; i < space_.size(); ++i) {
    const Gene& gene = space_.gene(i);
    const auto c = static_cast<std::size_t>(space_.at(g, i));
    r.values.emplace_back(gene.name, gene.kind == GeneKind::ordinal ? gene.values.at(c) : static_cast<std::int64_t>(c));
    r.labels.emplace_back(gene.name, gene.labels.at(c));
  }
  return r;
}

namespace {

// The first reason the genome cannot run, in the order of the checks below; nullopt if none.
std::optional<Invalid> first_invalid(const TritonSpace& sp, const Genome& g) {
  const Space& space = sp.space();
  const GpuKernel& k = sp.kernel();
  const GpuTarget& t = sp.target();
  if (!space.contains(g)) return Invalid{"outside_space", "the genome does not fit this space"};
  const TritonSchedule s = sp.decode(g);
  const auto bytes = static_cast<std::int64_t>(ir::dtype_bytes(k.dtype));
  const std::int64_t warps = s.get("warps");
  const std::int64_t threads = warps * t.warp_size;
  if (threads > t.threads_per_block_max)
    return Invalid{"too_many_threads", fmt::format("{} warps = {} threads > {}", warps, threads, t.threads_per_block_max)};
  if (k.family == Family::matmul) {
    const std::int64_t bm = s.get("block_m"), bn = s.get("block_n"), bk = s.get("block_k");
    const std::int64_t st = s.get("stages"), sk = s.get("split_k");
    const std::int64_t smem = st * (bm * bk + bk * bn) * bytes;
    if (smem > t.smem_bytes_per_block)
      return Invalid{"smem_overflow", fmt::format("{} stages x ({}x{} + {}x{}) x {} B = {} B > {} B per block", st, bm, bk, bk, bn,
                                                  bytes, smem, t.smem_bytes_per_block)};
    const std::int64_t acc = bm * bn / threads;
    if (acc > 128)
      return Invalid{"register_overflow", fmt::format("a {}x{} fp32 accumulator over {} threads is {} registers per thread (> 128 of {})",
                                                      bm, bn, threads, acc, t.registers_per_thread_max)};
    if (bm > std::max<std::int64_t>(64, next_pow2(k.M)) || bn > std::max<std::int64_t>(64, next_pow2(k.N)))
      return Invalid{"block_exceeds_dim", fmt::format("block {}x{} exceeds the {}x{} output", bm, bn, k.M, k.N)};
    if (k.K % (sk * bk) != 0)
      return Invalid{"split_k_indivisible", fmt::format("K = {} is not a multiple of split_k x block_k = {}", k.K, sk * bk)};
    if (sk > 1 && s.label("program") == "persistent")
      return Invalid{"persistent_split_k", "persistent programs loop over whole output tiles; split-K needs one program per K slice"};
    if (sk > 1 && k.has_epilogue() && s.label("epilogue") == "fused")
      return Invalid{"split_k_epilogue", "with split-K the epilogue runs after the partial sums are added (epilogue=separate)"};
  } else if (k.family == Family::row) {
    const std::int64_t bc = s.get("block_c"), rows = s.get("rows");
    const std::int64_t live = rows * std::min(bc, next_pow2(k.C)) / threads;
    if (live > 64)
      return Invalid{"register_overflow", fmt::format("{} rows x {} columns over {} threads keep {} fp32 values per thread live (> 64)",
                                                      rows, bc, threads, live)};
    if (k.R % rows != 0) return Invalid{"rows_indivisible", fmt::format("R = {} is not a multiple of rows = {}", k.R, rows)};
    if (live < 1) return Invalid{"idle_threads", fmt::format("{} rows x {} columns leave threads of {} warps idle", rows, bc, warps)};
    const bool one_pass = s.get("passes", 1) == 1;
    if (one_pass && bc < k.C)
      return Invalid{"row_split", fmt::format("one pass keeps the whole row in registers, but block_c = {} < C = {} (passes=2 loops over "
                                              "chunks)", bc, k.C)};
    if (one_pass && s.label("cache") == "keep")
      return Invalid{"keep_one_pass", "cache=keep holds X in L2 for a second pass; passes=1 reads the row once"};
    if (one_pass && s.get("stages", 1) != 1)
      return Invalid{"stages_one_pass", fmt::format("stages = {} pipelines a chunk loop; passes=1 has no loop", s.get("stages"))};
    if (s.label("program") == "persistent" && k.R / rows <= persistent_row_programs(t, warps))
      return Invalid{"persistent_no_loop", fmt::format("{} row groups fit in one wave of {} resident programs: persistent programs would "
                                                       "not loop", k.R / rows, persistent_row_programs(t, warps))};
  } else {
    const std::int64_t bm = s.get("block_m"), bn = s.get("block_n"), st = s.get("stages");
    if (k.S % bm != 0 || k.S % bn != 0)
      return Invalid{"indivisible", fmt::format("S = {} is not a multiple of block_m = {} and block_n = {}", k.S, bm, bn)};
    if (k.causal && bm % bn != 0)
      return Invalid{"causal_blocks", fmt::format("the causal diagonal needs block_m ({}) a multiple of block_n ({})", bm, bn)};
    const std::int64_t smem = (bm * k.D + st * 2 * bn * k.D) * bytes;
    if (smem > t.smem_bytes_per_block)
      return Invalid{"smem_overflow", fmt::format("Q {}x{} + {} stages x K,V {}x{} x {} B = {} B > {} B per block", bm, k.D, st, bn,
                                                  k.D, bytes, smem, t.smem_bytes_per_block)};
    const std::int64_t regs = (bm * k.D + bm * bn) / threads;
    if (regs > 192)
      return Invalid{"register_overflow", fmt::format("accumulator {}x{} + scores {}x{} over {} threads: {} fp32 registers per thread (> 192)",
                                                      bm, k.D, bm, bn, threads, regs)};
    if (k.D > 256 || (k.D & (k.D - 1)) != 0)
      return Invalid{"head_dim", fmt::format("D = {} is not a power of two up to 256", k.D)};
  }
  return std::nullopt;
}

}  // namespace

Expected<void, Invalid> TritonSpace::check(const Genome& g) const {
  if (auto bad = first_invalid(*this, g)) return unexpected(std::move(*bad));
  return {};
}

std::string TritonSpace::text(const Genome& g) const { return space_.describe(g); }

std::int64_t persistent_row_programs(const GpuTarget& t, std::int64_t warps) {
  const std::int64_t threads = std::max<std::int64_t>(1, warps * t.warp_size);
  return static_cast<std::int64_t>(t.sm_count) * std::max<std::int64_t>(1, t.threads_per_sm_max / threads);
}

Expected<Genome, std::string> TritonSpace::parse(std::string_view text) const { return parse_from(default_genome(), text); }

Expected<Genome, std::string> TritonSpace::parse_from(Genome g, std::string_view text) const {
  std::istringstream in{std::string(text)};
  std::string tok;
  while (in >> tok) {
    if (!tok.empty() && tok.back() == ';') tok.pop_back();
    if (tok.empty()) continue;
    const auto eq = tok.find('=');
    if (eq == std::string::npos) return unexpected(fmt::format("'{}' is not gene=value", tok));
    const std::string name = tok.substr(0, eq), label = tok.substr(eq + 1);
    const auto i = space_.find(name);
    if (!i) {
      std::string names;
      for (const auto& ge : space_.genes()) names += (names.empty() ? "" : ", ") + ge.name;
      return unexpected(fmt::format("no gene '{}' in this space (genes: {})", name, names));
    }
    const Gene& gene = space_.gene(*i);
    const auto it = std::find(gene.labels.begin(), gene.labels.end(), label);
    if (it == gene.labels.end())
      return unexpected(fmt::format("gene {} has no value '{}' (values: {})", name, label, fmt::join(gene.labels, ", ")));
    space_.slots(g, *i)[0] = static_cast<std::int32_t>(it - gene.labels.begin());
  }
  return g;
}

std::vector<Genome> TritonSpace::seeds() const {
  std::vector<Genome> r;
  auto add = [&](std::initializer_list<std::pair<const char*, std::int64_t>> values, const char* program = nullptr) {
    Genome g = space_.first();
    for (const auto& [n, v] : values) set(space_, g, n, v);
    if (program != nullptr) set_label(space_, g, "program", program);
    set_label(space_, g, "epilogue", "fused");
    set_label(space_, g, "order", "heavy_first");
    if (check(g) && std::find(r.begin(), r.end(), g) == r.end()) r.push_back(g);
  };
  switch (k_.family) {
    case Family::matmul:  // the shapes of Triton's matmul tutorial configurations that suit Hopper
      add({{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"warps", 8}, {"stages", 3}, {"group_m", 8}, {"split_k", 1}});
      add({{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 4}, {"group_m", 8}, {"split_k", 1}});
      add({{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"warps", 8}, {"stages", 3}, {"group_m", 8}, {"split_k", 1}}, "persistent");
      add({{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"warps", 4}, {"stages", 4}, {"group_m", 8}, {"split_k", 1}});
      add({{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 4}, {"stages", 4}, {"group_m", 8}, {"split_k", 1}});
      break;
    case Family::row: {
      auto add_text = [&](const std::string& text) {
        auto g = parse_from(space_.first(), text);
        if (g && check(*g) && std::find(r.begin(), r.end(), *g) == r.end()) r.push_back(*g);
      };
      const std::int64_t full = next_pow2(k_.C);
      // Inductor's launch for RMSNorm [8192, 8192] bf16 (torch 2.11): two passes over one whole-row
      // chunk, 16 warps, 1 stage, pass 1 evict_last, pass 2 reloading the row evict_first
      add_text(fmt::format("block_c={} passes=2 rows=1 warps=16 stages=1 cache=keep", full));
      add_text(fmt::format("block_c={} passes=2 rows=1 warps=8 stages=1 cache=keep", full));
      // one pass, the whole row in registers
      add_text(fmt::format("block_c={} rows=1 warps=8", full));
      add_text(fmt::format("block_c={} rows=1 warps=16", full));
      add_text(fmt::format("block_c={} rows=2 warps=16", full));
      add_text(fmt::format("block_c={} rows=1 warps=16 cache=stream store=stream", full));
      // two passes over 2048- and 4096-column chunks (Inductor's LayerNorm and softmax launches)
      add_text("block_c=2048 passes=2 rows=1 warps=8 stages=1 cache=keep");
      add_text("block_c=2048 passes=2 rows=1 warps=16 stages=1 cache=keep");
      add_text("block_c=4096 passes=2 rows=1 warps=16 stages=1 cache=keep");
      add_text(fmt::format("block_c={} rows=1 warps=16 cache=stream", full));
      break;
    }
    case Family::attention:
      add({{"block_m", 128}, {"block_n", 64}, {"warps", 4}, {"stages", 3}});
      add({{"block_m", 128}, {"block_n", 128}, {"warps", 8}, {"stages", 3}});
      add({{"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 3}});
      add({{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 3}});
      break;
  }
  return r;
}

Genome TritonSpace::default_genome() const {
  const auto s = seeds();
  if (!s.empty()) return s.front();
  return space_.first();
}

bool TritonSpace::repair(Genome& g) const {
  if (!space_.contains(g)) return false;
  auto step = [&](std::string_view name, int delta) {
    const auto i = space_.find(name);
    if (!i) return false;
    auto& v = space_.slots(g, *i)[0];
    const int nv = v + delta;
    if (nv < 0 || nv >= static_cast<int>(space_.gene(*i).choices())) return false;
    v = nv;
    return true;
  };
  for (int round = 0; round < 16; ++round) {
    const auto ok = check(g);
    if (ok) return true;
    const std::string& c = ok.error().code;
    bool moved = false;
    if (c == "smem_overflow") moved = step("stages", -1) || step("block_k", -1) || step("block_n", -1) || step("block_m", -1);
    else if (c == "register_overflow") moved = step("warps", +1) || step("block_n", -1) || step("rows", -1) || step("block_c", -1);
    else if (c == "split_k_indivisible" || c == "persistent_split_k" || c == "split_k_epilogue") {
      const auto i = space_.find("split_k");
      if (i && space_.slots(g, *i)[0] != 0) space_.slots(g, *i)[0] = 0, moved = true;
    } else if (c == "block_exceeds_dim") moved = step("block_m", -1) || step("block_n", -1);
    else if (c == "rows_indivisible") moved = step("rows", -1);
    else if (c == "idle_threads") moved = step("warps", -1);
    else if (c == "row_split") moved = step("passes", +1);
    else if (c == "keep_one_pass" || c == "stages_one_pass" || c == "persistent_no_loop") {
      const char* gene = c == "keep_one_pass" ? "cache" : (c == "stages_one_pass" ? "stages" : "program");
      const auto i = space_.find(gene);
      if (i && space_.slots(g, *i)[0] != 0) space_.slots(g, *i)[0] = 0, moved = true;
    }
    else if (c == "causal_blocks" || c == "indivisible") moved = step("block_n", -1);
    if (!moved) return false;
  }
  return check(g).has_value();
}

}  // namespace kevo::gpu
