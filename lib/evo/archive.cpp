#include "kevo/evo/archive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kevo/core/error.hpp"

namespace kevo::evo {

bool better(const Individual& a, const Individual& b) noexcept {
  const bool va = a.eval.ok(), vb = b.eval.ok();
  if (va != vb) return va;
  if (va) {
    const auto& fa = a.eval.fitness;
    const auto& fb = b.eval.fitness;
    const std::size_t n = std::min(fa.size(), fb.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (fa[i] < fb[i]) return true;
      if (fb[i] < fa[i]) return false;
    }
    if (fa.size() != fb.size()) return fa.size() < fb.size();
  }
  return a.id < b.id;
}

Archive::Archive(ArchiveConfig config) : config_(std::move(config)) {
  for (int b : config_.bins)
    if (b < 1) throw Error("archive: bins must be >= 1");
  for (const auto& [lo, hi] : config_.ranges)
    if (!(lo < hi)) throw Error("archive: every range needs low < high");
  if (!config_.ranges.empty()) {
    if (config_.bins.size() > 1 && config_.bins.size() != config_.ranges.size())
      throw Error("archive: bins and ranges name different numbers of descriptors");
    set_dims(config_.ranges.size());
    ranges_ = config_.ranges;
    calibrated_ = true;
  } else if (config_.bins.size() > 1) {
    set_dims(config_.bins.size());
  }
}

void Archive::set_dims(std::size_t d) {
  dims_ = d;
  bins_.assign(d, config_.bins.empty() ? 10 : config_.bins[0]);
  if (config_.bins.size() == d)
    for (std::size_t i = 0; i < d; ++i) bins_[i] = config_.bins[i];
}

std::uint64_t Archive::capacity() const noexcept {
  std::uint64_t c = 1;
  for (int b : bins_) c *= static_cast<std::uint64_t>(b);
  return dims_ == 0 ? 0 : c;
}

std::optional<std::uint64_t> Archive::cell_of(std::span<const double> d) const {
  if (!calibrated_ || d.size() != dims_ || dims_ == 0) return std::nullopt;
  std::uint64_t cell = 0;
  for (std::size_t i = 0; i < dims_; ++i) {
    const auto [lo, hi] = ranges_[i];
    const double x = d[i];
    if (std::isnan(x)) return std::nullopt;
    double t = (x - lo) / (hi - lo);
    auto k = static_cast<std::int64_t>(std::floor(t * bins_[i]));
    k = std::clamp<std::int64_t>(k, 0, bins_[i] - 1);
    cell = cell * static_cast<std::uint64_t>(bins_[i]) + static_cast<std::uint64_t>(k);
  }
  return cell;
}

bool Archive::insert(const Individual& ind) {
  if (!ind.eval.ok() || ind.eval.descriptors.empty()) return false;
  if (dims_ == 0) set_dims(ind.eval.descriptors.size());
  if (ind.eval.descriptors.size() != dims_) return false;
  if (!calibrated_) {
    pending_.push_back(ind);
    return false;
  }
  const auto cell = cell_of(ind.eval.descriptors);
  if (!cell) return false;
  auto it = std::lower_bound(cells_.begin(), cells_.end(), *cell,
                             [](const auto& e, std::uint64_t c) { return e.first < c; });
  if (it != cells_.end() && it->first == *cell) {
    if (!better(ind, it->second)) return false;
    it->second = ind;
    return true;
  }
  cells_.insert(it, {*cell, ind});
  return true;
}

void Archive::calibrate() {
  if (calibrated_ || pending_.empty()) return;
  ranges_.assign(dims_, {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()});
  for (const auto& ind : pending_)
    for (std::size_t i = 0; i < dims_; ++i) {
      const double x = ind.eval.descriptors[i];
      if (!std::isfinite(x)) continue;
      ranges_[i].first = std::min(ranges_[i].first, x);
      ranges_[i].second = std::max(ranges_[i].second, x);
    }
  for (auto& [lo, hi] : ranges_) {
    if (!std::isfinite(lo)) lo = 0, hi = 1;
    const double span = hi - lo;
    const double margin = span > 0 ? 0.1 * span : std::max(1.0, std::abs(lo)) * 0.5;
    lo -= margin;
    hi += margin;
  }
  calibrated_ = true;
  auto pend = std::move(pending_);
  pending_.clear();
  for (const auto& ind : pend) insert(ind);
}

void Archive::restore(std::vector<std::pair<double, double>> ranges, bool calibrated,
                      std::vector<std::pair<std::uint64_t, Individual>> cells, std::vector<Individual> pending) {
  if (!ranges.empty() && dims_ == 0) set_dims(ranges.size());
  if (dims_ == 0 && !pending.empty()) set_dims(pending.front().eval.descriptors.size());
  ranges_ = std::move(ranges);
  calibrated_ = calibrated;
  cells_ = std::move(cells);
  std::sort(cells_.begin(), cells_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  pending_ = std::move(pending);
}

}  // namespace kevo::evo
