// The gpu module without a GPU: the H200 target's data, the structural classification of kernels,
// the Triton schedule space and its validity, the emitter (every sampled schedule's module parses
// in python3; golden structure), and TritonProblem driving a worker that answers without a GPU.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/io.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/gpu.hpp"
#include "kevo/ir/workloads.hpp"

using namespace kevo;
using namespace kevo::gpu;

// The Triton space reports invalid schedules with kevo's one invalid-schedule type (shared with the
// NeuronCore planner and lowering), not a GPU-only struct.
static_assert(std::is_same_v<decltype(std::declval<const TritonSpace&>().check(std::declval<const Genome&>())),
                             kevo::Expected<void, kevo::Invalid>>);

namespace {

GpuTarget h200() {
  auto t = load_gpu_target("h200");
  REQUIRE(t);
  return *t;
}

GpuKernel classified(const std::string& spec) {
  auto k = ir::workload(spec);
  REQUIRE(k);
  auto g = classify(*k);
  INFO(spec << ": " << (g ? std::string() : g.error()));
  REQUIRE(g);
  return *g;
}

Genome with(const TritonSpace& s, const std::string& text) {
  auto g = s.parse(text);
  INFO(text << ": " << (g ? std::string() : g.error()));
  REQUIRE(g);
  return *g;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// python3's parser on every file: the names of those that do not parse, with the error.
std::string python_parse_errors(const std::vector<std::string>& sources) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kevo_gpu_test_{}", static_cast<long>(::getpid()));
  std::filesystem::create_directories(dir);
  for (std::size_t i = 0; i < sources.size(); ++i) std::ofstream(dir / fmt::format("m{}.py", i)) << sources[i];
  const std::string cmd = fmt::format(
      "python3 -c 'import ast,glob,sys\nfor f in sorted(glob.glob(sys.argv[1] + \"/*.py\")):\n    try:\n        ast.parse(open(f).read())\n"
      "    except SyntaxError as e:\n        print(f, e)' '{}' 2>&1",
      dir.string());
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = pclose(pipe);
  if (const char* keep = std::getenv("KEVO_GPU_DUMP_DIR")) {  // for reading the emitted modules
    std::filesystem::create_directories(keep);
    for (std::size_t i = 0; i < sources.size(); ++i) std::ofstream(std::filesystem::path(keep) / fmt::format("m{}.py", i)) << sources[i];
  }
  std::filesystem::remove_all(dir);
  if (rc != 0 && out.empty()) out = fmt::format("python3 exited with {}", rc);
  return out;
}

const std::vector<std::string> kWorkloads = {
    "matmul:M=4096,N=4096,K=4096,dtype=bf16",
    "matmul:M=1000,N=700,K=512,dtype=fp16,layout=tn",
    "matmul:M=2048,N=2048,K=2048,dtype=bf16,layout=nt",
    "matmul_bias_act:M=4096,N=4096,K=4096,dtype=bf16,act=gelu",
    "matmul_bias_act:M=512,N=384,K=256,dtype=bf16,act=silu",
    "rmsnorm:R=8192,C=8192,dtype=bf16",
    "softmax:R=8192,C=8192,dtype=bf16",
    "layernorm:R=8192,C=8192,dtype=bf16",
    "layernorm:R=128,C=3000,dtype=bf16",
    "softmax:R=256,C=1000,dtype=fp32",
    "attention:B=1,H=16,S=4096,D=128,causal=1,dtype=bf16",
    "attention:B=2,H=4,S=1024,D=64,causal=0,dtype=fp16",
};

}  // namespace

TEST_CASE("the H200 target is data with its sources", "[gpu][target]") {
  const GpuTarget t = h200();
  CHECK(t.sm_count == 132);
  CHECK(t.smem_bytes_per_block == 227 * 1024);
  CHECK(t.smem_bytes_per_sm == 228 * 1024);
  CHECK(t.registers_per_sm == 65536);
  CHECK(t.peak(ir::DType::bf16) == Approx(989e12));
  CHECK(t.peak(ir::DType::fp8_e4m3fn) == Approx(1979e12));  // Hopper's E4M3 is OCP's E4M3FN
  CHECK(t.peak(ir::DType::fp8_e4m3) == 0);                  // the IEEE-style one is NeuronCore's
  CHECK(t.hbm_bytes_per_s == Approx(4.8e12));
  CHECK(t.tc_m == 64);
  CHECK(t.sources.size() >= 4);
  for (const auto& [k, v] : t.sources) CHECK(has(v, "https://"));
  CHECK(is_gpu_target("h200"));
  CHECK_FALSE(is_gpu_target("trn2"));
  auto bad = load_gpu_target("h999");
  REQUIRE_FALSE(bad);
  CHECK(has(bad.error(), "h200"));
  auto no_kind = parse_gpu_target(R"({"name":"x"})", "x.json");
  REQUIRE_FALSE(no_kind);
  CHECK(has(no_kind.error(), "x.json:1:1: missing field 'kind'"));
  CHECK_FALSE(parse_gpu_target("{", "z.json"));
}

// The built-in h200.json with one field replaced: `from` (a unique substring) becomes `to`.
static std::string h200_with(const std::string& from, const std::string& to) {
  std::string s = kevo::read_file(KEVO_SOURCE_DIR "/targets/gpu/h200.json");
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

TEST_CASE("a GPU target's every field is typed and ranged and each mistake located at its line and column", "[gpu][target]") {
  REQUIRE(parse_gpu_target(h200_with("\"m\": 64", "\"m\": 64"), "h.json"));
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"\"m\": 64", "\"m\": 0", "h.json:19:"},                        // the line of tensor_core
      {"\"m\": 64", "\"m\": 0", "'tensor_core.m' = 0 is out of range"},
      {"\"m\": 64", "\"m\": -3", "'tensor_core.m' = -3 is out of range"},
      {"\"m\": 64", "\"m\": 1e300", "'tensor_core.m' must be an integer, found a number"},
      {"\"k_16bit\": 16", "\"k_16bit\": 0", "'tensor_core.k_16bit' = 0 is out of range"},
      {"\"n_step\": 8", "\"n_step\": 7", "'tensor_core.n_max' = 256 must be a multiple of 'tensor_core.n_step' = 7"},
      {"\"n_step\": 8", "\"n_stpe\": 8", "unknown field 'n_stpe' in 'tensor_core'"},
      {"\"sm_count\": 132", "\"sm_count\": \"132\"", "h.json:6:15: 'sm_count' must be an integer, found a string"},
      {"\"sm_count\": 132", "\"sm_count\": 0", "'sm_count' = 0 is out of range"},
      {"\"name\": \"h200\"", "\"name\": 200", "h.json:2:11: 'name' must be a string, found an integer"},
      {"\"NVIDIA H200 SXM (Hopper GH100, compute capability 9.0)\"", "[\"x\"]", "'description' must be a string, found an array"},
      {"\"kind\": \"gpu\"", "\"kind\": \"GPU\"", "h.json:3:11: 'kind' must be \"gpu\""},
      {"\"hbm_bytes_per_s\": 4.8e12", "\"hbm_bytes_per_s\": -1", "'hbm_bytes_per_s' = -1 is out of range"},
      {"\"hbm_bytes_per_s\": 4.8e12", "\"hbm_bytes_per_s\": 1e999", "h.json:17:26: invalid JSON: number overflow parsing '1e999'"},
      {"\"bf16\": 989e12", "\"bf16\": \"989e12\"", "'peak_flops.bf16' must be a number, found a string"},
      {"\"bf16\": 989e12", "\"fp16\": 989e12", "duplicate field 'fp16' in 'peak_flops'"},
      {"\"threads_per_block_max\": 1024", "\"threads_per_block_max\": 4096", "'threads_per_block_max' exceeds 'threads_per_sm_max'"},
      {"\"smem_bytes_per_block\": 232448", "\"smem_bytes_per_block\": 300000", "'smem_bytes_per_block' exceeds"},
      {"\"tensor_core\": { \"instruction\": \"wgmma.mma_async\", \"m\": 64, \"n_min\": 8, \"n_max\": 256, \"n_step\": 8, \"k_16bit\": 16, \"k_8bit\": 32, \"k_tf32\": 8 }",
       "\"tensor_core\": 5", "'tensor_core' must be an object, found an integer"},
      {"\"sources\": {", "\"sources\": {\"a\": 1,", "'sources.a' must be a string, found an integer"},
      {"\"warp_size\": 32", "\"warp_size\": 32, \"warp_size\": 32", "duplicate field 'warp_size'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.to);
    const auto r = parse_gpu_target(h200_with(c.from, c.to), "h.json");
    REQUIRE_FALSE(r);
    CHECK(has(r.error(), c.expect));
    CHECK(r.error().find('\n') == std::string::npos);  // one line
  }
  // Nesting is bounded: a deep document is refused with its place, not a stack overflow.
  const auto deep = parse_gpu_target(std::string(100000, '[') + std::string(100000, ']'), "d.json");
  REQUIRE_FALSE(deep);
  CHECK(has(deep.error(), "d.json:1:65: nested deeper than 64 levels"));
}

TEST_CASE("kernels are classified by their structure", "[gpu][kernel]") {
  const auto mm = classified("matmul:M=4096,N=2048,K=1024,dtype=bf16");
  CHECK(mm.family == Family::matmul);
  CHECK((mm.M == 4096 && mm.N == 2048 && mm.K == 1024));
  CHECK_FALSE(mm.has_epilogue());
  CHECK(mm.flops() == Approx(2.0 * 4096 * 2048 * 1024));
  CHECK(classified("matmul:M=64,N=64,K=64,layout=tn").a_trans);
  CHECK(classified("matmul:M=64,N=64,K=64,layout=nt").b_trans);
  const auto fused = classified("matmul_bias_act:M=256,N=256,K=256,dtype=bf16,act=gelu");
  CHECK((fused.bias && fused.act == "gelu" && fused.bias_dtype == ir::DType::fp32));
  CHECK(fused.role("bias") != nullptr);
  CHECK(classified("matmul_bias_act:M=256,N=256,K=256,act=none").act == "none");
  const auto rms = classified("rmsnorm:R=8192,C=4096,dtype=bf16");
  CHECK((rms.family == Family::row && rms.row == RowOp::rmsnorm && rms.R == 8192 && rms.C == 4096));
  CHECK(rms.eps == Approx(1e-6));
  CHECK(rms.min_bytes() == Approx(2.0 * (8192.0 * 4096 * 2) + 4096 * 2));
  const auto ln = classified("layernorm:R=64,C=128,eps=0.001");
  CHECK((ln.row == RowOp::layernorm && ln.eps == Approx(1e-3)));
  CHECK((ln.role("gamma")->name == "gamma" && ln.role("beta")->name == "beta"));
  CHECK(classified("softmax:R=64,C=128").row == RowOp::softmax);
  const auto at = classified("attention:B=1,H=16,S=4096,D=128,causal=1,dtype=bf16");
  CHECK((at.family == Family::attention && at.causal && at.S == 4096 && at.D == 128 && at.H == 16));
  CHECK(at.scale == Approx(1.0 / std::sqrt(128.0)));
  CHECK(at.flops() == Approx(4.0 * 16 * 4096.0 * 4096 * 128 / 2));
  CHECK_FALSE(classified("attention:B=1,H=2,S=256,D=64,causal=0").causal);
  for (const char* spec : {"bmm:B=2,M=64,N=64,K=64", "swiglu:M=64,D=64,F=128", "eltwise:R=64,C=64"}) {
    auto k = ir::workload(spec);
    REQUIRE(k);
    auto g = classify(*k);
    INFO(spec);
    REQUIRE_FALSE(g);
    CHECK(has(g.error(), "kernel "));
  }
}

TEST_CASE("the schedule space's validity is typed", "[gpu][space]") {
  const GpuTarget t = h200();
  const auto s = TritonSpace::derive(classified("matmul_bias_act:M=4096,N=4096,K=4096,dtype=bf16,act=gelu"), t);
  for (const char* gene : {"block_m", "block_n", "block_k", "warps", "stages", "group_m", "split_k", "program", "epilogue"})
    CHECK(s.space().find(gene));
  auto code = [&](const std::string& text) {
    auto ok = s.check(with(s, text));
    return ok ? std::string("valid") : ok.error().code;
  };
  CHECK(code("block_m=128 block_n=256 block_k=64 warps=8 stages=3") == "valid");
  // 5 x (256x128 + 128x256) x 2 B = 655360 B
  CHECK(code("block_m=256 block_n=256 block_k=128 warps=8 stages=5") == "smem_overflow");
  auto smem = s.check(with(s, "block_m=256 block_n=256 block_k=128 warps=8 stages=5"));
  REQUIRE_FALSE(smem);
  CHECK(has(smem.error().message, "655360 B > 232448 B"));
  CHECK(code("block_m=256 block_n=256 block_k=32 warps=4 stages=2") == "register_overflow");
  CHECK(code("block_m=128 block_n=128 block_k=128 warps=8 stages=2 split_k=4 epilogue=separate") == "valid");
  CHECK(code("block_m=128 block_n=128 block_k=128 warps=8 stages=2 split_k=4 epilogue=fused") == "split_k_epilogue");
  CHECK(code("block_m=128 block_n=128 block_k=64 warps=8 stages=2 split_k=2 program=persistent epilogue=separate") == "persistent_split_k");
  const auto small = TritonSpace::derive(classified("matmul:M=64,N=64,K=96,dtype=bf16"), t);
  CHECK(small.check(with(small, "block_m=64 block_n=64 block_k=64 split_k=1")).error().code == "split_k_indivisible");
  CHECK(small.check(with(small, "block_m=128 block_n=64 block_k=32")).error().code == "block_exceeds_dim");
  const auto row = TritonSpace::derive(classified("rmsnorm:R=8192,C=8192,dtype=bf16"), t);
  CHECK(row.check(with(row, "block_c=8192 passes=1 rows=4 warps=4")).error().code == "register_overflow");
  CHECK(row.check(with(row, "block_c=8192 passes=1 rows=1 warps=16 stages=1 cache=normal")));
  CHECK(row.check(with(row, "block_c=8192 passes=1 rows=1 warps=16 stages=1 cache=keep")).error().code == "keep_one_pass");
  CHECK(row.check(with(row, "block_c=8192 passes=1 rows=1 warps=16 stages=3 cache=normal")).error().code == "stages_one_pass");
  CHECK(row.check(with(row, "block_c=2048 rows=1 warps=8 stages=3 cache=keep")));
  CHECK(row.check(with(row, "block_c=8192 passes=1 rows=1 warps=16 stages=1 cache=normal program=persistent")));
  CHECK(row.check(with(row, "block_c=4096 passes=1 rows=1 warps=16 stages=1 cache=normal")).error().code == "row_split");
  CHECK(row.check(with(row, "block_c=8192 passes=2 rows=1 warps=16 stages=1 cache=keep")));
  const auto few = TritonSpace::derive(classified("rmsnorm:R=256,C=1000,dtype=bf16"), t);
  auto no_loop = few.check(with(few, "block_c=1024 passes=1 rows=1 warps=8 stages=1 cache=normal program=persistent"));
  REQUIRE_FALSE(no_loop);
  CHECK(no_loop.error().code == "persistent_no_loop");
  CHECK(has(no_loop.error().message, "256 row groups fit in one wave of 1056"));
  // the row seeds include one pass with the whole row and Inductor's two-pass structure
  bool inductor_like = false, whole_row = false;
  for (const auto& g : row.seeds()) {
    inductor_like |= row.text(g) == "block_c=8192 rows=1 warps=16 passes=2 stages=1 cache=keep store=normal program=row";
    whole_row |= row.decode(g).get("passes") == 1;
  }
  CHECK(inductor_like);
  CHECK(whole_row);
  // operand layouts are genes of the matmul family
  CHECK(s.space().find("a_layout"));
  CHECK(s.space().find("b_layout"));
  CHECK(code("block_m=128 block_n=256 block_k=64 warps=8 stages=3 b_layout=transposed_copy") == "valid");
  const auto att = TritonSpace::derive(classified("attention:B=1,H=16,S=4096,D=128,causal=1,dtype=bf16"), t);
  CHECK(att.check(with(att, "block_m=64 block_n=128 warps=4 stages=2")).error().code == "causal_blocks");
  CHECK(att.check(with(att, "block_m=128 block_n=128 warps=8 stages=4")).error().code == "smem_overflow");
  // parse errors name the gene or the value
  CHECK(has(s.parse("block_q=64").error(), "no gene 'block_q'"));
  CHECK(has(s.parse("block_m=96").error(), "no value '96'"));
  CHECK(has(s.parse("block_m").error(), "not gene=value"));
  // seeds are valid; text round-trips; repair makes random genomes valid
  for (const auto* sp : {&s, &row, &att}) {
    REQUIRE_FALSE(sp->seeds().empty());
    for (const auto& g : sp->seeds()) {
      CHECK(sp->check(g));
      CHECK(*sp->parse(sp->text(g)) == g);
    }
    Rng rng(7);
    int repaired = 0;
    for (int i = 0; i < 200; ++i) {
      Genome g = sp->space().random(rng);
      if (sp->repair(g)) {
        CHECK(sp->check(g));
        ++repaired;
      }
    }
    CHECK(repaired > 150);
  }
}

TEST_CASE("emitted Triton modules parse and have the schedule's structure", "[gpu][emit]") {
  const GpuTarget t = h200();
  std::vector<std::string> sources;
  Rng rng(11);
  for (const auto& w : kWorkloads) {
    const auto k = classified(w);
    const auto s = TritonSpace::derive(k, t);
    std::vector<Genome> gs = s.seeds();
    for (int i = 0; i < 40 && gs.size() < 12; ++i) {
      Genome g = s.space().random(rng);
      if (s.check(g)) gs.push_back(g);
    }
    for (const auto& g : gs) {
      const std::string src = emit_triton(k, s.decode(g), t);
      CHECK(src == emit_triton(k, s.decode(g), t));  // deterministic
      CHECK(has(src, "@triton.jit"));
      CHECK(has(src, "def launch("));
      CHECK(has(src, "# schedule: " + s.text(g)));
      CHECK(has(src, fmt::format("num_warps={}", s.decode(g).get("warps"))));
      sources.push_back(src);
    }
  }
  const std::string errs = python_parse_errors(sources);
  INFO(errs);
  CHECK(errs.empty());

  const auto mm = classified("matmul_bias_act:M=4096,N=4096,K=4096,dtype=bf16,act=gelu");
  const auto s = TritonSpace::derive(mm, t);
  const auto fused = emit_triton(mm, s.decode(with(s, "block_m=128 block_n=256 block_k=64 warps=8 stages=3 group_m=8")), t);
  CHECK(has(fused, "acc = _act(acc)"));
  CHECK(has(fused, "tl.sigmoid(1.5957691216057308"));
  CHECK(has(fused, "acc = tl.dot(a, b, acc)"));
  CHECK(has(fused, "matmul_kernel[(512, 1)](A, W, bias, C, M=4096, N=4096, K=4096, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3)"));
  CHECK_FALSE(has(fused, "epilogue_kernel"));
  CHECK_FALSE(has(fused, "mask="));  // every size divides: no masks
  const auto sep = emit_triton(mm, s.decode(with(s, "block_m=128 block_n=128 block_k=64 split_k=2 epilogue=separate")), t);
  CHECK(has(sep, "tl.atomic_add"));
  CHECK(has(sep, "epilogue_kernel[("));
  CHECK(has(sep, "ws.zero_()"));
  const auto pers = emit_triton(mm, s.decode(with(s, "block_m=128 block_n=256 program=persistent")), t);
  CHECK(has(pers, "NUM_PROGRAMS=132"));
  CHECK(has(pers, "for tile in range(tl.program_id(0), num_tiles, NUM_PROGRAMS)"));
  const auto edge = classified("matmul:M=1000,N=700,K=512,dtype=fp16,layout=tn");
  const auto es = TritonSpace::derive(edge, t);
  const auto edge_src = emit_triton(edge, es.decode(es.default_genome()), t);
  CHECK(has(edge_src, "offs_m % M"));
  CHECK(has(edge_src, "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N)"));
  CHECK(has(edge_src, "a_ptr + offs_am[:, None] * 1 + offs_k[None, :] * M"));  // A stored [K, M]
  CHECK(has(edge_src, "tl.float16"));

  const auto rms = classified("rmsnorm:R=8192,C=8192,dtype=bf16");
  const auto rs = TritonSpace::derive(rms, t);
  const auto one = emit_triton(rms, rs.decode(with(rs, "block_c=8192 passes=1 rows=1 warps=16 stages=1 cache=normal")), t);
  CHECK(has(one, "# one pass"));
  CHECK(has(one, "rstd = tl.rsqrt(tl.sum(x * x, axis=0) / C + EPS)"));
  CHECK(has(one, "row_kernel[(8192,)](X, gamma, X, Y, R=8192, C=8192, BLOCK_C=8192, ROWS=1, EPS=1e-06, num_warps=16, num_stages=1)"));
  const auto two = emit_triton(rms, rs.decode(with(rs, "block_c=2048 passes=2 rows=2 warps=8")), t);
  CHECK(has(two, "# pass 1"));
  CHECK(has(two, "rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)"));
  CHECK(has(two, "axis=1"));
  CHECK_FALSE(has(one, "eviction_policy"));
  CHECK_FALSE(has(one, "cache_modifier"));
  // cache=keep (Inductor's looped reductions): pass 1 keeps X in L2, pass 2 evicts it first
  const auto keep = emit_triton(rms, rs.decode(with(rs, "block_c=2048 passes=2 rows=1 warps=8 stages=1 cache=keep")), t);
  const auto p2 = keep.find("# pass 2");
  REQUIRE(p2 != std::string::npos);
  CHECK(has(keep.substr(0, p2), "tl.load(x_ptr + rows * C + c, eviction_policy=\"evict_last\")"));
  CHECK(has(keep.substr(p2), "tl.load(x_ptr + rows * C + c, eviction_policy=\"evict_first\")"));
  CHECK(has(keep.substr(p2), "tl.load(gamma_ptr + c, eviction_policy=\"evict_last\")"));
  CHECK(has(keep, "num_warps=8, num_stages=1)"));
  // Inductor's structure: pass 2 reloads the whole-row chunk that pass 1 kept in L2
  const auto whole = emit_triton(rms, rs.decode(with(rs, "block_c=8192 passes=2 rows=1 warps=16 stages=1 cache=keep")), t);
  CHECK(has(whole, "# pass 2"));
  CHECK(has(whole, "BLOCK_C=8192, ROWS=1, EPS=1e-06, num_warps=16, num_stages=1)"));
  const auto st = emit_triton(rms, rs.decode(with(rs, "block_c=8192 passes=1 rows=1 warps=16 stages=1 cache=stream store=stream")), t);
  CHECK(has(st, "tl.load(x_ptr + rows * C + cols, eviction_policy=\"evict_first\")"));
  CHECK(has(st, "cache_modifier=\".cs\")"));
  // persistent: 132 SMs x 4 programs of 16 warps loop over the 8192 rows
  const auto per = emit_triton(rms, rs.decode(with(rs, "block_c=8192 passes=1 rows=2 warps=16 stages=1 cache=normal program=persistent")), t);
  CHECK(has(per, "for rb in range(tl.program_id(0), R // ROWS, NUM_PROGRAMS):"));
  CHECK(has(per, "        rows = rb * ROWS + tl.arange(0, ROWS)"));
  CHECK(has(per, "row_kernel[(528,)](X, gamma, X, Y, R=8192, C=8192, BLOCK_C=8192, ROWS=2, EPS=1e-06, NUM_PROGRAMS=528, num_warps=16"));
  // operand layouts: B read from a transposed copy made (and timed) in launch()
  const auto plain = classified("matmul:M=4096,N=4096,K=4096,dtype=bf16");
  const auto ps = TritonSpace::derive(plain, t);
  const auto bt = emit_triton(plain, ps.decode(with(ps, "block_m=128 block_n=256 block_k=64 b_layout=transposed_copy")), t);
  CHECK(has(bt, "transpose_kernel[(64, 64)](B, b_t, ROWS=4096, COLS=4096, BLOCK=64, num_warps=4)"));
  CHECK(has(bt, "def transpose_kernel("));
  CHECK_FALSE(has(fused, "transpose_kernel"));
  CHECK(has(bt, "b_t = _workspace[\"b_t\"] = torch.empty((4096, 4096), dtype=B.dtype, device=B.device)"));
  CHECK(has(bt, "b_ptrs = b_ptr + offs_k[:, None] * 1 + offs_bn[None, :] * K"));  // B read as [N, K]
  CHECK(has(bt, "matmul_kernel[(512, 1)](A, b_t, C, C,"));
  CHECK(has(bt, "a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :] * 1"));
  const auto at_copy = emit_triton(edge, es.decode(with(es, "block_m=64 block_n=64 block_k=64 a_layout=transposed_copy")), t);
  // A is stored [K, M] (tn); its copy is [M, K] = [1000, 512]
  CHECK(has(at_copy, "a_t = _workspace[\"a_t\"] = torch.empty((1000, 512)"));
  CHECK(has(at_copy, "transpose_kernel[(8, 16)](A, a_t, ROWS=512, COLS=1000, BLOCK=64, num_warps=4)"));
  CHECK(has(at_copy, "a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :] * 1"));
  const auto at = classified("attention:B=1,H=16,S=4096,D=128,causal=1,dtype=bf16");
  const auto as = TritonSpace::derive(at, t);
  const auto asrc = emit_triton(at, as.decode(with(as, "block_m=128 block_n=64 warps=4 stages=3")), t);
  CHECK(has(asrc, "attention_kernel[(32, 16)]"));
  CHECK(has(asrc, "CAUSAL=True, HEAVY_FIRST=True"));
  CHECK(has(asrc, "QK_SCALE=0.12751743082459868"));  // log2(e) / sqrt(128)
}

TEST_CASE("TritonProblem measures through a worker; invalid schedules never reach it", "[gpu][problem]") {
  const std::string worker = std::string(KEVO_SOURCE_DIR) + "/test/gpu/workers/fake_triton_worker.py";
  auto k = ir::workload("matmul_bias_act:M=512,N=384,K=256,dtype=bf16,act=gelu");
  REQUIRE(k);
  runner::ProcessOptions po;
  po.command = {"python3", worker};
  po.timeout_s = 30;
  TritonProblem p(*k, h200(), po);
  const auto& s = p.triton_space();
  const std::vector<Genome> gs = {s.seeds().front(), with(s, "block_m=256 block_n=256 block_k=128 warps=8 stages=5"),
                                  s.seeds().front()};
  const auto ev = p.evaluate(gs);
  REQUIRE(ev.size() == 3);
  CHECK(ev[0].ok());
  CHECK(ev[0].fitness[0] > 0);
  CHECK(ev[0].metric("tflops") > 0);
  CHECK(ev[1].status == Status::invalid);
  CHECK(has(ev[1].reason, "smem_overflow"));
  CHECK(ev[2].fitness == ev[0].fitness);  // cached
  CHECK(p.worker_calls() == 1);

  // A worker that dies on some candidates: those are crashed, the next one gets a new worker.
  po.env = {"FAKE_MODE=crash_on_persistent"};
  po.retries = 0;
  TritonProblem q(*k, h200(), po);
  const auto& qs = q.triton_space();
  const auto ev2 = q.evaluate(std::vector<Genome>{with(qs, "block_m=128 block_n=128 program=persistent"), qs.seeds().front()});
  CHECK(ev2[0].status == Status::crashed);
  CHECK(ev2[1].ok());
}
