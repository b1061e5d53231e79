#include "kevo/gpu/kernel.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace kevo::gpu {

std::string_view to_string(Family f) noexcept {
  switch (f) {
    case Family::matmul: return "matmul";
    case Family::row: return "row";
    case Family::attention: return "attention";
  }
  return "?";
}
std::string_view to_string(RowOp r) noexcept {
  switch (r) {
    case RowOp::softmax: return "softmax";
    case RowOp::rmsnorm: return "rmsnorm";
    case RowOp::layernorm: return "layernorm";
  }
  return "?";
}

const TensorRole* GpuKernel::role(std::string_view r) const noexcept {
  for (const auto& t : tensors)
    if (t.role == r) return &t;
  return nullptr;
}

double GpuKernel::flops() const noexcept {
  switch (family) {
    case Family::matmul: return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    case Family::attention: {
      const double f = 4.0 * static_cast<double>(B * H) * static_cast<double>(S) * static_cast<double>(S) * static_cast<double>(D);
      return causal ? f / 2 : f;
    }
    case Family::row: return 0;
  }
  return 0;
}

double GpuKernel::min_bytes() const noexcept {
  double b = 0;
  for (const auto& t : tensors) {
    double n = 1;
    for (auto d : t.shape) n *= static_cast<double>(d);
    b += n * static_cast<double>(ir::dtype_bytes(t.dtype));
  }
  return b;
}

std::string GpuKernel::describe() const {
  const auto dt = ir::to_string(dtype);
  switch (family) {
    case Family::matmul:
      return fmt::format("matmul {}x{}x{} {} {}{}{}", M, N, K, dt, a_trans ? "tn" : (b_trans ? "nt" : "nn"),
                         bias ? " + bias" : "", act != "none" ? " + " + act : std::string());
    case Family::row: return fmt::format("{} [{}, {}] {}", to_string(row), R, C, dt);
    case Family::attention:
      return fmt::format("attention B={} H={} S={} D={} {}{}", B, H, S, D, dt, causal ? " causal" : "");
  }
  return {};
}

std::string GpuKernel::to_json() const {
  nlohmann::json j;
  j["family"] = std::string(to_string(family));
  j["name"] = name;
  j["dtype"] = std::string(ir::to_string(dtype));
  if (family == Family::matmul) {
    j["M"] = M, j["N"] = N, j["K"] = K;
    j["a_trans"] = a_trans, j["b_trans"] = b_trans, j["bias"] = bias, j["act"] = act;
  } else if (family == Family::row) {
    j["op"] = std::string(to_string(row));
    j["R"] = R, j["C"] = C, j["eps"] = eps;
  } else {
    j["B"] = B, j["H"] = H, j["S"] = S, j["D"] = D, j["causal"] = causal, j["scale"] = scale;
  }
  j["flops"] = flops();
  j["min_bytes"] = min_bytes();
  auto& ts = j["tensors"] = nlohmann::json::array();
  for (const auto& t : tensors)
    ts.push_back({{"role", t.role}, {"name", t.name}, {"shape", t.shape}, {"dtype", std::string(ir::to_string(t.dtype))},
                  {"output", t.output}});
  return j.dump();
}

namespace {

using ir::Expr;
using ir::Fn;
using ir::OpKind;
using ir::ReduceOp;

bool is_access(const Expr& e, std::string_view tensor = {}) {
  return e.kind == Expr::Kind::access && ir::is_plain(e) && (tensor.empty() || e.tensor == tensor);
}
bool is_call(const Expr& e, Fn f) { return e.kind == Expr::Kind::call && e.fn == f; }
bool any_select(const Expr& e) {
  if (is_call(e, Fn::select)) return true;
  for (const auto& a : e.args)
    if (any_select(a)) return true;
  return false;
}
// The first constant in e (depth first), if any.
const Expr* first_constant(const Expr& e) {
  if (e.kind == Expr::Kind::constant) return &e;
  for (const auto& a : e.args)
    if (const Expr* c = first_constant(a)) return c;
  return nullptr;
}
// Every access's tensor name in e.
void accesses(const Expr& e, std::vector<const Expr*>& out) {
  if (e.kind == Expr::Kind::access) out.push_back(&e);
  for (const auto& a : e.args) accesses(a, out);
}

TensorRole role_of(const ir::Kernel& k, const std::string& role, const std::string& name) {
  const ir::Tensor* t = k.tensor(name);
  return TensorRole{role, name, k.shape(*t), t->dtype, t->role == ir::Role::output};
}

bool storage_ok(ir::DType t) { return t == ir::DType::bf16 || t == ir::DType::fp16; }

Expected<GpuKernel, std::string> matmul(const ir::Kernel& k) {
  const auto& c = k.ops[0];
  const Expr& a = c.expr.args[0];
  const Expr& b = c.expr.args[1];
  if (c.out_indices.size() != 2 || c.reduce_indices.size() != 1 || a.indices.size() != 2 || b.indices.size() != 2)
    return unexpected(std::string("a contraction Triton is emitted for is C[m, n] = sum(k) A·B over 2-D operands"));
  const std::string &m = c.out_indices[0], &n = c.out_indices[1], &kk = c.reduce_indices[0];
  GpuKernel g;
  g.family = Family::matmul;
  g.name = k.name;
  const ir::Tensor* ta = k.tensor(a.tensor);
  const ir::Tensor* tb = k.tensor(b.tensor);
  if (ta->role != ir::Role::input || tb->role != ir::Role::input)
    return unexpected(std::string("the contraction's operands must be kernel inputs"));
  if (a.indices == std::vector<std::string>{m, kk}) g.a_trans = false;
  else if (a.indices == std::vector<std::string>{kk, m}) g.a_trans = true;
  else return unexpected(fmt::format("operand {} is indexed [{}], not [m, k] or [k, m]", a.tensor, fmt::join(a.indices, ", ")));
  if (b.indices == std::vector<std::string>{kk, n}) g.b_trans = false;
  else if (b.indices == std::vector<std::string>{n, kk}) g.b_trans = true;
  else return unexpected(fmt::format("operand {} is indexed [{}], not [k, n] or [n, k]", b.tensor, fmt::join(b.indices, ", ")));
  const auto idx = k.op_indices(0);
  for (const auto& [name, size] : idx) {
    if (name == m) g.M = size;
    if (name == n) g.N = size;
    if (name == kk) g.K = size;
  }
  g.dtype = ta->dtype;
  if (!storage_ok(ta->dtype) || tb->dtype != ta->dtype)
    return unexpected(fmt::format("operands are {} and {}; Triton matmuls here take bf16 or fp16 operands of one dtype",
                                  ir::to_string(ta->dtype), ir::to_string(tb->dtype)));
  g.tensors.push_back(role_of(k, "A", a.tensor));
  g.tensors.push_back(role_of(k, "B", b.tensor));
  std::string out = c.out;
  if (k.ops.size() == 2) {
    const auto& e = k.ops[1];
    if (e.kind() != OpKind::map || e.out_indices != c.out_indices)
      return unexpected(std::string("the op after the contraction must be an elementwise epilogue over [m, n]"));
    const Expr* x = &e.expr;
    if (x->kind == Expr::Kind::call && ir::fn_arity(x->fn) == 1) {
      switch (x->fn) {
        case Fn::gelu_tanh: g.act = "gelu"; break;
        case Fn::gelu_erf: g.act = "gelu_erf"; break;
        case Fn::relu: g.act = "relu"; break;
        case Fn::silu: g.act = "silu"; break;
        default: return unexpected(fmt::format("the epilogue's activation {} is not one of gelu, gelu_erf, relu, silu", ir::to_string(x->fn)));
      }
      x = &x->args[0];
    }
    if (is_call(*x, Fn::add)) {
      const Expr* acc = &x->args[0];
      const Expr* bias = &x->args[1];
      if (!is_access(*acc, c.out)) std::swap(acc, bias);
      if (!is_access(*acc, c.out) || !is_access(*bias) || bias->indices != std::vector<std::string>{n} ||
          k.tensor(bias->tensor)->role != ir::Role::input)
        return unexpected(std::string("the epilogue must be act(C + bias[n]), act(C) or C + bias[n]"));
      g.bias = true;
      g.bias_dtype = k.tensor(bias->tensor)->dtype;
      g.tensors.push_back(role_of(k, "bias", bias->tensor));
    } else if (!is_access(*x, c.out)) {
      return unexpected(std::string("the epilogue must be act(C + bias[n]), act(C) or C + bias[n]"));
    }
    out = e.out;
  } else if (k.ops.size() > 2) {
    return unexpected(std::string("a matmul may be followed by one epilogue op only"));
  }
  const ir::Tensor* tc = k.tensor(out);
  if (tc->role != ir::Role::output) return unexpected(fmt::format("{} is not the kernel's output", out));
  if (tc->dtype != g.dtype) return unexpected(fmt::format("output {} is {}, the operands {}", out, ir::to_string(tc->dtype), ir::to_string(g.dtype)));
  g.tensors.push_back(role_of(k, "C", out));
  return g;
}

Expected<GpuKernel, std::string> rowkernel(const ir::Kernel& k) {
  GpuKernel g;
  g.family = Family::row;
  g.name = k.name;
  std::vector<ReduceOp> reds;
  std::string last;  // the index every reduction runs over
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const auto& op = k.ops[i];
    if (op.kind() == OpKind::reduce) {
      if (op.reduce_indices.size() != 1 || op.out_indices.size() != 1)
        return unexpected(std::string("a row kernel reduces [r, c] rows over c into [r]"));
      if (!last.empty() && last != op.reduce_indices[0]) return unexpected(std::string("reductions over different indices"));
      last = op.reduce_indices[0];
      reds.push_back(op.reduce);
    } else if (op.kind() != OpKind::map) {
      return unexpected(std::string("a row kernel has maps and reductions only"));
    }
  }
  if (reds == std::vector<ReduceOp>{ReduceOp::max, ReduceOp::sum}) g.row = RowOp::softmax;
  else if (reds == std::vector<ReduceOp>{ReduceOp::mean}) g.row = RowOp::rmsnorm;
  else if (reds == std::vector<ReduceOp>{ReduceOp::mean, ReduceOp::mean}) g.row = RowOp::layernorm;
  else return unexpected(std::string("the reductions are not those of a softmax (max, sum), an RMSNorm (mean of squares) or a LayerNorm (mean, mean)"));
  // Inputs: one 2-D X, and 1-D gamma/beta over the reduced dimension; one 2-D output.
  std::string x, y;
  std::vector<std::string> vecs;
  for (const auto& t : k.tensors) {
    if (t.role == ir::Role::input && t.dims.size() == 2) {
      if (!x.empty()) return unexpected(std::string("a row kernel reads one 2-D input"));
      x = t.name;
    } else if (t.role == ir::Role::input && t.dims.size() == 1) {
      vecs.push_back(t.name);
    } else if (t.role == ir::Role::input) {
      return unexpected(fmt::format("input {} is neither [R, C] nor [C]", t.name));
    } else if (t.role == ir::Role::output) {
      if (!y.empty() || t.dims.size() != 2) return unexpected(std::string("a row kernel writes one [R, C] output"));
      y = t.name;
    }
  }
  if (x.empty() || y.empty()) return unexpected(std::string("a row kernel reads X[R, C] and writes Y[R, C]"));
  const ir::Tensor* tx = k.tensor(x);
  g.R = k.dim_size(tx->dims[0]);
  g.C = k.dim_size(tx->dims[1]);
  g.dtype = tx->dtype;
  if (!storage_ok(g.dtype) && g.dtype != ir::DType::fp32)
    return unexpected(fmt::format("X is {}; row kernels here take bf16, fp16 or fp32", ir::to_string(g.dtype)));
  // The first reduction must read X along the last dim.
  std::vector<const Expr*> acc;
  accesses(k.ops[0].expr, acc);
  if (acc.empty() || acc[0]->tensor != x || acc[0]->indices.back() != last)
    return unexpected(std::string("the first reduction must read X along its last dimension"));
  if (g.row == RowOp::rmsnorm && !is_call(k.ops[0].expr, Fn::square))
    return unexpected(std::string("one mean reduction: an RMSNorm's is mean(X²)"));
  g.tensors.push_back(role_of(k, "X", x));
  const Expr& fin = k.ops.back().expr;
  if (g.row == RowOp::softmax) {
    if (!vecs.empty()) return unexpected(std::string("a softmax has no [C] inputs"));
  } else {
    const Expr* c = first_constant(fin);
    if (c == nullptr || !(c->value > 0)) return unexpected(std::string("no positive epsilon found in the normalisation"));
    g.eps = c->value;
    // gamma multiplies, beta (LayerNorm) is added last.
    std::string beta;
    if (g.row == RowOp::layernorm) {
      if (!is_call(fin, Fn::add) || !is_access(fin.args[1])) return unexpected(std::string("a LayerNorm ends with + beta[c]"));
      beta = fin.args[1].tensor;
    }
    std::string gamma;
    for (const auto& v : vecs)
      if (v != beta) gamma = v;
    if (gamma.empty() || vecs.size() != (beta.empty() ? 1u : 2u))
      return unexpected(fmt::format("a {} takes gamma[C]{}", to_string(g.row), beta.empty() ? "" : " and beta[C]"));
    g.tensors.push_back(role_of(k, "gamma", gamma));
    if (!beta.empty()) g.tensors.push_back(role_of(k, "beta", beta));
  }
  if (k.tensor(y)->dtype != g.dtype) return unexpected(std::string("Y's dtype differs from X's"));
  g.tensors.push_back(role_of(k, "Y", y));
  return g;
}

Expected<GpuKernel, std::string> attention(const ir::Kernel& k) {
  // contract s = Q·Kᵀ over d; map (scale, mask); reduce max; map exp; reduce sum; contract e·V; map divide.
  std::vector<std::size_t> contracts;
  for (std::size_t i = 0; i < k.ops.size(); ++i)
    if (k.ops[i].kind() == OpKind::contract) contracts.push_back(i);
  const auto& c1 = k.ops[contracts[0]];
  const auto& c2 = k.ops[contracts[1]];
  if (c1.out_indices.size() != 4 || c1.reduce_indices.size() != 1 || c2.out_indices.size() != 4 || c2.reduce_indices.size() != 1)
    return unexpected(std::string("attention here is two contractions over [B, H, S, D] tensors"));
  const Expr &q = c1.expr.args[0], &kx = c1.expr.args[1], &v = c2.expr.args[1];
  const std::string& d = c1.reduce_indices[0];
  const std::string& j = c2.reduce_indices[0];
  if (q.indices.size() != 4 || q.indices[3] != d || kx.indices.size() != 4 || kx.indices[3] != d || v.indices.size() != 4 ||
      v.indices[2] != j)
    return unexpected(std::string("attention reads Q[b, h, i, d], K[b, h, j, d] and V[b, h, j, d]"));
  bool has_max = false, has_sum = false;
  for (const auto& op : k.ops) {
    if (op.kind() == OpKind::reduce && op.reduce == ReduceOp::max) has_max = true;
    if (op.kind() == OpKind::reduce && op.reduce == ReduceOp::sum) has_sum = true;
  }
  if (!has_max || !has_sum) return unexpected(std::string("two contractions without a row softmax between them"));
  GpuKernel g;
  g.family = Family::attention;
  g.name = k.name;
  const ir::Tensor* tq = k.tensor(q.tensor);
  g.dtype = tq->dtype;
  if (!storage_ok(g.dtype)) return unexpected(std::string("attention here takes bf16 or fp16"));
  g.B = k.dim_size(tq->dims[0]);
  g.H = k.dim_size(tq->dims[1]);
  g.S = k.dim_size(tq->dims[2]);
  g.D = k.dim_size(tq->dims[3]);
  g.scale = 1.0 / std::sqrt(static_cast<double>(g.D));
  for (std::size_t i = contracts[0] + 1; i < k.ops.size(); ++i) {
    const auto& op = k.ops[i];
    if (op.kind() != OpKind::map) continue;
    if (any_select(op.expr)) g.causal = true;
    std::vector<const Expr*> acc;
    accesses(op.expr, acc);
    if (acc.size() == 1 && acc[0]->tensor == c1.out) {
      if (const Expr* c = first_constant(op.expr); c != nullptr && std::isfinite(c->value) && c->value > 0) g.scale = c->value;
      break;
    }
  }
  std::string out;
  for (const auto& t : k.tensors)
    if (t.role == ir::Role::output) out = t.name;
  g.tensors.push_back(role_of(k, "Q", q.tensor));
  g.tensors.push_back(role_of(k, "K", kx.tensor));
  g.tensors.push_back(role_of(k, "V", v.tensor));
  g.tensors.push_back(role_of(k, "O", out));
  for (const auto& t : g.tensors)
    if (t.shape != std::vector<std::int64_t>{g.B, g.H, g.S, g.D} || t.dtype != g.dtype)
      return unexpected(fmt::format("{} is not {}[B, H, S, D] like Q", t.name, ir::to_string(g.dtype)));
  return g;
}

}  // namespace

Expected<GpuKernel, std::string> classify(const ir::Kernel& k) {
  std::size_t contracts = 0;
  for (const auto& op : k.ops) contracts += op.kind() == OpKind::contract ? 1 : 0;
  Expected<GpuKernel, std::string> r = unexpected(std::string());
  if (contracts == 1 && k.ops[0].kind() == OpKind::contract) r = matmul(k);
  else if (contracts == 0) r = rowkernel(k);
  else if (contracts == 2) r = attention(k);
  else
    return unexpected(fmt::format("kernel {}: {} contractions; Triton is emitted for a matmul (+ epilogue), a row kernel or attention",
                                  k.name, contracts));
  if (!r) return unexpected(fmt::format("kernel {}: {}", k.name, r.error()));
  return r;
}

}  // namespace kevo::gpu
