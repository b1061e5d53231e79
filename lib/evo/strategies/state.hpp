// Private: the saved state of the built-in strategies -- an enumeration cursor and populations as
// journal ids (cereal portable binary) -- shared with checkpoint.cpp, which converts version-1
// snapshots (written before strategies were plug-ins) into it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/evo/operator.hpp"

namespace kevo::evo::detail {

struct BuiltinState {
  std::uint64_t cursor = 0;
  std::vector<std::vector<std::uint64_t>> populations;  // member ids, best first
};

std::string encode_builtin_state(const BuiltinState& s);
BuiltinState decode_builtin_state(std::string_view bytes);

// Saved ids of populations -> BuiltinState, and back (ids looked up in the journal's records).
std::vector<std::uint64_t> ids_of(const std::vector<Individual>& pop);
std::vector<Individual> individuals_of(const std::vector<std::uint64_t>& ids, std::span<const Individual> history);

// The state of a strategy with one population and a cursor (random, exhaustive, steady state).
std::string save_one(std::uint64_t cursor, const std::vector<Individual>& pop);
void load_one(std::string_view bytes, std::span<const Individual> history, std::uint64_t& cursor, std::vector<Individual>& pop);

}  // namespace kevo::evo::detail
