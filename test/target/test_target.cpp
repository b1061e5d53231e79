#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "kevo/core/io.hpp"
#include "kevo/target.hpp"

using kevo::target::load_target;
using kevo::target::parse_target;

namespace {
std::string trn1_text() { return kevo::target::builtin_target_json("trn1"); }
// Replaces the first occurrence of `from` in s.
std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto p = s.find(from);
  REQUIRE(p != std::string::npos);
  s.replace(p, from.size(), to);
  return s;
}
int line_of(const std::string& s, const std::string& needle) {
  auto p = s.find(needle);
  REQUIRE(p != std::string::npos);
  return 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(p), '\n'));
}
}  // namespace

TEST_CASE("all four built-in targets load") {
  auto names = kevo::target::builtin_targets();
  REQUIRE(names == std::vector<std::string>{"trn1", "trn2", "trn3", "host"});
  for (const auto& n : names) {
    auto t = load_target(n);
    INFO(n << (t ? "" : t.error().str()));
    REQUIRE(t);
    CHECK(t->name == n);
    CHECK_FALSE(t->sources.empty());
  }
}

TEST_CASE("trn1 figures come from neuroncore.md") {
  auto t = load_target("trn1").value();
  CHECK(t.generation == "NeuronCore-v2");
  CHECK(t.sbuf_bytes_per_partition == 196608);
  CHECK(t.psum_banks * t.psum_bank_bytes == 16384);
  CHECK(t.pmax == 128);
  CHECK(t.stationary_fmax == 128);
  CHECK(t.moving_fmax == 512);
  CHECK(t.engine(kevo::target::Engine::tensor).clock_ghz == Approx(2.8));
  CHECK(t.dma_queues == 16);
  CHECK(t.port_conflicts);
  CHECK(t.peak_tensor_flops(kevo::ir::DType::bf16) == Approx(91.75e12).epsilon(0.01));
  CHECK(t.peak_tensor_flops(kevo::ir::DType::fp32) == Approx(t.peak_tensor_flops_bf16 / 4).epsilon(0.01));
}

TEST_CASE("generations differ where the hardware does") {
  auto t1 = load_target("trn1").value(), t2 = load_target("trn2").value(), t3 = load_target("trn3").value();
  CHECK(t2.sbuf_bytes_per_partition == 224 * 1024);
  CHECK(t3.sbuf_bytes_per_partition == 256 * 1024);
  CHECK_FALSE(t2.port_conflicts);
  CHECK(t3.peak_tensor_flops(kevo::ir::DType::fp8_e4m3) > t2.peak_tensor_flops(kevo::ir::DType::fp8_e4m3));
  CHECK(t1.hash() != t2.hash());
  CHECK(t2.hash() != t3.hash());
}

TEST_CASE("fp8 formats per generation: IEEE-style E4M3 on NC-v2/v3, both on NC-v4, every dtype on the host and by default") {
  using kevo::ir::DType;
  for (const char* n : {"trn1", "trn2"}) {
    const auto t = load_target(n).value();
    INFO(n);
    CHECK(t.stores(DType::fp8_e4m3));
    CHECK_FALSE(t.stores(DType::fp8_e4m3fn));
    CHECK(t.stores(DType::bf16));
  }
  const auto t3 = load_target("trn3").value();
  CHECK(t3.stores(DType::fp8_e4m3fn));
  CHECK(t3.stores(DType::fp8_e4m3));
  CHECK(load_target("host").value().stores(DType::fp8_e4m3fn));
  CHECK(t3.peak_tensor_flops(DType::fp8_e4m3fn) == t3.peak_tensor_flops(DType::fp8_e4m3));
  const std::string t1 = trn1_text();
  const std::string list = "\"dtypes\": [\"bf16\", \"fp16\", \"fp32\", \"fp8_e4m3\"],";
  auto all = parse_target(replace(t1, list, ""));  // left out: every dtype
  REQUIRE(all);
  CHECK(all->stores(DType::fp8_e4m3fn));
  CHECK(all->hash() != load_target("trn1").value().hash());
  auto unknown = parse_target(replace(t1, "\"fp8_e4m3\"],", "\"int8\"],"), "t.json");
  REQUIRE_FALSE(unknown);
  CHECK_THAT(unknown.error().str(), Catch::Contains("t.json:") && Catch::Contains("'dtypes': expected one of bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn"));
  auto twice = parse_target(replace(t1, "\"fp8_e4m3\"],", "\"bf16\"],"), "t.json");
  REQUIRE_FALSE(twice);
  CHECK_THAT(twice.error().str(), Catch::Contains("'bf16' is given twice"));
  auto empty = parse_target(replace(t1, list, "\"dtypes\": [],"), "t.json");
  REQUIRE_FALSE(empty);
  CHECK_THAT(empty.error().str(), Catch::Contains("'dtypes' must be a non-empty array"));
}

TEST_CASE("row tiling of the PE array: 64-row tiles on NC-v2, 32 from NC-v3, none on the host; optional in a file") {
  CHECK(load_target("trn1").value().row_tile_min == 64);
  CHECK(load_target("trn2").value().row_tile_min == 32);
  CHECK(load_target("trn3").value().row_tile_min == 32);
  CHECK(load_target("host").value().row_tile_min == 0);
  const std::string t1 = trn1_text();
  // left out: no row tiling, and the file still loads
  auto none = parse_target(replace(t1, ", \"row_tile_min\": 64", ""));
  REQUIRE(none);
  CHECK(none->row_tile_min == 0);
  CHECK(none->hash() != load_target("trn1").value().hash());
  auto bad = parse_target(replace(t1, "\"row_tile_min\": 64", "\"row_tile_min\": 48"), "t.json");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().str(), Catch::Contains("must be 0, 32 or 64") && Catch::Contains("t.json:"));
}

TEST_CASE("engine rules of tensor_scalar and activation: per generation, optional, located when wrong") {
  using kevo::target::Engine;
  using Ops = kevo::target::EngineSpec::TensorScalarOps;
  for (const char* n : {"trn1", "trn2", "trn3"}) {
    INFO(n);
    const auto t = load_target(n).value();
    // "Add and Multiply are supported on Scalar Engine only from NeuronCore-v3"
    CHECK(t.engine(Engine::scalar).tensor_scalar_ops == (std::string(n) == "trn1" ? Ops::unary : Ops::mul_add));
    CHECK(t.engine(Engine::gpsimd).tensor_scalar_ops == Ops::rsqrt);
    CHECK(t.engine(Engine::vector).tensor_scalar_ops == Ops::all);
    CHECK(t.engine(Engine::scalar).immediate_bias == (std::string(n) != "trn1"));
  }
  const auto h = load_target("host").value();
  for (int e = 0; e < kevo::target::kNumEngines; ++e) {
    CHECK(h.engines[static_cast<std::size_t>(e)].tensor_scalar_ops == Ops::all);
    CHECK(h.engines[static_cast<std::size_t>(e)].immediate_bias);
  }
  using kevo::ir::Fn;
  const auto trn2 = load_target("trn2").value();
  const auto& sc = trn2.engine(Engine::scalar);
  const Fn add = Fn::add, mul = Fn::mul, sub = Fn::sub;
  CHECK(kevo::target::runs_tensor_scalar(sc, Fn::mul, &add));
  CHECK(kevo::target::runs_tensor_scalar(sc, Fn::mul, nullptr));
  CHECK(kevo::target::runs_tensor_scalar(sc, Fn::add, nullptr));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc, Fn::add, &mul));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc, Fn::sub, nullptr));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc, Fn::mul, &sub));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc, Fn::max, nullptr));
  const auto trn1 = load_target("trn1").value();  // kept alive: its EngineSpec is read below
  const auto& sc1 = trn1.engine(Engine::scalar);
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc1, Fn::mul, &add));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc1, Fn::mul, nullptr));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc1, Fn::add, nullptr));
  CHECK(kevo::target::runs_tensor_scalar(sc1, Fn::reciprocal, nullptr));
  CHECK(kevo::target::runs_tensor_scalar(sc1, Fn::abs, nullptr));
  CHECK_FALSE(kevo::target::runs_tensor_scalar(sc1, Fn::abs, &add));
  const std::string t1 = trn1_text();
  // left out: every operator and a constant bias, and the hash says the file differs
  auto open = parse_target(replace(replace(t1, ", \"immediate_bias\": false, \"tensor_scalar_ops\": \"unary\"", ""),
                                   ", \"tensor_scalar_ops\": \"rsqrt\"", ""));
  REQUIRE(open);
  CHECK(open->engine(Engine::scalar).tensor_scalar_ops == Ops::all);
  CHECK(open->engine(Engine::gpsimd).tensor_scalar_ops == Ops::all);
  CHECK(open->engine(Engine::scalar).immediate_bias);
  CHECK(open->hash() != load_target("trn1").value().hash());
  auto bad = parse_target(replace(t1, "\"tensor_scalar_ops\": \"unary\"", "\"tensor_scalar_ops\": \"multiply\""), "t.json");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().str(), Catch::Contains("'engines.scalar.tensor_scalar_ops' = \"multiply\" must be \"all\", \"mul_add\", \"rsqrt\" or \"unary\"") &&
                                    Catch::Contains("t.json:"));
  bad = parse_target(replace(t1, "\"immediate_bias\": false", "\"immediate_bias\": 0"), "t.json");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().str(), Catch::Contains("'engines.scalar.immediate_bias' must be true or false, found an integer"));
}

TEST_CASE("the host target describes a CPU with looser tile limits") {
  auto h = load_target("host").value();
  CHECK(h.host);
  CHECK(h.stationary_fmax > 128);
  CHECK(h.peak_tensor_flops(kevo::ir::DType::fp32) == Approx(75e9));
}

TEST_CASE("target hash is stable and sensitive to every figure") {
  auto a = load_target("trn2").value();
  auto b = load_target("trn2").value();
  CHECK(a.hash() == b.hash());
  b.dma_fixed_ns += 1;
  CHECK(a.hash() != b.hash());
}

TEST_CASE("a target file loads from a path") {
  auto dir = std::filesystem::path(KEVO_BINARY_DIR) / "test_target_tmp";
  std::filesystem::create_directories(dir);
  auto p = dir / "mine.json";
  kevo::write_file_atomic(p, replace(trn1_text(), "\"trn1\"", "\"mine\""));
  auto t = load_target(p.string());
  REQUIRE(t);
  CHECK(t->name == "mine");
}

TEST_CASE("an unknown target name is an error naming the built-ins") {
  auto t = load_target("trn9");
  REQUIRE_FALSE(t);
  CHECK(t.error().message.find("trn1, trn2, trn3, host") != std::string::npos);
}

TEST_CASE("an unknown field is located and lists the allowed ones") {
  auto text = replace(trn1_text(), "\"psum_banks\": 8,", "\"psum_bankz\": 8,");
  auto t = parse_target(text, "x.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().loc.file == "x.json");
  CHECK(t.error().loc.line == line_of(text, "psum_bankz"));
  CHECK(t.error().loc.column == 5);
  CHECK(t.error().message.find("unknown field 'psum_bankz' in 'memory'") != std::string::npos);
  CHECK(t.error().message.find("psum_banks") != std::string::npos);
}

TEST_CASE("a missing field is located at its object") {
  auto text = replace(trn1_text(), "\"min_cycles\": 64, ", "");
  auto t = parse_target(text, "x.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().loc.line == line_of(text, "\"matmul\""));
  CHECK(t.error().message == "missing field 'min_cycles' in 'matmul'");
}

TEST_CASE("a mistyped value is located at the value") {
  auto text = replace(trn1_text(), "\"queues\": 16", "\"queues\": \"sixteen\"");
  auto t = parse_target(text, "x.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().loc.line == line_of(text, "sixteen"));
  const auto line_start = text.rfind('\n', text.find("sixteen")) + 1;
  CHECK(t.error().loc.column == static_cast<int>(text.find("\"sixteen\"") - line_start) + 1);
  CHECK(t.error().message == "'dma.queues' must be an integer, found a string");
}

TEST_CASE("an out-of-range value is located and gives the range") {
  auto text = replace(trn1_text(), "\"pmax\": 128", "\"pmax\": 4096");
  auto t = parse_target(text, "x.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().loc.line == line_of(text, "4096"));
  CHECK(t.error().message.find("'tile_limits.pmax' = 4096 is out of range") != std::string::npos);
}

TEST_CASE("simulator parameters and DMA figures outside their physical range are located errors") {
  // values that loaded before and gave "no DMA bandwidth" errors or latencies of 1e300 s later
  struct Case {
    std::string from, to, what;
  };
  const std::string base = trn1_text();
  const auto hbm = base.substr(base.find("\"hbm_efficiency\""));
  const std::string hbm_field = hbm.substr(0, hbm.find_first_of(",\n}"));
  const Case cases[] = {
      {hbm_field, "\"hbm_efficiency\": 0", "'sim.params.hbm_efficiency' = 0 is outside its physical range [0.05, 1]"},
      {hbm_field, "\"hbm_efficiency\": 1e30", "'sim.params.hbm_efficiency' = 1e+30 is outside its physical range"},
      {"\"queues\": 16", "\"queues\": 255", "'dma.queues' = 255 is out of range"},
      {"\"descriptor_ns\": 0.0", "\"descriptor_ns\": 1e30", "'dma.descriptor_ns' = 1e+30 is out of range"},
  };
  for (const auto& c : cases) {
    INFO(c.to);
    const auto text = replace(base, c.from, c.to);
    auto t = parse_target(text, "x.json");
    REQUIRE_FALSE(t);
    CHECK(t.error().loc.line == line_of(text, c.to));
    CHECK(t.error().message.find(c.what) != std::string::npos);
  }
  for (const char* name : {"trn1", "trn2", "trn3"}) {  // the shipped fits are inside the ranges
    auto t = load_target(name);
    REQUIRE(t);
    for (const auto& [k, v] : t->sim_params) {
      const auto r = kevo::target::sim_param_range(k);
      CHECK(v >= r.lo);
      CHECK(v <= r.hi);
    }
  }
}

TEST_CASE("a target name with control bytes is a located error (kevo prints it in every header)") {
  const auto text = replace(trn1_text(), "\"name\": \"trn1\"", "\"name\": \"a\\u001b[31mred\"");
  auto t = parse_target(text, "x.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().message == "'name' = \"a\\x1b[31mred\" holds control bytes");
}

TEST_CASE("malformed JSON is a located error, never a crash") {
  std::string text = "{\n  \"name\": \"x\",\n  \"generation\": ,\n}";
  auto t = parse_target(text, "bad.json");
  REQUIRE_FALSE(t);
  CHECK(t.error().loc.line == 3);
  CHECK(t.error().message.rfind("invalid JSON", 0) == 0);
  for (std::size_t cut = 0; cut < trn1_text().size(); cut += 97) CHECK_FALSE(parse_target(trn1_text().substr(0, cut)));
}

TEST_CASE("a GPU target without its kind and a kind on a NeuronCore target are named as such") {
  const auto gpu = parse_target("{\n  \"name\": \"g\",\n  \"sm_count\": 132\n}", "g.json");
  REQUIRE_FALSE(gpu);
  CHECK(gpu.error().loc.line == 3);
  CHECK(gpu.error().message.find("add \"kind\": \"gpu\"") != std::string::npos);
  const auto kind = parse_target(replace(trn1_text(), "\"name\"", "\"kind\": \"neuron\", \"name\""), "k.json");
  REQUIRE_FALSE(kind);
  CHECK(kind.error().message.find("'kind' is only for GPU targets") != std::string::npos);
  // Nesting is bounded (the tree is destroyed recursively): refused at the 65th level.
  const auto deep = parse_target(std::string(5000, '[') + std::string(5000, ']'), "d.json");
  REQUIRE_FALSE(deep);
  CHECK(deep.error().loc.column == 65);
  CHECK(deep.error().message == "nested deeper than 64 levels");
}
