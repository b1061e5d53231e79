#include "kevo/gpu/target.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/core/io.hpp"

namespace kevo::gpu {
namespace detail {
const std::vector<std::pair<std::string_view, std::string_view>>& builtin_gpu_table();
}

double GpuTarget::peak(ir::DType t) const {
  const auto it = peak_flops.find(std::string(ir::to_string(t)));
  return it == peak_flops.end() ? 0.0 : it->second;
}

Expected<GpuTarget, std::string> parse_gpu_target(std::string_view json, std::string_view where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    return unexpected(fmt::format("{}: not JSON: {}", where, e.what()));
  }
  if (!j.is_object()) return unexpected(fmt::format("{}: a GPU target is a JSON object", where));
  if (j.value("kind", std::string()) != "gpu") return unexpected(fmt::format("{}: \"kind\" must be \"gpu\"", where));
  GpuTarget t;
  try {
    auto need_int = [&](const char* key, auto& out, long long min) -> std::string {
      if (!j.contains(key) || !j[key].is_number_integer()) return fmt::format("{}: \"{}\" must be an integer", where, key);
      const long long v = j[key].get<long long>();
      if (v < min) return fmt::format("{}: \"{}\" is {}, below {}", where, key, v, min);
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return {};
    };
    if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
      return unexpected(fmt::format("{}: \"name\" must be a non-empty string", where));
    t.name = j["name"].get<std::string>();
    t.description = j.value("description", std::string());
    t.compute_capability = j.value("compute_capability", std::string());
    for (auto e : {need_int("sm_count", t.sm_count, 1), need_int("smem_bytes_per_sm", t.smem_bytes_per_sm, 1024),
                   need_int("smem_bytes_per_block", t.smem_bytes_per_block, 1024),
                   need_int("registers_per_sm", t.registers_per_sm, 1024),
                   need_int("registers_per_thread_max", t.registers_per_thread_max, 16),
                   need_int("threads_per_sm_max", t.threads_per_sm_max, 32),
                   need_int("threads_per_block_max", t.threads_per_block_max, 32), need_int("warp_size", t.warp_size, 1),
                   need_int("l2_bytes", t.l2_bytes, 0)})
      if (!e.empty()) return unexpected(e);
    if (t.smem_bytes_per_block > t.smem_bytes_per_sm)
      return unexpected(fmt::format("{}: \"smem_bytes_per_block\" exceeds \"smem_bytes_per_sm\"", where));
    if (!j.contains("hbm_bytes_per_s") || !j["hbm_bytes_per_s"].is_number() || j["hbm_bytes_per_s"].get<double>() <= 0)
      return unexpected(fmt::format("{}: \"hbm_bytes_per_s\" must be a positive number", where));
    t.hbm_bytes_per_s = j["hbm_bytes_per_s"].get<double>();
    if (!j.contains("peak_flops") || !j["peak_flops"].is_object())
      return unexpected(fmt::format("{}: \"peak_flops\" must be an object of dtype -> FLOP/s", where));
    for (const auto& [k, v] : j["peak_flops"].items()) {
      if (!v.is_number() || v.get<double>() <= 0)
        return unexpected(fmt::format("{}: \"peak_flops.{}\" must be a positive number", where, k));
      t.peak_flops[k] = v.get<double>();
    }
    if (j.contains("tensor_core")) {
      const auto& tc = j["tensor_core"];
      t.tc_m = tc.value("m", 64);
      t.tc_n_step = tc.value("n_step", 8);
      t.tc_n_max = tc.value("n_max", 256);
      t.tc_k_16bit = tc.value("k_16bit", 16);
    }
    if (!j.contains("sources") || !j["sources"].is_object() || j["sources"].empty())
      return unexpected(fmt::format("{}: \"sources\" must say where each figure comes from", where));
    for (const auto& [k, v] : j["sources"].items()) t.sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  } catch (const std::exception& e) {
    return unexpected(fmt::format("{}: {}", where, e.what()));
  }
  return t;
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
