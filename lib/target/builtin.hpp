// Private: the table of built-in target JSON texts generated from targets/*.json.
#pragma once
#include <string_view>
#include <vector>

namespace kevo::target::detail {

struct BuiltinTarget {
  std::string_view name;
  std::string_view json;
};
const std::vector<BuiltinTarget>& builtin_table();

}  // namespace kevo::target::detail
