// The random kernel generator: every kernel is valid, canonical and round-trips through text,
// the generator is deterministic, honours its options, covers the features it promises with
// reasonable frequency, and its kernels are numerically sane (finite, fp32 close to fp64).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "kevo/ir.hpp"
#include "kevo/ir/random.hpp"

using namespace kevo::ir;

namespace {

void accesses(const Expr& e, std::vector<const Expr*>& out) {
  if (e.kind == Expr::Kind::access) out.push_back(&e);
  for (const auto& a : e.args) accesses(a, out);
}
std::vector<const Expr*> accesses(const Expr& e) {
  std::vector<const Expr*> v;
  accesses(e, v);
  return v;
}
bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }
bool has_fn(const Expr& e, Fn f) {
  if (e.kind == Expr::Kind::call && e.fn == f) return true;
  return std::any_of(e.args.begin(), e.args.end(), [&](const Expr& a) { return has_fn(a, f); });
}
// exp(a - b) where b reads a max-reduction result: the softmax shape
bool exp_minus_max(const Expr& e, const std::set<std::string>& maxes) {
  if (e.kind == Expr::Kind::call && e.fn == Fn::exp && e.args[0].kind == Expr::Kind::call && e.args[0].fn == Fn::sub)
    for (const Expr* a : accesses(e.args[0].args[1]))
      if (maxes.count(a->tensor)) return true;
  return std::any_of(e.args.begin(), e.args.end(), [&](const Expr& a) { return exp_minus_max(a, maxes); });
}
// Relative order of the output indices inside an access differs from the statement's.
bool permuted_access(const Op& op, const Expr& a) {
  std::vector<std::string> sub;
  for (const auto& i : a.indices)
    if (contains(op.out_indices, i)) sub.push_back(i);
  std::vector<std::string> want;
  for (const auto& i : op.out_indices)
    if (contains(sub, i)) want.push_back(i);
  return sub != want;
}

using Counts = std::map<std::string, int>;

// Feature counts of one kernel (each feature at most once per kernel) into `c`.
void count_features(const Kernel& k, Counts& c) {
  std::set<std::string> seen;
  auto hit = [&](const std::string& f) {
    if (seen.insert(f).second) c[f]++;
  };
  std::set<std::string> maxes, contracts;
  std::map<std::string, int> readers;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    const auto acc = accesses(op.expr);
    std::set<std::string> read;
    for (const Expr* a : acc) read.insert(a->tensor);
    for (const auto& t : read) readers[t]++;
    bool from_contract = false;
    for (const auto& t : read)
      if (contracts.count(t)) from_contract = true;
    for (const Expr* a : acc)
      if (permuted_access(op, *a)) hit("permuted access");
    switch (op.kind()) {
      case OpKind::contract: {
        hit(fmt::format("contraction over {} indices", op.reduce_indices.size()));
        const Expr& a = op.expr.args[0];
        const Expr& b = op.expr.args[1];
        auto red_first = [&](const Expr& x) { return contains(op.reduce_indices, x.indices.front()); };
        auto red_last = [&](const Expr& x) { return contains(op.reduce_indices, x.indices.back()); };
        if ((red_first(a) && red_first(b) && a.indices.size() > op.reduce_indices.size()) ||
            (red_last(a) && red_last(b) && b.indices.size() > op.reduce_indices.size()))
          hit("transposed contraction operand");
        for (const auto& o : op.out_indices)
          if (contains(a.indices, o) && contains(b.indices, o)) hit("batched contraction");
        if (from_contract) hit("chained contractions");
        contracts.insert(op.out);
        break;
      }
      case OpKind::reduce: {
        hit(fmt::format("{} reduction", to_string(op.reduce)));
        if (op.reduce == ReduceOp::max) maxes.insert(op.out);
        // a column reduction: a reduced index is not the innermost index of the widest access
        const Expr* widest = acc.front();
        for (const Expr* a : acc)
          if (a->indices.size() > widest->indices.size()) widest = a;
        bool column = false;
        for (const auto& r : op.reduce_indices)
          if (r != widest->indices.back()) column = true;
        if (column) hit(op.reduce == ReduceOp::sum ? "column sum" : "column reduction");
        else hit("row reduction");
        if (op.reduce == ReduceOp::mean && has_fn(op.expr, Fn::mul) + has_fn(op.expr, Fn::square) > 0 &&
            i + 1 < k.ops.size())
          hit("mean of squares");
        break;
      }
      case OpKind::map: {
        for (const Expr* a : acc) {
          std::set<std::string> ai(a->indices.begin(), a->indices.end());
          if (ai.size() < op.out_indices.size()) hit("broadcast");
        }
        if (has_fn(op.expr, Fn::rsqrt)) hit("rsqrt");
        if (exp_minus_max(op.expr, maxes)) hit("softmax exp(x - max)");
        if (from_contract && op.expr.kind == Expr::Kind::call &&
            (op.expr.fn == Fn::gelu_tanh || op.expr.fn == Fn::gelu_erf || op.expr.fn == Fn::relu ||
             op.expr.fn == Fn::silu || op.expr.fn == Fn::tanh || op.expr.fn == Fn::sigmoid))
          hit("matmul epilogue activation");
        break;
      }
    }
    if (op.reduce == ReduceOp::sum && exp_minus_max(op.expr, maxes)) hit("softmax exp(x - max)");
  }
  int outputs = 0;
  for (const auto& t : k.tensors) {
    hit(fmt::format("{} {}", t.role == Role::input ? "input" : t.role == Role::output ? "output" : "temp",
                    to_string(t.dtype)));
    if (t.role == Role::output) ++outputs;
    if (t.role == Role::temp && readers[t.name] >= 2) hit("temp read by 2+ statements");
    if (t.dims.size() >= 3) hit("rank 3+ tensor");
  }
  if (outputs >= 2) hit("2+ outputs");
  for (const auto& d : k.dims) {
    if (d.size % 32 != 0) hit("extent not divisible by 32");
    if (d.size % 32 == 0) hit("extent divisible by 32");
  }
}

}  // namespace

TEST_CASE("random kernels are valid, canonical, round-trip and respect their options", "[ir][random]") {
  const RandomKernelOptions opt;
  std::set<std::uint64_t> hashes;
  Counts counts;
  std::map<std::size_t, int> lengths;
  const int n = 2000;
  for (int seed = 0; seed < n; ++seed) {
    const Kernel k = random_kernel(static_cast<std::uint64_t>(seed));
    INFO("seed " << seed << "\n" << print_kernel(k));
    // canonical and checked: re-validating and parsing the printed text give the same kernel
    auto v = validate(k);
    REQUIRE(v.has_value());
    REQUIRE(*v == k);
    auto p = parse_kernel(print_kernel(k));
    REQUIRE(p.has_value());
    REQUIRE(*p == k);
    // deterministic
    REQUIRE(random_kernel(static_cast<std::uint64_t>(seed)) == k);
    hashes.insert(kernel_hash(k));
    REQUIRE(static_cast<int>(k.ops.size()) >= opt.min_statements);
    REQUIRE(static_cast<int>(k.ops.size()) <= opt.max_statements);
    lengths[k.ops.size()]++;
    // sizes within the options
    for (const auto& d : k.dims) {
      REQUIRE(d.size >= 1);
      REQUIRE(d.size <= opt.max_extent);
    }
    for (const auto& t : k.tensors) REQUIRE(k.elements(t) <= opt.max_tensor_elements);
    for (std::size_t i = 0; i < k.ops.size(); ++i) {
      if (k.ops[i].kind() != OpKind::contract) continue;
      std::int64_t depth = 1;
      for (const auto& [name, size] : k.op_indices(i))
        if (contains(k.ops[i].reduce_indices, name)) depth *= size;
      REQUIRE(depth <= opt.max_contraction_depth);
    }
    // every input and temp is read by a later statement, every output written once and never read
    std::map<std::string, int> reads, writes;
    for (const auto& op : k.ops) {
      writes[op.out]++;
      for (const Expr* a : accesses(op.expr)) reads[a->tensor]++;
    }
    for (const auto& t : k.tensors) {
      if (t.role == Role::input) REQUIRE(reads[t.name] >= 1);
      if (t.role == Role::temp) REQUIRE(reads[t.name] >= 1);
      if (t.role == Role::output) {
        REQUIRE(writes[t.name] == 1);
        REQUIRE(reads[t.name] == 0);
      }
    }
    count_features(k, counts);
  }
  // different seeds give different kernels
  CHECK(hashes.size() >= static_cast<std::size_t>(n * 99 / 100));
  for (int len = opt.min_statements; len <= opt.max_statements; ++len) CHECK(lengths[static_cast<std::size_t>(len)] >= n / 20);

  std::string report;
  for (const auto& [f, c] : counts) report += fmt::format("  {:32} {}\n", f, c);
  INFO("feature counts over " << n << " kernels:\n" << report);
  // each promised feature occurs in a reasonable share of the kernels (at least 2%, i.e. 40)
  const std::vector<std::string> features = {
      "contraction over 1 indices", "contraction over 2 indices", "contraction over 3 indices",
      "transposed contraction operand", "batched contraction", "chained contractions", "matmul epilogue activation",
      "sum reduction", "max reduction", "min reduction", "mean reduction", "row reduction", "column sum",
      "column reduction", "mean of squares", "rsqrt", "softmax exp(x - max)", "broadcast", "permuted access",
      "temp read by 2+ statements", "2+ outputs", "rank 3+ tensor", "extent not divisible by 32",
      "extent divisible by 32", "input bf16", "input fp16", "input fp32", "input fp8_e4m3", "output bf16",
      "output fp16", "output fp32", "output fp8_e4m3", "temp fp32", "temp bf16", "temp fp16"};
  for (const auto& f : features) {
    INFO(f);
    CHECK(counts[f] >= n / 50);
  }
  // a temp is fp32, or bf16/fp16 where its statement is a cast (never fp8: too coarse to check)
  CHECK(counts["temp fp8_e4m3"] == 0);
  WARN("feature counts over " << n << " kernels:\n" << report);
}

TEST_CASE("random kernel options", "[ir][random]") {
  RandomKernelOptions o;
  o.min_statements = 1;
  o.max_statements = 1;
  o.low_precision = false;
  o.max_extent = 24;
  o.max_tensor_elements = 256;
  o.max_contraction_depth = 16;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Kernel k = random_kernel(seed, o);
    INFO(print_kernel(k));
    REQUIRE(k.ops.size() == 1);
    for (const auto& t : k.tensors) {
      REQUIRE(t.dtype == DType::fp32);
      REQUIRE(k.elements(t) <= 256);
    }
    for (const auto& d : k.dims) REQUIRE(d.size <= 24);
  }
  // the Rng overload advances the generator: two draws from one stream differ, and replaying it repeats them
  kevo::Rng a(42), b(42);
  const Kernel k1 = random_kernel(a), k2 = random_kernel(a);
  CHECK(k1 != k2);
  CHECK(random_kernel(b) == k1);
  CHECK(random_kernel(b) == k2);
  CHECK(random_kernel(std::uint64_t{42}) == k1);

  // contractions over one index only (what the schedule module derives spaces for)
  RandomKernelOptions one;
  one.max_contracted_indices = 1;
  int contractions = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Kernel k = random_kernel(seed, one);
    for (const auto& op : k.ops)
      if (op.kind() == OpKind::contract) {
        ++contractions;
        REQUIRE(op.reduce_indices.size() == 1);
      }
  }
  CHECK(contractions >= 100);

  RandomKernelOptions bad;
  bad.min_statements = 3;
  bad.max_statements = 2;
  CHECK_THROWS_AS(random_kernel(1, bad), kevo::Error);
  bad = {};
  bad.max_contracted_indices = 0;
  CHECK_THROWS_AS(random_kernel(1, bad), kevo::Error);
}

TEST_CASE("random kernels evaluate to finite values, and fp32 agrees with fp64", "[ir][random]") {
  int evaluated = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Kernel k = random_kernel(seed * 7 + 3);
    INFO("seed " << seed * 7 + 3 << "\n" << print_kernel(k));
    const auto in = random_inputs(k, seed);
    const auto f32 = evaluate(k, in);
    const auto f64 = evaluate(k, in, {.fp64 = true});
    for (std::size_t t = 0; t < k.tensors.size(); ++t) {
      if (k.tensors[t].role != Role::output) continue;
      INFO("output " << k.tensors[t].name);
      double ss = 0;
      for (float w : f64[t]) ss += double{w} * w;
      const double rms = std::sqrt(ss / static_cast<double>(std::max<std::size_t>(f64[t].size(), 1)));
      const DType dt = k.tensors[t].dtype;
      const double ulp = dt == DType::fp32 ? 0x1p-20 : dt == DType::bf16 ? 0x1p-7 : dt == DType::fp16 ? 0x1p-10 : 0x1p-3;
      for (std::size_t i = 0; i < f64[t].size(); ++i) {
        INFO("element " << i);
        REQUIRE(std::isfinite(f64[t][i]));
        REQUIRE(std::isfinite(f32[t][i]));
        REQUIRE(std::abs(f64[t][i]) < 30000.0f);  // far from fp16's overflow
        // one storage ulp for a rounding boundary between the two, plus fp32 noise
        REQUIRE(std::abs(double{f32[t][i]} - f64[t][i]) <= 2 * ulp * (std::abs(f64[t][i]) + std::max(1.0, rms) * 1e-3) + 1e-4 * std::max(1.0, rms));
      }
    }
    ++evaluated;
  }
  CHECK(evaluated == 300);
}
