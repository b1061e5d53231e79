// MAP-Elites archive: a grid over behaviour descriptors (Evaluation::descriptors) holding, per
// cell, the best individual ever seen for that cell. The engine uses it as the population
// (Algorithm::map_elites) or keeps it beside a GA for diversity and reporting.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kevo/evo/operator.hpp"

namespace kevo::evo {

struct ArchiveConfig {
  // Bins per descriptor; one entry applies to every descriptor. Empty: no archive (except for
  // Algorithm::map_elites, which then uses 10 bins per descriptor).
  std::vector<int> bins;
  // [low, high] per descriptor; values outside are clamped into the edge bins. Empty: adaptive,
  // i.e. the ranges are taken from the first valid individuals seen (their span widened by 10 %
  // on each side) and then stay fixed, so a cell keeps its meaning for the whole run.
  std::vector<std::pair<double, double>> ranges;
};

// Strict "a is better than b": valid beats invalid, then lexicographically smaller fitness
// vector, then the earlier evaluation (lower id) so that ties never depend on arrival order.
bool better(const Individual& a, const Individual& b) noexcept;

class Archive {
 public:
  explicit Archive(ArchiveConfig config);

  // Offers an individual. Returns true when it became the elite of its cell. Invalid individuals
  // and those without descriptors are ignored; while the ranges are still adaptive (not yet
  // calibrated) valid ones are buffered and placed by calibrate().
  bool insert(const Individual& ind);
  // Fixes adaptive ranges from the buffered individuals and inserts them. No-op when calibrated.
  void calibrate();
  [[nodiscard]] bool calibrated() const noexcept { return calibrated_; }

  // Cell index of a descriptor vector (mixed radix over the bins), or nullopt when the archive is
  // not calibrated or the descriptor count does not match.
  [[nodiscard]] std::optional<std::uint64_t> cell_of(std::span<const double> descriptors) const;

  [[nodiscard]] std::size_t size() const noexcept { return cells_.size(); }
  [[nodiscard]] bool empty() const noexcept { return cells_.empty(); }
  [[nodiscard]] std::uint64_t capacity() const noexcept;  // number of cells in the grid
  [[nodiscard]] std::size_t dimensions() const noexcept { return dims_; }
  // (cell, elite) pairs in ascending cell order.
  [[nodiscard]] const std::vector<std::pair<std::uint64_t, Individual>>& cells() const noexcept { return cells_; }
  [[nodiscard]] const std::vector<std::pair<double, double>>& ranges() const noexcept { return ranges_; }
  [[nodiscard]] const std::vector<Individual>& pending() const noexcept { return pending_; }
  [[nodiscard]] const ArchiveConfig& config() const noexcept { return config_; }

  // Restores a saved state (checkpoint resume); no validation beyond sizes.
  void restore(std::vector<std::pair<double, double>> ranges, bool calibrated,
               std::vector<std::pair<std::uint64_t, Individual>> cells, std::vector<Individual> pending);

 private:
  void set_dims(std::size_t d);
  ArchiveConfig config_;
  std::size_t dims_ = 0;
  std::vector<int> bins_;
  std::vector<std::pair<double, double>> ranges_;
  bool calibrated_ = false;
  std::vector<std::pair<std::uint64_t, Individual>> cells_;  // sorted by cell
  std::vector<Individual> pending_;                          // buffered before calibration
};

}  // namespace kevo::evo
