// The NKI emitter: valid Python (checked by python3's own parser), one nisa call per instruction,
// header with kernel/target/schedule, dtype spellings, parameters and returned outputs.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "../verify/program_builder.hpp"
#include "kevo/core/error.hpp"
#include "kevo/emit.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/builder.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

using kevo::ir::DType;
using kevo::lower::AccessPattern;
using kevo::lower::Instr;
using kevo::lower::Opcode;
using kevo::test::ProgramBuilder;

namespace {

// python3's parser on `src`: "" when it parses, else its error text.
std::string python_parse_error(const std::string& src) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kevo_emit_" + std::to_string(reinterpret_cast<std::uintptr_t>(&src)) + ".py");
  {
    std::ofstream f(path);
    f << src;
  }
  const std::string cmd = "python3 -c 'import ast,sys; ast.parse(sys.stdin.read())' < '" + path.string() + "' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = pclose(pipe);
  std::filesystem::remove(path);
  if (rc != 0 && out.empty()) out = "python3 exited with status " + std::to_string(rc);
  return rc == 0 ? "" : out;
}

std::size_t count(const std::string& s, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + 1)) ++n;
  return n;
}

kevo::ir::Kernel kernel(DType dt) {
  using namespace kevo::ir;
  KernelBuilder b("mm_act");
  b.dim("M", 64).dim("N", 64).dim("K", 64);
  b.input("A", dt, {"M", "K"}).input("B", dt, {"K", "N"}).output("C", dt, {"M", "N"});
  b.contract("C", {"m", "n"}, {"k"}, access("A", {"m", "k"}), access("B", {"k", "n"}));
  return b.build().value();
}

// A program that uses every opcode once or more (semantics do not matter for printing).
ProgramBuilder every_opcode(DType dt) {
  ProgramBuilder b;
  b.p.kernel_name = "mm_act";
  b.p.schedule_text = "tile m=32 n=64 k=32; order m n k\nload A@k x2";
  b.p.group_names = {"C = A @ B", "epilogue"};
  const int A = b.hbm("A", {64, 64}, 0, dt), B = b.hbm("B", {64, 64}, 1, dt), C = b.hbm("C", {64, 64}, 2, dt);
  const int at = b.sbuf("aT", 32, 32, dt, 2), bs = b.sbuf("b", 32, 64, dt, 2), ps = b.psum("acc", 32, 64),
            cs = b.sbuf("c", 32, 64, dt), red = b.sbuf("red", 32, 1), io = b.sbuf("io", 32, 64);
  int slot = 0;
  for (int m0 = 0; m0 < 64; m0 += 32) {
    for (int k0 = 0; k0 < 64; k0 += 32) {
      Instr t = ProgramBuilder::make(Opcode::dma_transpose, b.tile(at, 0, 32, 0, 32, slot), {b.rows(A, m0, 32, k0, 32)});
      t.group = 0;
      b.add(t);
      Instr l = ProgramBuilder::make(Opcode::dma_copy, b.tile(bs, 0, 32, 0, 64, slot), {b.rows(B, k0, 32, 0, 64)});
      l.group = 0;
      b.add(l);
      Instr mm = ProgramBuilder::make(Opcode::nc_matmul, b.tile(ps, 0, 32, 0, 64), {b.tile(at, 0, 32, 0, 32, slot), b.tile(bs, 0, 32, 0, 64, slot)});
      mm.accumulate = k0 > 0;
      mm.group = 0;
      mm.at.engine = kevo::target::Engine::tensor;
      b.add(mm);
      slot ^= 1;
    }
    auto grp = [&](Instr in) {
      in.group = 1;
      b.add(in);
    };
    grp(ProgramBuilder::make(Opcode::tensor_copy, b.tile(cs, 0, 32, 0, 64), {b.tile(ps, 0, 32, 0, 64)}));
    Instr act = ProgramBuilder::make(Opcode::activation, b.tile(cs, 0, 32, 0, 64), {b.tile(cs, 0, 32, 0, 64)});
    act.fn = kevo::ir::Fn::gelu_tanh;
    act.scale = 0.5;
    act.at.engine = kevo::target::Engine::scalar;
    grp(act);
    Instr ts = ProgramBuilder::make(Opcode::tensor_scalar, b.tile(cs, 0, 32, 0, 64), {b.tile(cs, 0, 32, 0, 64)});
    ts.fn = kevo::ir::Fn::mul;
    ts.imm0 = 2.0;
    ts.has_op1 = true;
    ts.fn1 = kevo::ir::Fn::add;
    ts.imm1 = -1.5;
    grp(ts);
    Instr r = ProgramBuilder::make(Opcode::tensor_reduce, b.tile(red, 0, 32, 0, 1), {b.tile(cs, 0, 32, 0, 64)});
    r.reduce = kevo::ir::ReduceOp::max;
    grp(r);
    Instr ms = ProgramBuilder::make(Opcode::memset, b.tile(io, 0, 32, 0, 64));
    ms.imm0 = 0.0;
    grp(ms);
    Instr iota = ProgramBuilder::make(Opcode::iota, b.tile(io, 0, 32, 0, 64));
    iota.iota_part_coef = 1;
    iota.iota_free_coef = {0, 0, -1};
    iota.at.engine = kevo::target::Engine::gpsimd;
    grp(iota);
    Instr tt = ProgramBuilder::make(Opcode::tensor_tensor, b.tile(cs, 0, 32, 0, 64), {b.tile(cs, 0, 32, 0, 64), b.tile(io, 0, 32, 0, 64)});
    tt.fn = kevo::ir::Fn::sub;
    grp(tt);
    Instr tr = ProgramBuilder::make(Opcode::nc_transpose, b.tile(ps, 0, 32, 0, 32), {b.tile(cs, 0, 32, 0, 32)});
    tr.at.engine = kevo::target::Engine::tensor;
    grp(tr);
    AccessPattern strided = b.tile(cs, 0, 32, 0, 32);
    strided.free_size = {1, 2, 8};
    strided.free_stride = {0, 32, 2};  // two 8-element runs with stride 2: not one slice, needs .ap()
    AccessPattern out = b.rows(C, m0, 32, 0, 16);
    out.free_size = {1, 2, 8};
    out.free_stride = {0, 16, 1};
    grp(ProgramBuilder::make(Opcode::dma_copy, out, {strided}));
    grp(ProgramBuilder::make(Opcode::dma_copy, b.rows(C, m0, 32, 32, 32), {b.tile(cs, 0, 32, 32, 32)}));
  }
  return b;
}

}  // namespace

TEST_CASE("emitted NKI kernels parse as Python", "[emit]") {
  for (DType dt : {DType::bf16, DType::fp32, DType::fp8_e4m3}) {
    const auto b = every_opcode(dt);
    const std::string py = kevo::emit::emit_nki(b.p, kernel(dt));
    INFO(py);
    REQUIRE(python_parse_error(py).empty());
  }
}

TEST_CASE("the kernel carries exactly one nisa call per program instruction of each opcode", "[emit]") {
  const auto b = every_opcode(DType::bf16);
  const std::string py = kevo::emit::emit_nki(b.p, kernel(DType::bf16));
  std::map<Opcode, std::size_t> want;
  for (const auto& in : b.p.instrs) ++want[in.op];
  REQUIRE(want.size() == 11);  // the fixture really uses every opcode
  for (const auto& [op, n] : want) {
    INFO(kevo::emit::nisa_name(op));
    REQUIRE(count(py, "nisa." + std::string(kevo::emit::nisa_name(op)) + "(") == n);
  }
}

TEST_CASE("the header names kernel, target, schedule and instruction counts", "[emit]") {
  const auto b = every_opcode(DType::bf16);
  const std::string py = kevo::emit::emit_nki(b.p, kernel(DType::bf16));
  REQUIRE_THAT(py, Catch::StartsWith("# Generated by kevo"));
  REQUIRE_THAT(py, Catch::Contains("# kernel: mm_act\n"));
  REQUIRE_THAT(py, Catch::Contains("# target: trn2\n"));
  REQUIRE_THAT(py, Catch::Contains("# buffers: explicit, one nl.ndarray per rotation slot"));
  REQUIRE_THAT(py, Catch::Contains("# schedule: tile m=32 n=64 k=32; order m n k\n#   load A@k x2\n"));
  REQUIRE_THAT(py, Catch::Contains(fmt::format("# instructions: {} (", b.p.instrs.size())));
  REQUIRE_THAT(py, Catch::Contains("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n"));
  REQUIRE_THAT(py, Catch::Contains("    # nest 0: C = A @ B\n"));
  REQUIRE_THAT(py, Catch::Contains("    # nest 1: epilogue\n"));
}

TEST_CASE("inputs are parameters, outputs live in shared HBM and are returned", "[emit]") {
  const auto b = every_opcode(DType::bf16);
  const std::string py = kevo::emit::emit_nki(b.p, kernel(DType::bf16));
  REQUIRE_THAT(py, Catch::Contains("@nki.jit\ndef mm_act(A, B):\n"));
  REQUIRE_THAT(py, Catch::Contains("    C = nl.ndarray((64, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)\n"));
  REQUIRE_THAT(py, Catch::EndsWith("    return C\n"));
}

TEST_CASE("dtypes are spelled as nki.language names", "[emit]") {
  REQUIRE(kevo::emit::nki_dtype(DType::bf16) == "nl.bfloat16");
  REQUIRE(kevo::emit::nki_dtype(DType::fp32) == "nl.float32");
  REQUIRE(kevo::emit::nki_dtype(DType::fp16) == "nl.float16");
  REQUIRE(kevo::emit::nki_dtype(DType::fp8_e4m3) == "nl.float8_e4m3");      // IEEE-style: NC-v2/v3's fp8
  REQUIRE(kevo::emit::nki_dtype(DType::fp8_e4m3fn) == "nl.float8_e4m3fn");  // OCP: NC-v4
  const auto b = every_opcode(DType::fp8_e4m3);
  const std::string py = kevo::emit::emit_nki(b.p, kernel(DType::fp8_e4m3));
  REQUIRE_THAT(py, Catch::Contains("b_s0 = nl.ndarray((32, 64), dtype=nl.float8_e4m3, buffer=nl.sbuf)"));
  REQUIRE_THAT(py, Catch::Contains("acc = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum)"));
}

TEST_CASE("rotation slots are separate tiles and access patterns print as slices or .ap()", "[emit]") {
  const auto b = every_opcode(DType::bf16);
  const std::string py = kevo::emit::emit_nki(b.p, kernel(DType::bf16));
  // first K step uses slot 0, second slot 1; A arrives transposed by DMA
  REQUIRE_THAT(py, Catch::Contains("nisa.dma_transpose(dst=aT_s0[0:32, 0:32], src=A[0:32, 0:32])"));
  REQUIRE_THAT(py, Catch::Contains("nisa.dma_copy(dst=b_s1[0:32, 0:64], src=B[32:64, 0:64])"));
  REQUIRE_THAT(py, Catch::Contains(
                       "nisa.nc_matmul(dst=acc[0:32, 0:64], stationary=aT_s1[0:32, 0:32], moving=b_s1[0:32, 0:64], accumulate=True)"));
  REQUIRE_THAT(py, Catch::Contains("nisa.dma_copy(dst=C.ap(pattern=[[64, 32], [16, 2], [1, 8]], offset=0), src=c.ap(pattern=[[64, 32], [32, 2], [2, 8]], offset=0))"));
  REQUIRE_THAT(py, Catch::Contains("nisa.activation(dst=c[0:32, 0:64], op=nl.gelu_apprx_tanh, data=c[0:32, 0:64], scale=0.5)"));
  REQUIRE_THAT(py, Catch::Contains(
                       "nisa.tensor_scalar(dst=c[0:32, 0:64], data=c[0:32, 0:64], op0=nl.multiply, operand0=2.0, op1=nl.add, "
                       "operand1=-1.5, engine=nisa.engine.vector)"));
  REQUIRE_THAT(py, Catch::Contains("nisa.tensor_reduce(dst=red[0:32, 0:1], op=nl.maximum, data=c[0:32, 0:64], axis=1"));
  REQUIRE_THAT(py, Catch::Contains("nisa.iota(dst=io[0:32, 0:64], pattern=[[-1, 64]], offset=0, channel_multiplier=1)"));
}

TEST_CASE("names that are not Python identifiers or clash are rewritten", "[emit]") {
  ProgramBuilder b;
  const int x = b.hbm("in", {4, 4}, 0), y = b.hbm("out", {4, 4}, 1), s = b.sbuf("x.tile", 4, 4), s2 = b.sbuf("nl", 4, 4);
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.tile(s, 0, 4, 0, 4), {b.rows(x, 0, 4, 0, 4)}));
  b.add(ProgramBuilder::make(Opcode::tensor_copy, b.tile(s2, 0, 4, 0, 4), {b.tile(s, 0, 4, 0, 4)}));
  b.add(ProgramBuilder::make(Opcode::dma_copy, b.rows(y, 0, 4, 0, 4), {b.tile(s2, 0, 4, 0, 4)}));
  using namespace kevo::ir;
  KernelBuilder kb("lambda");
  kb.dim("R", 4).dim("C", 4);
  kb.input("in", DType::fp32, {"R", "C"}).output("out", DType::fp32, {"R", "C"});
  kb.map("out", {"r", "c"}, access("in", {"r", "c"}));
  const auto k = kb.build();
  REQUIRE(k.has_value());
  const std::string py = kevo::emit::emit_nki(b.p, *k);
  REQUIRE(python_parse_error(py).empty());
  REQUIRE_THAT(py, Catch::Contains("x_tile = nl.ndarray"));
  REQUIRE_THAT(py, Catch::Contains("nl_ = nl.ndarray"));
  REQUIRE_THAT(py, Catch::Contains("def lambda_(in_):"));
}

TEST_CASE("a program that refers to a missing buffer is an error, not a crash", "[emit]") {
  auto b = every_opcode(DType::bf16);
  b.p.instrs[3].src[0].buffer = 99;
  REQUIRE_THROWS_AS(kevo::emit::emit_nki(b.p, kernel(DType::bf16)), kevo::Error);
}

TEST_CASE("lowered programs of every workload print as Python with one nisa call per instruction", "[emit][lowered]") {
  const char* specs[] = {"matmul:M=130,N=96,K=200,dtype=bf16,layout=tn", "bmm:B=2,M=64,N=64,K=64,dtype=fp32",
                         "matmul_bias_act:M=64,N=130,K=64,dtype=bf16,act=gelu", "softmax:R=130,C=100,dtype=fp32",
                         "layernorm:R=64,C=256,dtype=bf16", "rmsnorm:R=32,C=520,dtype=fp8_e4m3",
                         "attention:B=1,H=2,S=65,D=32,causal=1,dtype=bf16", "swiglu:M=64,D=64,F=96,dtype=bf16",
                         "eltwise:R=48,C=64,ops=add+silu+max,dtype=fp16", "conv1d_dw:N=2,C=130,W=100,F=3,pad=1",
                         "colsum:R=300,C=130,dtype=bf16"};
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  kevo::Rng rng(7);
  for (const char* spec : specs) {
    auto k = kevo::ir::workload(spec);
    REQUIRE(k.has_value());
    const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
    for (int g = 0; g < 2; ++g) {
      kevo::Genome genome = g == 0 ? space.default_genome() : space.genes().random(rng);
      space.repair(genome, rng);
      auto p = kevo::lower::lower(space, genome);
      if (!p) continue;
      INFO(spec << "\n" << space.print(genome));
      const std::string py = kevo::emit::emit_nki(*p, *k);
      REQUIRE(python_parse_error(py).empty());
      REQUIRE_THAT(py, Catch::Contains("# schedule: "));
      // NKI's ISA has no divide operator (softmax's and attention's normalisations are divisions)
      REQUIRE_THAT(py, !Catch::Contains("nl.divide"));
      std::map<Opcode, std::size_t> want;
      std::size_t acc_reduces = 0;
      for (const auto& in : p->instrs) {
        ++want[in.op];
        acc_reduces += in.op == Opcode::tensor_reduce && in.accumulate;
      }
      want[Opcode::tensor_tensor] += acc_reduces;  // documented: NKI's tensor_reduce cannot accumulate
      for (const auto& [op, n] : want) {
        INFO(kevo::emit::nisa_name(op));
        REQUIRE(count(py, "nisa." + std::string(kevo::emit::nisa_name(op)) + "(") == n);
      }
    }
  }
}

TEST_CASE("bn_stats and bn_aggr print as nisa calls, counted in the header", "[emit][lowered]") {
  auto k = kevo::ir::workload("layernorm:R=64,C=1100,dtype=bf16");
  REQUIRE(k.has_value());
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
  auto g = space.parse("stats var=bn");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  REQUIRE(python_parse_error(py).empty());
  CHECK(count(py, "nisa.bn_stats(dst=") == 3);  // chunks of 512, 512, 76
  CHECK(count(py, "nisa.bn_aggr(dst=") == 1);
  CHECK_THAT(py, Catch::Contains("bn_stats 3, bn_aggr 1"));
}

TEST_CASE("a flash attention program emits valid Python, its exp with the running max as a per-partition bias",
          "[emit][flash]") {
  auto k = kevo::ir::workload("attention:B=1,H=2,S=200,D=64,causal=1,dtype=bf16");
  REQUIRE(k.has_value());
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  auto g = space.parse("flash o=yes i=128 j=128");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  CHECK(python_parse_error(py).empty());
  CHECK(count(py, "nisa.") >= p->instrs.size());
  CHECK(count(py, "nisa.activation(") > 0);
  CHECK(py.find("op=nl.exp") != std::string::npos);
  CHECK(count(py, ", bias=") > 0);
  CHECK(count(py, "nisa.nc_transpose(") > 0);
  // the exp of every kv tile also sums its rows (reduce_res), as many as the program's
  std::size_t sums = 0;
  for (const auto& in : p->instrs) sums += in.writes_reduce_res();
  CHECK(sums > 0);
  CHECK(count(py, "reduce_op=nl.add, reduce_res=") == sums);
  CHECK(count(py, "reduce_cmd=nisa.reduce_cmd.reset_reduce") == sums);
  // the causal mask of each diagonal tile is one affine_select (GpSimd), keeping j - i <= 0
  std::size_t selects = 0;
  for (const auto& in : p->instrs) selects += in.op == Opcode::affine_select;
  CHECK(selects > 0);
  CHECK(count(py, "nisa.affine_select(dst=") == selects);
  CHECK(count(py, "on_false_value=float('-inf'), cmp_op=nl.less_equal)") == selects);
  CHECK(count(py, "nisa.tensor_copy_predicated(") == 0);
}

TEST_CASE("a softmax row's exp(x - max) emits one activation with a bias and the row sums", "[emit][lowered]") {
  auto k = kevo::ir::workload("softmax:R=256,C=512,dtype=bf16");
  REQUIRE(k.has_value());
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  auto g = space.parse("fuse e=yes s=yes Y=yes; nest mx: layout p=r f=c; tile r=128 c=512");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  CHECK(python_parse_error(py).empty());
  // per row tile: the exp, and the reciprocal of the row sums (the division by them is a product)
  CHECK(count(py, "nisa.activation(") == 4);
  CHECK(count(py, "op=nl.exp") == 2);
  CHECK(count(py, "op=nl.reciprocal") == 2);
  CHECK(count(py, "nl.divide") == 0);
  CHECK(count(py, ", bias=") == 2);
  CHECK(count(py, "reduce_op=nl.add, reduce_res=") == 2);
  CHECK(count(py, "nisa.tensor_reduce(") == 2);  // the row max only
}

TEST_CASE("issue 17 schedules emit their structure: 16 load slots, memset zeroing, bf16 partial sums, block transposes",
          "[emit][lowered]") {
  auto k = kevo::ir::workload("matmul:M=256,N=512,K=512,dtype=bf16");
  REQUIRE(k.has_value());
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
  const auto emitted = [&](const std::string& text) {
    auto g = space.parse(text);
    INFO(text);
    REQUIRE(g);
    auto p = kevo::lower::lower(space, *g);
    INFO((p ? std::string() : p.error().str()));
    REQUIRE(p);
    std::string py = kevo::emit::emit_nki(*p, *k);
    REQUIRE(python_parse_error(py).empty());
    return py;
  };
  const std::string base = "tile m=128 n=512 k=128; order m.b n.b k.b m n k; stationary A; ";
  SECTION("acc sbuf dtype=out zero=memset: a bf16 SBUF result zeroed by memset, every k block added") {
    const auto py = emitted(base + "transpose A=dma_transpose_block; block m=2 k=2; load A@m.b x16 dma=row; load B@k x8; "
                                   "acc sbuf x1 dtype=out zero=memset");
    // 16 rotation slots of A's block, 8 of B's tile
    CHECK_THAT(py, Catch::Contains("_s15 = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)"));
    CHECK_THAT(py, Catch::Contains("_s7 = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)"));
    CHECK_THAT(py, !Catch::Contains("_s16 = "));
    // the SBUF accumulator is bf16: [128, 512] per m tile of the store footprint, no fp32 SBUF tile
    CHECK_THAT(py, !Catch::Contains("dtype=nl.float32, buffer=nl.sbuf"));
    CHECK(count(py, "nisa.memset(dst=") == 2);                 // one per output tile
    CHECK(count(py, "nisa.tensor_copy(") == 0);                // no copy of the first k block
    CHECK(count(py, "nisa.tensor_tensor(") == 4);              // 2 k blocks x 2 output tiles
    CHECK(count(py, "nisa.dma_transpose(") == 4);              // one [128, 256] per k tile per m block
    CHECK_THAT(py, Catch::Contains("nisa.dma_transpose(dst=C_C_A_s0[0:128, 0:256], src=A[0:256, 0:128])"));
  }
  SECTION("acc psum zero=memset: PSUM zeroed by a memset, no matmul starts a group (NeuronCore-v4 only)") {
    // undefined on NeuronCore-v2/v3 hardware (nki.isa.nc_matmul): trn2 refuses it, trn3 emits it
    const std::string text = base + "transpose A=dma_transpose; acc psum x8 zero=memset";
    CHECK_FALSE(kevo::lower::lower(space, *space.parse(text)));
    const auto t3 = kevo::target::load_target("trn3");
    REQUIRE(t3.has_value());
    const auto s3 = kevo::schedule::ScheduleSpace::derive(*k, *t3);
    auto p3 = kevo::lower::lower(s3, *s3.parse(text));
    REQUIRE(p3);
    const std::string py = kevo::emit::emit_nki(*p3, *k);
    CHECK(count(py, "accumulate=False") == 0);
    CHECK(count(py, "nisa.memset(dst=") == 2);
    CHECK_THAT(py, Catch::Contains("_s7 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)"));
  }
}

TEST_CASE("the full space emits lhsT in pairs and one 3-D or 4-D dma_transpose per footprint", "[emit][lowered]") {
  auto k = kevo::ir::workload("matmul:M=256,N=512,K=512,dtype=bf16");
  REQUIRE(k.has_value());
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target, kevo::schedule::DeriveOptions::full());
  const auto emitted = [&](const std::string& text) {
    auto g = space.parse(text);
    INFO(text);
    REQUIRE(g);
    auto p = kevo::lower::lower(space, *g);
    INFO((p ? std::string() : p.error().str()));
    REQUIRE(p);
    std::string py = kevo::emit::emit_nki(*p, *k);
    REQUIRE(python_parse_error(py).empty());
    return py;
  };
  const std::string base = "tile m=128 n=512 k=128; order m.b n.b k.b k m n; stationary A; block m=2 k=4; ";
  // A [M=256, K=512] transposed in one instruction: [256 rows, 4 k tiles, 128] -> [128, 4, 256]
  const auto py = emitted(base + "transpose A=dma_transpose_region; load A@m.b x2");
  CHECK(count(py, "nisa.dma_transpose(") == 1);
  CHECK_THAT(py, Catch::Contains("nisa.dma_transpose(dst=C_C_A_s0.ap(pattern=[[1024, 128], [256, 4], [1, 256]], offset=0), "
                                 "src=A.ap(pattern=[[512, 256], [128, 4], [1, 128]], offset=0), axes=(2, 1, 0))"));
  // rows interleave_all: one 4-D transpose per interleaved m block and k block, axes=(3, 1, 2, 0):
  // source row p*2 + t, k row kp*4 + j into [kp, j, t, p]
  const auto p4 = emitted(base + "transpose A=dma_transpose_block; load A@root x1; store C@root dma=region; rows interleave_all");
  CHECK(count(p4, "nisa.dma_transpose(") == 1);
  CHECK_THAT(p4, Catch::Contains("nisa.dma_transpose(dst=C_C_A.ap(pattern=[[1024, 128], [256, 4], [128, 2], [1, 128]], offset=0), "
                                 "src=A.ap(pattern=[[1024, 128], [1, 4], [512, 2], [4, 128]], offset=0), axes=(3, 1, 2, 0))"));
  // lhsT delivered transposed: pairs of m tiles, [128, 256] per k tile
  auto kt = kevo::ir::workload("matmul:M=256,N=512,K=512,dtype=bf16,layout=tn");
  REQUIRE(kt.has_value());
  const auto st = kevo::schedule::ScheduleSpace::derive(*kt, *target, kevo::schedule::DeriveOptions::full());
  auto g = st.parse(base + "load A@k x2 dma=pair");
  REQUIRE(g);
  auto p = kevo::lower::lower(st, *g);
  REQUIRE(p);
  const std::string pp = kevo::emit::emit_nki(*p, *kt);
  REQUIRE(python_parse_error(pp).empty());
  CHECK(count(pp, "[0:128, 0:256], src=A[") == 4);  // one pair per k tile
}

TEST_CASE("a depthwise conv1d emits zero-filled border tiles: a memset, then a DMA of the in-range columns",
          "[emit][lowered][conv]") {
  auto k = kevo::ir::workload("conv1d_dw:N=1,C=128,W=256,F=3,pad=1,dtype=fp32");
  REQUIRE(k.has_value());
  const auto t = kevo::target::load_target("trn1");
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  // channels on partitions, 64 output columns per tile, the 3 taps looped: per tile and tap one
  // shifted load of X; the first tile's tap 0 and the last tile's tap 2 cross a border
  auto g = space.parse("layout p=c f=w; tile c=128 w=64");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  REQUIRE(python_parse_error(py).empty());
  CHECK(count(py, "nisa.memset(") == 2);
  // 4 tiles x 3 taps of X, 4 x 3 of Wt, 4 stores
  CHECK(count(py, "nisa.dma_copy(") == 28);
  // the left border tile: columns 1..63 of the tile from X columns 0..62
  CHECK_THAT(py, Catch::Contains("value=0.0"));
}

TEST_CASE("pad halo emits memsets of the border only, widened to a legal start partition, before the DMA",
          "[emit][lowered][conv]") {
  auto k = kevo::ir::parse_kernel("kernel v(X: fp32[R=300, C=70]) -> (Y: fp32[R, C]) {\n"
                                  "  Y[r, c] = X[r - 1, c] + X[r, c] * 2.0 + X[r + 3, c]\n}\n");
  REQUIRE(k.has_value());
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  auto g = space.parse("layout p=r f=c; tile r=128 c=70; pad halo");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  REQUIRE(python_parse_error(py).empty());
  CHECK(count(py, "nisa.memset(") == 2);
  // X[r - 1], first tile: partition 0 zeroed, rows 1..127 from X rows 0..126
  CHECK_THAT(py, Catch::Contains("[0:1, 0:70], value=0.0)"));
  CHECK_THAT(py, Catch::Contains("[1:128, 0:70], src=X[0:127, 0:70])"));
  // X[r + 3], last tile of 44 rows: 41 in range; the border [41, 44) widened to start at 32, then the DMA
  const auto ms = py.find("[32:44, 0:70], value=0.0)");
  const auto dm = py.find("[0:41, 0:70], src=X[259:300, 0:70])");
  REQUIRE(ms != std::string::npos);
  REQUIRE(dm != std::string::npos);
  CHECK(ms < dm);
}

TEST_CASE("a matmul in a row tile of the PE array carries tile_position and tile_size", "[emit]") {
  const auto t = kevo::target::load_target("trn2").value();
  const auto k = kevo::ir::workload("matmul:M=256,N=512,K=660,dtype=bf16").value();
  const auto s = kevo::schedule::ScheduleSpace::derive(k, t);
  const std::string base = "tile m=128 n=512 k=128; block m=2 n=1 k=8; order m.b n.b k.b k m n; transpose A=dma_transpose_block; "
                           "load A@root x1; load B@root x1; acc psum x1; kedge ";
  for (const char* kedge : {"full", "slices"}) {
    INFO(kedge);
    auto g = s.parse(base + kedge);
    REQUIRE(g);
    auto p = kevo::lower::lower(s, *g);
    REQUIRE(p);
    const std::string py = kevo::emit::emit_nki(*p, k);
    REQUIRE(python_parse_error(py).empty());
    const bool sliced = std::string(kedge) == "slices";
    // the edge of 20 rows: two matmuls (two m tiles), in the first two 32-row tiles
    CHECK(count(py, "tile_position=") == (sliced ? 2U : 0U));
    if (sliced) {
      CHECK_THAT(py, Catch::Contains("[0:20, ") && Catch::Contains("tile_position=(0, 0), tile_size=(32, 128))"));
      CHECK_THAT(py, Catch::Contains("[32:52, ") && Catch::Contains("tile_position=(32, 0), tile_size=(32, 128))"));
    }
  }
  // the stationary's 44-column edge (M = 300) in 64-column tiles: two moving tiles, their edge
  // outputs on PSUM partitions 0..43 and 64..107
  const auto k2 = kevo::ir::workload("matmul:M=300,N=1024,K=256,dtype=bf16").value();
  const auto s2 = kevo::schedule::ScheduleSpace::derive(k2, t);
  auto g = s2.parse("tile m=128 n=512 k=128; block m=4 n=2 k=2; order m.b n.b k.b k m n; transpose A=dma_transpose_block; "
                    "load A@root x1; load B@root x1; acc psum x1; sedge slices");
  REQUIRE(g);
  auto p = kevo::lower::lower(s2, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, k2);
  REQUIRE(python_parse_error(py).empty());
  CHECK(count(py, "tile_position=") == 4U);  // two k tiles x two moving tiles
  CHECK_THAT(py, Catch::Contains("[0:44, ") && Catch::Contains("tile_position=(0, 0), tile_size=(128, 64))"));
  CHECK_THAT(py, Catch::Contains("[64:108, ") && Catch::Contains("tile_position=(0, 64), tile_size=(128, 64))"));
}

TEST_CASE("select emits tensor_copy_predicated over a uint8 predicate, converting a source of another dtype",
          "[emit][lowered]") {
  // X is bf16 and the output fp32: the branch taken from X is converted before the copy (NKI's
  // source and destination share a dtype), by an instruction of the program (the planner's
  // conv_buf: simulated and verified), so the emitter's own conversion (_kevo_tmp) is not needed
  auto k = kevo::ir::parse_kernel(
      "kernel safelog(X: bf16[R=64, C=96]) -> (Y: fp32[R, C]) {\n  Y[r, c] = select(X[r, c] > 0.0, X[r, c], log(X[r, c] * -1.0))\n}\n");
  REQUIRE(k);
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
  auto p = kevo::lower::lower(space, space.default_genome());
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  REQUIRE(python_parse_error(py).empty());
  CHECK(count(py, "nisa.tensor_copy_predicated(dst=") >= 1);
  CHECK(count(py, "nisa.tensor_copy(dst=_kevo_tmp") == 0);
  {
    std::istringstream lines(py);
    std::string l;
    int predicated = 0;
    while (std::getline(lines, l))
      if (l.find("nisa.tensor_copy_predicated(dst=") != std::string::npos) {
        ++predicated;
        CHECK_THAT(l, Catch::Contains("_conv_s"));
      }
    CHECK(predicated >= 1);
  }
  CHECK_THAT(py, Catch::Contains("dtype=nl.uint8, buffer=nl.sbuf"));
  // the comparison's own 0/1 result is the predicate: no second compare with zero
  CHECK(count(py, "op0=nl.not_equal") == 0);
  CHECK(count(py, "op0=nl.greater") == 1);
  // a condition that is not a comparison is compared with zero first
  auto k2 = kevo::ir::parse_kernel(
      "kernel pick(X: fp32[R=64, C=96], M: fp32[R, C]) -> (Y: fp32[R, C]) {\n  Y[r, c] = select(M[r, c], X[r, c], 0.0)\n}\n");
  REQUIRE(k2);
  const auto space2 = kevo::schedule::ScheduleSpace::derive(*k2, *target);
  auto p2 = kevo::lower::lower(space2, space2.default_genome());
  REQUIRE(p2);
  const std::string py2 = kevo::emit::emit_nki(*p2, *k2);
  REQUIRE(python_parse_error(py2).empty());
  CHECK(count(py2, "op0=nl.not_equal") == 1);
  CHECK(count(py2, "nisa.tensor_copy_predicated(dst=") == 1);
}

TEST_CASE("a kernel scheduled over a split view reshapes its tensors once, keeping the user's signature", "[emit][lowered]") {
  auto k = kevo::ir::parse_kernel("kernel vs(X: fp32[N=4096]) -> (Y: fp32[N], S: fp32[]) {\n  Y[i] = X[i] * 2\n  S[] = sum(j) X[j]\n}\n");
  REQUIRE(k);
  auto target = kevo::target::load_target("trn2");
  REQUIRE(target.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *target);
  REQUIRE_FALSE(space.splits().empty());
  auto p = kevo::lower::lower(space, space.default_genome());
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  INFO(py);
  REQUIRE(python_parse_error(py).empty());
  CHECK(py.find("def vs(X):") != std::string::npos);
  CHECK(py.find("Y = nl.ndarray((4096,), dtype=nl.float32, buffer=nl.shared_hbm)") != std::string::npos);
  CHECK(py.find("X_view = X.reshape((128, 32))") != std::string::npos);
  CHECK(py.find("Y_view = Y.reshape((128, 32))") != std::string::npos);
  CHECK(py.find("src=X_view[") != std::string::npos);  // loads read the view, never X's 1-D shape
  CHECK(py.find("src=X[") == std::string::npos);
  CHECK(py.find("return (Y, S)") != std::string::npos);
}

TEST_CASE("an online softmax program emits valid Python: the running sum's rescale is one two-operand tensor_scalar",
          "[emit][online]") {
  auto k = kevo::ir::workload("softmax:R=256,C=1000,dtype=fp32");
  REQUIRE(k.has_value());
  const auto t = kevo::target::load_target("trn2");
  REQUIRE(t.has_value());
  const auto space = kevo::schedule::ScheduleSpace::derive(*k, *t);
  auto g = space.parse("online Y=yes r=128 c=256 bufs=2");
  REQUIRE(g);
  auto p = kevo::lower::lower(space, *g);
  REQUIRE(p);
  const std::string py = kevo::emit::emit_nki(*p, *k);
  CHECK(python_parse_error(py).empty());
  // per row tile: 4 column tiles in the first pass (3 rescales of l), 3 read again in the second
  CHECK(count(py, "nisa.tensor_reduce(") == 2 * 4);
  CHECK(count(py, "op0=nl.multiply, operand0=") >= 2 * 3);
  CHECK(count(py, ", op1=nl.add, operand1=") == 2 * 3);
  // exps: per row tile 4 with their sums, 3 corrections, 3 recomputed in the second pass
  CHECK(count(py, "reduce_op=nl.add, reduce_res=") == 2 * 4);
  CHECK(count(py, "op=nl.exp") == 2 * (4 + 3 + 3));
  CHECK(count(py, "nisa.dma_copy(") >= 2 * (4 + 3 + 4));
}
