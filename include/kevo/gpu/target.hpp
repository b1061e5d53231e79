// A GPU as data: the figures the schedule space and rooflines need, each sourced in its JSON file
// (targets/gpu/<name>.json, compiled in; docs/GPU.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::gpu {

struct GpuTarget {
  std::string name;                  // "h200"
  std::string description;
  std::string compute_capability;    // "9.0"
  int sm_count = 0;
  std::int64_t smem_bytes_per_sm = 0;
  std::int64_t smem_bytes_per_block = 0;  // the most one program (CTA) may use
  std::int64_t registers_per_sm = 0;
  int registers_per_thread_max = 0;
  int threads_per_sm_max = 0;
  int threads_per_block_max = 0;
  int warp_size = 32;
  std::int64_t l2_bytes = 0;
  double hbm_bytes_per_s = 0;
  std::map<std::string, double> peak_flops;  // by dtype name ("bf16", "fp16", "fp8_e4m3fn", "fp32", "tf32")
  int tc_m = 64, tc_n_step = 8, tc_n_max = 256, tc_k_16bit = 16;  // wgmma m64nNk16
  std::map<std::string, std::string> sources;  // figure names -> public URL and what it says

  // Peak dense FLOP/s for a storage dtype (tensor cores for 16- and 8-bit), 0 if unknown.
  [[nodiscard]] double peak(ir::DType t) const;
};

// Parses a GPU target file's text; errors name `where` and the field.
Expected<GpuTarget, std::string> parse_gpu_target(std::string_view json, std::string_view where);
// A built-in GPU target by name ("h200"), or a JSON file (a path ending in .json).
Expected<GpuTarget, std::string> load_gpu_target(std::string_view name_or_path);
// Names of the built-in GPU targets.
std::vector<std::string> builtin_gpu_targets();
// Whether `name` names a built-in GPU target or a .json file whose "kind" is "gpu".
bool is_gpu_target(std::string_view name);

}  // namespace kevo::gpu
