#include "kevo/gpu/target.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/core/io.hpp"
#include "kevo/core/json_doc.hpp"

namespace kevo::gpu {
namespace detail {
const std::vector<std::pair<std::string_view, std::string_view>>& builtin_gpu_table();
}

double GpuTarget::peak(ir::DType t) const {
  const auto it = peak_flops.find(std::string(ir::to_string(t)));
  return it == peak_flops.end() ? 0.0 : it->second;
}

namespace {

using jsondoc::Located;
using jsondoc::Node;
using jsondoc::Obj;

GpuTarget read_gpu_target(const Node& root) {
  // The keys a GPU target may hold; those kevo does not use yet (blocks_per_sm_max, hbm_bytes,
  // tensor_core's instruction and other shapes) are documentation, read for their type only.
  Obj top(root, "",
          {"name", "kind", "sm_count", "smem_bytes_per_sm", "smem_bytes_per_block", "registers_per_sm",
           "registers_per_thread_max", "threads_per_sm_max", "threads_per_block_max", "warp_size", "l2_bytes",
           "hbm_bytes_per_s", "peak_flops", "sources"},
          {"description", "compute_capability", "blocks_per_sm_max", "hbm_bytes", "tensor_core"}, "the GPU target");
  if (const Node& k = top.at("kind"); k.kind != Node::Kind::string || k.s != "gpu")
    throw Located{k.pos, "'kind' must be \"gpu\""};
  GpuTarget t;
  t.name = top.name("name");
  if (top.has("description")) t.description = top.name("description");
  if (top.has("compute_capability")) t.compute_capability = top.name("compute_capability");
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  t.sm_count = static_cast<int>(top.integer("sm_count", 1, 1 << 16));
  t.smem_bytes_per_sm = top.integer("smem_bytes_per_sm", 1024, kGiB);
  t.smem_bytes_per_block = top.integer("smem_bytes_per_block", 1024, kGiB);
  if (t.smem_bytes_per_block > t.smem_bytes_per_sm)
    throw Located{top.at("smem_bytes_per_block").pos, "'smem_bytes_per_block' exceeds 'smem_bytes_per_sm'"};
  t.registers_per_sm = top.integer("registers_per_sm", 1024, kGiB);
  t.registers_per_thread_max = static_cast<int>(top.integer("registers_per_thread_max", 16, 1 << 16));
  t.threads_per_sm_max = static_cast<int>(top.integer("threads_per_sm_max", 32, 1 << 20));
  t.threads_per_block_max = static_cast<int>(top.integer("threads_per_block_max", 32, 1 << 20));
  t.warp_size = static_cast<int>(top.integer("warp_size", 1, 1024));
  if (t.threads_per_block_max > t.threads_per_sm_max)
    throw Located{top.at("threads_per_block_max").pos, "'threads_per_block_max' exceeds 'threads_per_sm_max'"};
  t.l2_bytes = top.integer("l2_bytes", 0, std::int64_t{1} << 40);
  if (top.has("blocks_per_sm_max")) (void)top.integer("blocks_per_sm_max", 1, 1 << 16);
  if (top.has("hbm_bytes")) (void)top.number("hbm_bytes", 1, 1e18);
  t.hbm_bytes_per_s = top.number("hbm_bytes_per_s", 1e6, 1e18);

  const Node& pk = top.at("peak_flops");
  if (pk.kind != Node::Kind::object || pk.members.empty())
    throw Located{pk.pos, "'peak_flops' must be a non-empty object of dtype -> FLOP/s"};
  std::vector<std::string> dtypes;
  for (const auto& [k, v] : pk.members) dtypes.push_back(k);
  Obj peaks(pk, "peak_flops", dtypes);  // refuses a dtype given twice
  for (const auto& d : dtypes) t.peak_flops[d] = peaks.number(d, 1, 1e20);

  if (top.has("tensor_core")) {
    Obj tc(top.at("tensor_core"), "tensor_core", {},
           {"instruction", "m", "n_min", "n_max", "n_step", "k_16bit", "k_8bit", "k_tf32"});
    if (tc.has("instruction")) (void)tc.name("instruction");
    if (tc.has("m")) t.tc_m = static_cast<int>(tc.integer("m", 1, 1024));
    if (tc.has("n_step")) t.tc_n_step = static_cast<int>(tc.integer("n_step", 1, 1024));
    if (tc.has("n_max")) t.tc_n_max = static_cast<int>(tc.integer("n_max", 1, 4096));
    if (tc.has("k_16bit")) t.tc_k_16bit = static_cast<int>(tc.integer("k_16bit", 1, 1024));
    std::int64_t n_min = t.tc_n_step;
    if (tc.has("n_min")) n_min = tc.integer("n_min", 1, 4096);
    for (const char* k : {"k_8bit", "k_tf32"})
      if (tc.has(k)) (void)tc.integer(k, 1, 1024);
    if (t.tc_n_max < n_min || t.tc_n_max % t.tc_n_step != 0)
      throw Located{tc.at(tc.has("n_max") ? "n_max" : "n_step").pos,
                    fmt::format("'tensor_core.n_max' = {} must be a multiple of 'tensor_core.n_step' = {}, at least 'n_min' = {}",
                                t.tc_n_max, t.tc_n_step, n_min)};
  }
  for (auto& [k, v] : top.string_map("sources")) t.sources[k] = v;
  return t;
}

}  // namespace

Expected<GpuTarget, std::string> parse_gpu_target(std::string_view json, std::string_view where) {
  auto t = jsondoc::read(json, std::string(where), read_gpu_target);
  if (!t) return unexpected(t.error().headline());
  return std::move(*t);
}

std::vector<std::string> builtin_gpu_targets() {
  std::vector<std::string> r;
  for (const auto& [name, json] : detail::builtin_gpu_table()) r.emplace_back(name);
  return r;
}

Expected<GpuTarget, std::string> load_gpu_target(std::string_view name_or_path) {
  for (const auto& [name, json] : detail::builtin_gpu_table())
    if (name == name_or_path) return parse_gpu_target(json, fmt::format("built-in GPU target {}", name));
  const std::string p(name_or_path);
  if (p.size() > 5 && p.ends_with(".json")) {
    std::string text;
    try {
      text = read_file(p);
    } catch (const Error& e) {
      return unexpected(std::string(e.what()));
    }
    return parse_gpu_target(text, p);
  }
  std::string names;
  for (const auto& n : builtin_gpu_targets()) names += (names.empty() ? "" : ", ") + n;
  return unexpected(fmt::format("'{}' is not a GPU target (built in: {}; or a .json file)", p, names));
}

bool is_gpu_target(std::string_view name) {
  for (const auto& [n, json] : detail::builtin_gpu_table())
    if (n == name) return true;
  const std::string p(name);
  std::error_code ec;
  if (p.size() > 5 && p.ends_with(".json") && std::filesystem::is_regular_file(p, ec)) {
    try {
      const auto j = nlohmann::json::parse(read_file(p));
      return j.is_object() && j.value("kind", std::string()) == "gpu";
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

}  // namespace kevo::gpu
