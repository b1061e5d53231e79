#include "options.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <toml++/toml.h>

#include "toml_file.hpp"

#include "kevo/core/io.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/session/results.hpp"

namespace kevo::cli {

namespace {

std::string where(const std::string& path, const toml::source_region& r) {
  return fmt::format("{}:{}:{}", path, r.begin.line, r.begin.column);
}

}  // namespace

NumericRange numeric_range(const std::string& name) {
  if (const auto r = session::run_option_range(name)) return {r->lo, r->hi};  // a run's options: run.json's ranges too
  if (name == "samples") return {0, 1e7};
  if (name == "mpi-timeout") return {0.1, 1e7};
  if (name == "keep") return {0, 1e9};
  if (name == "tolerance") return {0, 10};
  throw std::logic_error("numeric_range: no range for '" + name + "'");
}

CLI::Option* bounded(CLI::Option* opt, const std::string& name) {
  const auto r = kevo::cli::numeric_range(name);
  opt->check(CLI::Validator(
      [r](std::string& in) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(in.c_str(), &end);
        if (in.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(v))
          return fmt::format("'{}' is not a number", in);
        // past 2^53 a double holds only even integers: 2^53 + 1 reads as 2^53 and would pass a
        // bound of 2^53 (the seed's), then be kept exactly, so compare such integers exactly
        const bool whole_literal = in.find_first_not_of("0123456789") == std::string::npos;
        bool too_big = false;
        if (whole_literal && v >= 9007199254740992.0 && r.hi <= 9007199254740992.0) {
          errno = 0;
          const unsigned long long u = std::strtoull(in.c_str(), nullptr, 10);
          too_big = errno == ERANGE || u > static_cast<unsigned long long>(r.hi);
        }
        if (v < r.lo || v > r.hi || too_big) return fmt::format("{} is outside {}", in, session::OptionRange{r.lo, r.hi}.str());
        return std::string();
      },
      fmt::format("in [{:g}, {:g}]", r.lo, r.hi)));
  return opt;
}

toml::table read_toml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UsageError{fmt::format("{}: a directory, not a TOML file", path)};
  std::string text;
  try {
    text = read_file(path, kMaxTextFileBytes);  // bounded: `-c /dev/zero` read forever
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
  // toml++ ends a document at a NUL byte: /dev/zero, or a binary file, read as an empty table and
  // the default search ran
  if (const auto z = text.find('\0'); z != std::string::npos)
    throw UsageError{fmt::format("{}: a NUL byte at offset {}: not a TOML file", path, z)};
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& r = e.source();
    if (r.begin.line == 0) throw UsageError{fmt::format("{}: {}", path, e.description())};
    throw UsageError{fmt::format("{}: {}", where(path, r), e.description())};
  }
}

void apply_config(Options& o, const std::string& path, const std::vector<std::string>& set_by_flags) {
  // (an empty path never gets here: main refuses `-c ""`)
  const toml::table t = read_toml_file(path);
  auto taken = [&](const std::string& k) {
    return std::find(set_by_flags.begin(), set_by_flags.end(), k) != set_by_flags.end();
  };
  for (auto&& member : t) {
    // (named, not a structured binding: the lambdas below use them, which clang < 16 refuses)
    const toml::key& key = member.first;
    const toml::node& node = member.second;
    const std::string k(key.str());
    const std::string at = where(path, node.source());
    auto str = [&](std::string& dst) {
      auto v = node.value<std::string>();
      if (!v) throw UsageError{fmt::format("{}: '{}' must be a string", at, k)};
      if (!taken(k)) {
        dst = *v;
        o.configured_at[k] = at;
      }
    };
    auto num = [&](auto& dst) {
      using T = std::remove_reference_t<decltype(dst)>;
      const auto [lo, hi] = numeric_range(k);
      // an integer node as its value (value<double>() refuses integers a double cannot hold exactly)
      const std::optional<double> v =
          node.is_integer() ? std::optional<double>(static_cast<double>(*node.value<std::int64_t>())) : node.value<double>();
      if (!v || node.is_boolean()) throw UsageError{fmt::format("{}: '{}' must be a number", at, k)};
      if (!std::isfinite(*v)) throw UsageError{fmt::format("{}: '{}' = {} is not a finite number", at, k, *v)};
      // an integer past 2^53 rounds to a neighbour as a double: compare it exactly
      const bool inexact = node.is_integer() && (*node.value<std::int64_t>() > (std::int64_t{1} << 53) ||
                                                 *node.value<std::int64_t>() < -(std::int64_t{1} << 53));  // (no llabs: INT64_MIN)
      if (*v < lo || *v > hi || inexact)
        throw UsageError{fmt::format("{}: '{}' = {} is outside {}", at, k,
                                     node.is_integer() ? std::to_string(*node.value<std::int64_t>()) : fmt::format("{}", *v),
                                     session::OptionRange{lo, hi}.str())};
      if constexpr (std::is_integral_v<T>)
        if (*v != std::floor(*v)) throw UsageError{fmt::format("{}: '{}' = {} must be a whole number", at, k, *v)};
      if (!taken(k)) dst = static_cast<T>(*v);
    };
    if (k == "kernel") str(o.kernel_file);
    else if (k == "workload") {
      str(o.workload);
      // checked here, where its line is known (later it could only be named as if a flag gave it)
      if (!taken(k))
        if (auto w = ir::workload(o.workload); !w) throw UsageError{fmt::format("{}: {}", at, w.error())};
    }
    else if (k == "target") str(o.target);
    else if (k == "runner") str(o.runner);
    else if (k == "algorithm") str(o.algorithm);
    else if (k == "llm") str(o.llm_config);
    else if (k == "out") str(o.out);
    else if (k == "budget") num(o.budget);
    else if (k == "time") num(o.time_limit);
    else if (k == "seed") num(o.seed);
    else if (k == "threads") num(o.threads);
    else if (k == "population") num(o.population);
    else if (k == "patience") num(o.patience);
    else if (k == "eval-timeout") num(o.eval_timeout);
    else if (k == "space") {
      str(o.space);
      if (o.space != "searched" && o.space != "full")
        throw UsageError{fmt::format("{}: 'space' = '{}' (allowed: searched, full)", at, o.space)};
    } else
      throw UsageError{fmt::format(
          "{}: unknown key '{}' (allowed: kernel, workload, target, runner, algorithm, budget, time, seed, threads, "
          "population, patience, eval-timeout, space, llm, out)",
          at, k)};
  }
}

std::string as_configured(const Options& o, const std::string& message) {
  // "--algorithm 'bogus' is not one of ..." -> "cfg.toml:1:13: 'algorithm' = 'bogus' is not one of ..."
  for (const auto& [key, at] : o.configured_at) {
    const std::string flag = "--" + key + " ";
    if (message.starts_with(flag)) return fmt::format("{}: '{}' = {}", at, key, message.substr(flag.size()));
    const std::string colon = "--" + key + ": ";
    if (message.starts_with(colon)) return fmt::format("{}: '{}': {}", at, key, message.substr(colon.size()));
  }
  return message;
}

}  // namespace kevo::cli
