// Private to the schedule module and lib/nests/*/derive.cpp: what ScheduleSpace::try_derive
// (derive.cpp: ops, fusion chains, stats patterns, per-op genes) shares with each nest kind's
// derivation (lib/nests/<kind>/derive.cpp): the space being built (Deriver), the helpers for
// gene values, and each kind's entry points. Gene order is part of a space's identity (genomes,
// records and journals index genes by position), so the calls stay where try_derive makes them:
// per op in op order, the nest an op roots (derive_contract or derive_vector: an op's kind decides
// it), then the kernel-wide patterns (derive_flash, derive_online); defaults_<kind> for every kind of the list
// (lib/nests/kinds.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "kevo/schedule/space.hpp"
#include "nests/kinds.hpp"

namespace kevo::schedule::detail {

// The space under derivation.
struct Deriver {
  SpaceImpl& s;
  Space& sp;
  const ir::Kernel& k;
  const target::Target& t;
  DeriveOptions opt{};
};

bool contains(const std::vector<std::string>& v, const std::string& s);
void reads_of(const ir::Expr& e, std::set<std::string>& out);
// Tile sizes offered for an index: powers of two up to the cap plus the extent itself.
std::vector<std::int64_t> tile_values(std::int64_t ext, std::int64_t cap);
std::vector<std::int64_t> block_values(std::int64_t max_tiles);
// The value index of the largest value <= want (values ascend).
int value_index(const Gene& g, std::int64_t want);
// Sets single-slot gene `gene` of `g` to value index `value`; a gene index < 0 (absent) is skipped.
void set_value(const Space& sp, Genome& g, int gene, int value);
bool is_access(const ir::Expr& e, const std::string& t, const std::vector<std::string>& idx);
// A sum or mean of one plain access over one index that is not the access's innermost (a column
// sum, `S[c] = sum(r) X[r, c]`): a reduction across partitions, which the Vector engine cannot do,
// so it roots a contraction nest with an implicit ones operand (ContractSlot::ones).
bool ones_contraction(const ir::Op& op);
// Whether a contraction op (ir::OpKind::contract) can root a contraction nest: one contracted
// index, used by both operands. One that cannot (`S[] = sum(r, c) X[r, c] * X[r, c]`) roots a
// vector nest as a reduction.
bool contraction_rootable(const ir::Op& op);

// The genes of the nest op j roots (a contraction: ContractSlot; a map or reduce: VectorSlot), or
// why the kernel is unsupported.
std::optional<Unsupported> derive_contract(const Deriver& d, std::size_t j);
std::optional<Unsupported> derive_vector(const Deriver& d, std::size_t j);
// The flash patterns (FlashSlot) of the whole kernel and their genes.
void derive_flash(const Deriver& d);
// The online-softmax patterns (OnlineSlot) outside flash patterns and their genes.
void derive_online(const Deriver& d);

// Rule-written schedules (ScheduleSpace::expert_genomes), each from `base` (before repair); a
// kind without rules has none.
void experts_contract(const Deriver& d, const Genome& base, std::vector<Genome>& out);

// Each kind's default gene values (before the default genome's repair).
#define KEVO_DEFAULTS_DECL(kind) void defaults_##kind(const Deriver& d, Genome& g);
KEVO_NEST_KINDS(KEVO_DEFAULTS_DECL)
#undef KEVO_DEFAULTS_DECL

}  // namespace kevo::schedule::detail
