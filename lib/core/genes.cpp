#include "kevo/core/genes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"

namespace kevo {

const char* to_string(GeneKind k) noexcept {
  switch (k) {
    case GeneKind::categorical: return "categorical";
    case GeneKind::ordinal: return "ordinal";
    case GeneKind::permutation: return "permutation";
    case GeneKind::boolean: return "boolean";
    case GeneKind::continuous: return "continuous";
  }
  return "?";
}

double Gene::log10_cardinality() const noexcept {
  if (kind != GeneKind::permutation) return std::log10(static_cast<double>(std::max<std::size_t>(1, choices())));
  double s = 0;
  for (std::size_t i = 2; i <= labels.size(); ++i) s += std::log10(static_cast<double>(i));
  return s;
}

double Gene::real(std::int32_t position) const noexcept {
  const double t = static_cast<double>(std::clamp(position, 0, kContinuousSteps)) / kContinuousSteps;
  if (log_scale) return position >= kContinuousSteps ? hi : lo * std::pow(hi / lo, t);
  return position >= kContinuousSteps ? hi : lo + (hi - lo) * t;
}

std::int32_t Gene::position(double value) const noexcept {
  double t = 0;
  if (log_scale)
    t = value > 0 ? std::log(value / lo) / std::log(hi / lo) : 0.0;
  else
    t = (value - lo) / (hi - lo);
  if (!(t > 0)) return 0;  // also NaN
  if (t >= 1) return kContinuousSteps;
  return static_cast<std::int32_t>(std::lround(t * kContinuousSteps));
}

std::string Gene::label(std::int32_t v) const {
  if (kind == GeneKind::continuous) return fmt::format("{:.7g}", real(v));
  return v >= 0 && static_cast<std::size_t>(v) < labels.size() ? labels[static_cast<std::size_t>(v)] : std::string("?");
}

Gene Gene::continuous(std::string name, double lo, double hi, bool log_scale, std::string group) {
  Gene g{std::move(name), GeneKind::continuous, {}, {}, std::move(group)};
  g.lo = lo;
  g.hi = hi;
  g.log_scale = log_scale;
  return g;
}

Gene Gene::categorical(std::string name, std::vector<std::string> labels, std::string group) {
  return Gene{std::move(name), GeneKind::categorical, std::move(labels), {}, std::move(group)};
}
Gene Gene::ordinal(std::string name, std::vector<std::int64_t> values, std::string group) {
  std::vector<std::string> labels;
  labels.reserve(values.size());
  for (auto v : values) labels.push_back(std::to_string(v));
  return Gene{std::move(name), GeneKind::ordinal, std::move(labels), std::move(values), std::move(group)};
}
Gene Gene::permutation(std::string name, std::vector<std::string> items, std::string group) {
  return Gene{std::move(name), GeneKind::permutation, std::move(items), {}, std::move(group)};
}
Gene Gene::boolean(std::string name, std::string group) {
  return Gene{std::move(name), GeneKind::boolean, {"false", "true"}, {}, std::move(group)};
}

std::size_t Space::add(Gene g) {
  if (g.kind == GeneKind::continuous) {
    if (!(std::isfinite(g.lo) && std::isfinite(g.hi) && g.lo < g.hi))
      throw Error(fmt::format("continuous gene '{}' needs finite bounds lo < hi (got {} and {})", g.name, g.lo, g.hi));
    if (g.log_scale && !(g.lo > 0))
      throw Error(fmt::format("log-scaled continuous gene '{}' needs lo > 0 (got {})", g.name, g.lo));
    if (!g.labels.empty()) throw Error(fmt::format("continuous gene '{}' takes no labels", g.name));
  } else if (g.labels.empty()) {
    throw Error(fmt::format("gene '{}' has an empty domain", g.name));
  }
  if (g.kind == GeneKind::ordinal && g.values.size() != g.labels.size())
    throw Error(fmt::format("ordinal gene '{}' needs one value per label", g.name));
  if (g.kind == GeneKind::boolean && g.labels.size() != 2)
    throw Error(fmt::format("boolean gene '{}' must have two labels", g.name));
  if (find(g.name)) throw Error(fmt::format("duplicate gene name '{}'", g.name));
  offsets_.push_back(width_);
  width_ += g.width();
  genes_.push_back(std::move(g));
  return genes_.size() - 1;
}

std::optional<std::size_t> Space::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < genes_.size(); ++i)
    if (genes_[i].name == name) return i;
  return std::nullopt;
}

std::vector<std::string> Space::groups() const {
  std::vector<std::string> out;
  for (const auto& g : genes_)
    if (std::find(out.begin(), out.end(), g.group) == out.end()) out.push_back(g.group);
  return out;
}

std::span<const std::int32_t> Space::slots(const Genome& g, std::size_t i) const {
  return std::span<const std::int32_t>(g).subspan(offsets_.at(i), genes_[i].width());
}
std::span<std::int32_t> Space::slots(Genome& g, std::size_t i) const {
  return std::span<std::int32_t>(g).subspan(offsets_.at(i), genes_[i].width());
}

double Space::log10_cardinality() const noexcept {
  double s = 0;
  for (const auto& g : genes_) s += g.log10_cardinality();
  return s;
}

std::optional<std::uint64_t> Space::cardinality() const noexcept {
  std::uint64_t n = 1;
  constexpr std::uint64_t limit = std::uint64_t{1} << 62;
  for (const auto& g : genes_) {
    std::uint64_t c = 1;
    if (g.kind == GeneKind::permutation) {
      for (std::size_t i = 2; i <= g.labels.size(); ++i) {
        if (c > limit / i) return std::nullopt;
        c *= i;
      }
    } else {
      c = g.choices();
    }
    if (n > limit / c) return std::nullopt;
    n *= c;
  }
  return n;
}

bool Space::contains(const Genome& g) const noexcept {
  if (g.size() != width_) return false;
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    const auto& gene = genes_[i];
    const auto n = static_cast<std::int64_t>(gene.choices());
    if (gene.kind == GeneKind::permutation) {
      std::vector<bool> seen(gene.labels.size(), false);
      for (std::size_t k = 0; k < gene.labels.size(); ++k) {
        const auto v = g[offsets_[i] + k];
        if (v < 0 || v >= n || seen[static_cast<std::size_t>(v)]) return false;
        seen[static_cast<std::size_t>(v)] = true;
      }
    } else {
      const auto v = g[offsets_[i]];
      if (v < 0 || v >= n) return false;
    }
  }
  return true;
}

Genome Space::random(Rng& rng) const {
  Genome g(width_);
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    const auto& gene = genes_[i];
    auto s = slots(g, i);
    if (gene.kind == GeneKind::permutation) {
      std::iota(s.begin(), s.end(), 0);
      for (std::size_t k = s.size(); k > 1; --k) std::swap(s[k - 1], s[rng.below(k)]);
    } else {
      s[0] = static_cast<std::int32_t>(rng.below(gene.choices()));
    }
  }
  return g;
}

Genome Space::first() const {
  Genome g(width_, 0);
  for (std::size_t i = 0; i < genes_.size(); ++i)
    if (genes_[i].kind == GeneKind::permutation) {
      auto s = slots(g, i);
      std::iota(s.begin(), s.end(), 0);
    }
  return g;
}

Genome Space::nth(std::uint64_t index) const {
  Genome g = first();
  for (std::size_t i = genes_.size(); i-- > 0;) {
    const auto& gene = genes_[i];
    auto s = slots(g, i);
    if (gene.kind == GeneKind::permutation) {
      // Lehmer code: index -> permutation
      std::uint64_t fact = 1;
      for (std::size_t k = 2; k <= s.size(); ++k) fact *= k;
      std::uint64_t r = index % fact;
      index /= fact;
      std::vector<std::int32_t> pool(s.size());
      std::iota(pool.begin(), pool.end(), 0);
      for (std::size_t k = 0; k < s.size(); ++k) {
        fact /= (s.size() - k);
        const auto pick = static_cast<std::size_t>(r / fact);
        r %= fact;
        s[k] = pool[pick];
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    } else {
      const std::uint64_t n = gene.choices();
      s[0] = static_cast<std::int32_t>(index % n);
      index /= n;
    }
  }
  return g;
}

std::string Space::describe(const Genome& g) const {
  std::string out;
  for (std::size_t i = 0; i < genes_.size(); ++i) {
    if (i) out += ' ';
    out += genes_[i].name;
    out += '=';
    auto s = slots(g, i);
    for (std::size_t k = 0; k < s.size(); ++k) {
      if (k) out += ',';
      out += genes_[i].label(s[k]);
    }
  }
  return out;
}

std::uint64_t space_fingerprint(const Space& space) {
  StableHasher h;
  h.str("kevo.space").u64(space.size());
  for (const auto& g : space.genes()) {
    h.str(g.name).u64(static_cast<std::uint64_t>(g.kind)).str(g.group).u64(g.labels.size());
    for (const auto& l : g.labels) h.str(l);
    for (auto v : g.values) h.i64(v);
    if (g.kind == GeneKind::continuous) h.f64(g.lo).f64(g.hi).u64(g.log_scale ? 1 : 0);
  }
  return h.digest();
}

}  // namespace kevo
