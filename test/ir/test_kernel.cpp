// The data model, builder, op graph, hashing and the finer points of the text format.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>

#include "kevo/core/hash.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {
Kernel parse(const std::string& s) {
  auto k = parse_kernel(s);
  if (!k) FAIL(k.error().str());
  return *k;
}
void check_round_trip(const Kernel& k) {
  const std::string text = print_kernel(k);
  INFO(text);
  auto p = parse_kernel(text);
  if (!p) FAIL(p.error().str());
  CHECK(*p == k);
}
}  // namespace

TEST_CASE("op kinds: a reduce-sum of a product of two accesses is a contraction") {
  const Kernel mm = *workload("matmul:M=4,N=4,K=4");
  CHECK(mm.ops[0].kind() == OpKind::contract);
  const Kernel sm = *workload("softmax:R=2,C=3");
  CHECK(sm.ops[0].kind() == OpKind::reduce);
  CHECK(sm.ops[1].kind() == OpKind::map);
  const Kernel r = parse("kernel k(A: fp32[M=2, K=3], B: fp32[K]) -> (C: fp32[M]) {\n C[m] = sum(k) A[m, k] * B[k] * 2\n}");
  CHECK(r.ops[0].kind() == OpKind::reduce);
  const Kernel x = parse("kernel k(A: fp32[M=2, K=3], B: fp32[K]) -> (C: fp32[M]) {\n C[m] = max(k) A[m, k] * B[k]\n}");
  CHECK(x.ops[0].kind() == OpKind::reduce);
  // A matrix-vector product, a batched matmul and one dot product keep the PE array ...
  CHECK(parse("kernel k(A: fp32[M=2, K=3], B: fp32[K]) -> (C: fp32[M]) {\n C[m] = sum(k) A[m, k] * B[k]\n}").ops[0].kind() ==
        OpKind::contract);
  CHECK(workload("bmm:B=2,M=4,N=4,K=4")->ops[0].kind() == OpKind::contract);
  CHECK(parse("kernel k(a: fp32[K=3], b: fp32[K]) -> (y: fp32[]) {\n y[] = sum(k) a[k] * b[k]\n}").ops[0].kind() == OpKind::contract);
  // ... but a batch of dot products (every output index in both operands) has no free index for
  // its rows or columns: 1x1 matmuls, so a reduction for the Vector engine.
  const Kernel sq = parse("kernel k(X: fp32[R=2, C=3]) -> (Y: fp32[R]) {\n Y[r] = sum(c) X[r, c] * X[r, c]\n}");
  CHECK(sq.ops[0].kind() == OpKind::reduce);
  const Kernel rd = parse("kernel k(X: fp32[R=2, C=3], W: fp32[R, C]) -> (Y: fp32[R]) {\n Y[r] = sum(c) X[r, c] * W[r, c]\n}");
  CHECK(rd.ops[0].kind() == OpKind::reduce);
  // and its values are the same either way
  const auto in = random_inputs(rd, 5);
  const auto out = evaluate(rd, in);
  for (int r = 0; r < 2; ++r) {
    double want = 0;
    for (int c = 0; c < 3; ++c) want += double{in[0][static_cast<std::size_t>(3 * r + c)]} * in[1][static_cast<std::size_t>(3 * r + c)];
    CHECK(out[2][static_cast<std::size_t>(r)] == Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("temps are fp32, listed after the outputs in first-write order, with shapes from their indices") {
  const Kernel k = *workload("attention:B=1,H=2,S=8,D=4,causal=1");
  std::vector<std::string> names;
  for (const auto& t : k.tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"Q", "K", "V", "O", "s", "p", "mx", "e", "l", "pb", "o"});
  CHECK(k.tensor("pb")->dtype == DType::bf16);  // P held in bf16 for PV (cast<bf16>(e))
  const Tensor* s = k.tensor("s");
  REQUIRE(s);
  CHECK(s->role == Role::temp);
  CHECK(s->dtype == DType::fp32);
  CHECK(s->dims == std::vector<std::string>{"B", "H", "S", "S"});
  CHECK(k.shape(*s) == std::vector<std::int64_t>{1, 2, 8, 8});
  CHECK(k.elements(*k.tensor("mx")) == 16);
  CHECK_THROWS_AS(k.dim_size("Z"), kevo::Error);
}

TEST_CASE("a temp whose whole right-hand side is cast<T>(...) is held in T; any other temp in fp32") {
  auto k = parse_kernel(R"(kernel t(X: bf16[M=8, K=4], W: bf16[K, N=6]) -> (Y: bf16[M, N]) {
  a[m, n] = sum(k) X[m, k] * W[k, n]
  h[m, n] = cast<bf16>(a[m, n] * 2)
  g[m, n] = cast<fp8_e4m3>(h[m, n]) + 1
  r[m] = sum(n) cast<bf16>(g[m, n])
  Y[m, n] = h[m, n] * r[m]
})");
  REQUIRE(k);
  CHECK(k->tensor("a")->dtype == DType::fp32);
  CHECK(k->tensor("h")->dtype == DType::bf16);       // the whole right-hand side is a cast
  CHECK(k->tensor("g")->dtype == DType::fp32);       // a cast inside a sum is not the whole side
  CHECK(k->tensor("r")->dtype == DType::fp32);       // a reduction accumulates in fp32
  // printed and parsed again, the kernel is the same (the dtype follows from the text)
  auto again = parse_kernel(print_kernel(*k));
  REQUIRE(again);
  CHECK(*again == *k);
  // holding h in bf16 loses nothing: its values are bf16's already
  const auto in = random_inputs(*k, 3);
  const auto v = evaluate(*k, in);
  const auto hi = static_cast<std::size_t>(std::find_if(k->tensors.begin(), k->tensors.end(), [](const Tensor& t) { return t.name == "h"; }) - k->tensors.begin());
  for (float x : v[hi]) CHECK(round_to(DType::bf16, x) == x);
  // the swiglu workload holds h in its dtype, as hand kernels do (fp32 h ran Y's matmul at fp32 rate)
  CHECK(workload("swiglu:M=8,D=8,F=8,dtype=bf16")->tensor("h")->dtype == DType::bf16);
  CHECK(workload("swiglu:M=8,D=8,F=8,dtype=fp32")->tensor("h")->dtype == DType::fp32);
}

TEST_CASE("op_indices lists output then reduction indices with their extents") {
  const Kernel k = *workload("attention:B=1,H=2,S=8,D=4");
  using P = std::vector<std::pair<std::string, std::int64_t>>;
  CHECK(k.op_indices(0) == P{{"b", 1}, {"h", 2}, {"i", 8}, {"j", 8}, {"d", 4}});
  CHECK(k.op_indices(6) == P{{"b", 1}, {"h", 2}, {"i", 8}, {"d", 4}, {"j", 8}});
}

TEST_CASE("the op graph links producers to consumers and has no unused ops in a valid kernel") {
  const Kernel k = *workload("attention:B=1,H=2,S=8,D=4");
  const OpGraph g = op_graph(k);
  CHECK(g.producers[7] == std::vector<std::size_t>{4, 6});  // O = o / l
  CHECK(g.consumers[3] == std::vector<std::size_t>{4, 5});  // e feeds l and pb (P for o)
  CHECK(g.producers[0].empty());
  CHECK(g.topo_order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(unused_ops(k).empty());
  Kernel dead = k;
  dead.ops.push_back(Op{"junk", {"b"}, ReduceOp::sum, {"h"}, access("mx", {"b", "h", "i"})});
  dead.ops.back().out_indices = {"b", "h"};
  dead.ops.back().reduce_indices = {"i"};
  dead.ops.back().expr = access("mx", {"b", "h", "i"});
  CHECK(unused_ops(dead) == std::vector<std::size_t>{8});
}

TEST_CASE("the builder orders inputs before outputs and infers temps") {
  KernelBuilder b("axpy");
  b.output("Y", DType::bf16, {"N"}).dim("N", 16).input("X", DType::bf16, {"N"}).input("Z", DType::fp32, {"N"});
  b.map("t", {"i"}, 2.0 * access("X", {"i"}));
  b.map("Y", {"i"}, access("t", {"i"}) + access("Z", {"i"}));
  const Kernel k = b.build_or_throw();
  REQUIRE(k.tensors.size() == 4);
  CHECK(k.tensors[0].name == "X");
  CHECK(k.tensors[2].name == "Y");
  CHECK(k.tensors[3].name == "t");
  CHECK(print_kernel(k) ==
        "kernel axpy(X: bf16[N=16], Z: fp32[N]) -> (Y: bf16[N]) {\n"
        "  t[i] = 2 * X[i]\n"
        "  Y[i] = t[i] + Z[i]\n"
        "}\n");
  check_round_trip(k);
}

TEST_CASE("comments, blank lines and spacing do not matter") {
  const Kernel a = parse(
      "# a kernel\nkernel k(A: fp32[M=4]) -> (C: fp32[M]) {  # sig\n\n  C[i]=exp( A[ i ] )*2 # body\n}\n# end");
  const Kernel b = parse("kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = exp(A[i]) * 2\n}");
  CHECK(a == b);
  CHECK(kernel_hash(a) == kernel_hash(b));
}

TEST_CASE("max and min are reductions when an operand follows and functions otherwise") {
  const Kernel k = parse(R"(kernel k(X: fp32[R=3, C=4], Y: fp32[R, C]) -> (Z: fp32[R, C], W: fp32[R], V: fp32[R]) {
    m[r] = max(c) X[r, c]
    t[r, c] = max(X[r, c], Y[r, c])
    u[r, c] = min(r, c) - t[r, c] + m[r]
    Z[r, c] = (max(r, c) * u[r, c])
    W[r] = min(c) (-Y[r, c])
    V[r] = sum(c) -Y[r, c]
  })");
  CHECK(k.ops[0].reduce == ReduceOp::max);
  CHECK(k.ops[1].reduce == ReduceOp::none);
  CHECK(k.ops[1].expr.fn == Fn::max);
  CHECK(k.ops[2].reduce == ReduceOp::none);
  CHECK(k.ops[2].expr.args[0].args[0].fn == Fn::min);
  CHECK(k.ops[3].reduce == ReduceOp::none);
  CHECK(k.ops[4].reduce == ReduceOp::min);
  CHECK(k.ops[5].reduce == ReduceOp::sum);
  CHECK(print_kernel(k).find("W[r] = min(c) (-Y[r, c])") != std::string::npos);
  check_round_trip(k);
}

TEST_CASE("unary minus folds into number literals only") {
  const Kernel k = parse(R"(kernel k(X: fp32[N=3]) -> (Y: fp32[N]) {
    Y[i] = -2 * X[i] - -X[i] + -(3) + -inf * 0 - (-1e-05)
  })");
  check_round_trip(k);
  const std::string text = print_kernel(k);
  CHECK(text.find("-2 * X[i] - -X[i] + -(3) + -inf * 0 - -1e-05") != std::string::npos);
}

TEST_CASE("comparisons of loop indices build causal masks") {
  const Kernel k = parse(R"(kernel mask(X: fp32[S=4, S]) -> (Y: fp32[S, S]) {
    Y[i, j] = select(j <= i, X[i, j], -inf) + (i == j) * 2
  })");
  check_round_trip(k);
  std::vector<std::vector<float>> in{std::vector<float>(16, 1.0f), {}};
  const auto out = evaluate(k, in);
  CHECK(out[1][0] == 3.0f);                                     // (0, 0): diagonal
  CHECK(out[1][1] == -std::numeric_limits<float>::infinity());  // (0, 1): masked
  CHECK(out[1][4] == 1.0f);                                     // (1, 0)
}

TEST_CASE("rank-0 tensors are written and read with empty brackets") {
  const Kernel k = parse(R"(kernel total(X: fp32[N=5]) -> (S: fp32[]) {
    S[] = sum(i) X[i]
  })");
  check_round_trip(k);
  std::vector<std::vector<float>> in{{1, 2, 3, 4, 5}, {}};
  CHECK(evaluate(k, in)[1] == std::vector<float>{15});
}

namespace {
Expr random_expr(kevo::Rng& rng, int depth) {
  const auto leaf = depth <= 0 || rng.chance(0.25);
  if (leaf) {
    switch (rng.below(4)) {
      case 0: return access("A", {"i"});
      case 1: return access("B", {"i", "j"});
      case 2: return index_value(rng.chance(0.5) ? "i" : "j");
      default: {
        const double v = rng.chance(0.1) ? std::numeric_limits<double>::infinity()
                                         : (rng.uniform() - 0.5) * std::pow(10.0, static_cast<double>(rng.below(12)) - 6);
        return constant(rng.chance(0.5) ? -v : v);
      }
    }
  }
  const Fn fns[] = {Fn::add, Fn::sub, Fn::mul, Fn::div, Fn::max, Fn::min, Fn::lt, Fn::le, Fn::gt, Fn::ge,
                    Fn::eq,  Fn::ne,  Fn::exp, Fn::neg, Fn::neg, Fn::gelu_tanh, Fn::gelu_erf, Fn::cast, Fn::select, Fn::abs};
  const Fn f = fns[rng.below(std::size(fns))];
  std::vector<Expr> args;
  for (int a = 0; a < fn_arity(f); ++a) args.push_back(random_expr(rng, depth - 1));
  Expr e = call(f, std::move(args));
  if (f == Fn::cast) e.dtype = static_cast<DType>(rng.below(4));
  return e;
}
}  // namespace

TEST_CASE("random expressions print and parse back to the same tree") {
  kevo::Rng rng(99);
  for (int n = 0; n < 400; ++n) {
    KernelBuilder b("r");
    b.dim("N", 3).dim("M", 2).input("A", DType::fp32, {"N"}).input("B", DType::bf16, {"N", "M"});
    b.output("C", DType::fp32, {"N", "M"});
    Expr e = random_expr(rng, 6) + access("A", {"i"}) * access("B", {"i", "j"});
    if (rng.chance(0.5)) e = call(rng.chance(0.5) ? Fn::max : Fn::min, {std::move(e), index_value("j")});
    if (rng.chance(0.3)) {
      const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean};
      b.input("D", DType::fp32, {"N"});
      b.reduce(ops[rng.below(4)], "C", {"i", "j"}, {"k"}, rng.chance(0.5) ? -access("D", {"k"}) * std::move(e) : std::move(e) * access("D", {"k"}));
    } else {
      b.map("C", {"i", "j"}, std::move(e));
    }
    auto k = b.build();
    if (!k) FAIL(k.error().str());
    check_round_trip(*k);
  }
}

TEST_CASE("kernel_hash is equal for equal kernels and differs for different ones") {
  const Kernel a = *workload("matmul:M=128,N=128,K=64");
  const Kernel b = *workload("matmul:K=64,N=128,M=128");
  CHECK(kernel_hash(a) == kernel_hash(b));
  CHECK(kernel_hash(a) != kernel_hash(*workload("matmul:M=128,N=128,K=32")));
  CHECK(kernel_hash(a) != kernel_hash(*workload("matmul:M=128,N=128,K=64,layout=nt")));
  CHECK(kernel_hash(a) != kernel_hash(*workload("matmul:M=128,N=128,K=64,dtype=fp16")));
  Kernel renamed = a;
  renamed.ops[0].reduce_indices = {"kk"};
  renamed.ops[0].expr.args[0].indices[1] = "kk";
  renamed.ops[0].expr.args[1].indices[0] = "kk";
  CHECK(kernel_hash(renamed) != kernel_hash(a));
}

TEST_CASE("kernel_hash is pinned: the same kernel hashes alike on every machine and run") {
  const Kernel k = parse("kernel k(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = exp(A[i])\n}\n");
  CHECK(kevo::hex64(kernel_hash(k)) == "e85342da6125a089");
}
