// libFuzzer target for the LLM reply parser (kevo::llm::parse_reply), the one piece of kevo that
// reads text written by a model. The first byte picks the options; the rest is the reply.
// Properties checked: no crash or hang, and every candidate is non-empty, unique, free of CR and
// NUL, within max_candidates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "kevo/llm/reply.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  kevo::llm::ReplyParseOptions opt;
  opt.multiline = (data[0] & 1) != 0;
  opt.truncated = (data[0] & 2) != 0;
  opt.max_candidates = 1 + (data[0] >> 3);
  if (data[0] & 4) opt.item_start = "tile";
  const std::string_view reply(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto parsed = kevo::llm::parse_reply(reply, opt);
  if (parsed.candidates.size() > opt.max_candidates) std::abort();
  std::set<std::string_view> seen;
  for (const auto& c : parsed.candidates) {
    if (c.empty() || c.find('\r') != std::string::npos || c.find('\0') != std::string::npos) std::abort();
    if (!opt.multiline && c.find('\n') != std::string::npos) std::abort();
    if (!seen.insert(c).second) std::abort();
  }
  return 0;
}
