// The workload library: each workload is a builder function plus a table of parameters with
// defaults, so that "name:key=value,..." strings and the listing come from one definition.
#include "kevo/ir/workloads.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "kevo/ir/builder.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::ir {

namespace {

enum class PType { integer, natural, real, dtype, choice, chain };

struct Param {
  std::string key;
  std::string def;
  PType type = PType::integer;
  std::vector<std::string> choices;  // choice
};

using Args = std::map<std::string, std::string, std::less<>>;

struct Def {
  std::string name;
  std::string summary;
  std::vector<Param> params;
  std::function<Kernel(const Args&)> build;
};

std::int64_t geti(const Args& a, std::string_view k) {
  std::int64_t v = 0;
  const auto& s = a.find(k)->second;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}
double getf(const Args& a, std::string_view k) { return std::stod(a.find(k)->second); }
DType getd(const Args& a, std::string_view k) { return *dtype_from_string(a.find(k)->second); }
const std::string& gets(const Args& a, std::string_view k) { return a.find(k)->second; }

const std::vector<std::string> kUnary = {"exp",   "log",   "tanh", "gelu", "gelu_erf", "silu", "relu",
                                         "sigmoid", "rsqrt", "sqrt", "square", "abs", "neg", "reciprocal"};
const std::vector<std::string> kBinary = {"add", "sub", "mul", "div", "max", "min"};

Kernel matmul(const Args& a) {
  const auto layout = gets(a, "layout");
  const DType t = getd(a, "dtype");
  KernelBuilder b("matmul");
  b.dim("M", geti(a, "M")).dim("N", geti(a, "N")).dim("K", geti(a, "K"));
  const bool ta = layout == "tn", tb = layout == "nt";
  b.input("A", t, ta ? std::vector<std::string>{"K", "M"} : std::vector<std::string>{"M", "K"});
  b.input("B", t, tb ? std::vector<std::string>{"N", "K"} : std::vector<std::string>{"K", "N"});
  b.output("C", t, {"M", "N"});
  b.contract("C", {"m", "n"}, {"k"}, ta ? access("A", {"k", "m"}) : access("A", {"m", "k"}),
             tb ? access("B", {"n", "k"}) : access("B", {"k", "n"}));
  return b.build_or_throw();
}

Kernel bmm(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("bmm");
  b.dim("B", geti(a, "B")).dim("M", geti(a, "M")).dim("N", geti(a, "N")).dim("K", geti(a, "K"));
  b.input("A", t, {"B", "M", "K"}).input("W", t, {"B", "K", "N"}).output("C", t, {"B", "M", "N"});
  b.contract("C", {"b", "m", "n"}, {"k"}, access("A", {"b", "m", "k"}), access("W", {"b", "k", "n"}));
  return b.build_or_throw();
}

Kernel matmul_bias_act(const Args& a) {
  const DType t = getd(a, "dtype");
  const auto act = gets(a, "act");
  KernelBuilder b("matmul_bias_act");
  b.dim("M", geti(a, "M")).dim("N", geti(a, "N")).dim("K", geti(a, "K"));
  b.input("A", t, {"M", "K"}).input("W", t, {"K", "N"}).input("bias", DType::fp32, {"N"});
  b.output("C", t, {"M", "N"});
  b.contract("acc", {"m", "n"}, {"k"}, access("A", {"m", "k"}), access("W", {"k", "n"}));
  Expr x = access("acc", {"m", "n"}) + access("bias", {"n"});
  if (act != "none") x = unary(*fn_from_string(act), std::move(x));
  b.map("C", {"m", "n"}, std::move(x));
  return b.build_or_throw();
}

Kernel softmax(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("softmax");
  b.dim("R", geti(a, "R")).dim("C", geti(a, "C"));
  b.input("X", t, {"R", "C"}).output("Y", t, {"R", "C"});
  b.reduce(ReduceOp::max, "mx", {"r"}, {"c"}, access("X", {"r", "c"}));
  b.map("e", {"r", "c"}, unary(Fn::exp, access("X", {"r", "c"}) - access("mx", {"r"})));
  b.reduce(ReduceOp::sum, "s", {"r"}, {"c"}, access("e", {"r", "c"}));
  b.map("Y", {"r", "c"}, access("e", {"r", "c"}) / access("s", {"r"}));
  return b.build_or_throw();
}

Kernel layernorm(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("layernorm");
  b.dim("R", geti(a, "R")).dim("C", geti(a, "C"));
  b.input("X", t, {"R", "C"}).input("gamma", t, {"C"}).input("beta", t, {"C"}).output("Y", t, {"R", "C"});
  b.reduce(ReduceOp::mean, "mu", {"r"}, {"c"}, access("X", {"r", "c"}));
  b.map("xc", {"r", "c"}, access("X", {"r", "c"}) - access("mu", {"r"}));
  b.reduce(ReduceOp::mean, "var", {"r"}, {"c"}, unary(Fn::square, access("xc", {"r", "c"})));
  b.map("Y", {"r", "c"},
        access("xc", {"r", "c"}) * unary(Fn::rsqrt, access("var", {"r"}) + getf(a, "eps")) *
                access("gamma", {"c"}) +
            access("beta", {"c"}));
  return b.build_or_throw();
}

// Depthwise 1-D convolution with zero padding: Y[n, c, w] = sum(f) X[n, c, w + f - pad] * Wt[c, f].
Kernel conv1d_dw(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("conv1d_dw");
  b.dim("N", geti(a, "N")).dim("C", geti(a, "C")).dim("W", geti(a, "W")).dim("F", geti(a, "F"));
  b.input("X", t, {"N", "C", "W"}).input("Wt", t, {"C", "F"}).output("Y", t, {"N", "C", "W"});
  const IndexShift plain{};
  b.reduce(ReduceOp::sum, "Y", {"n", "c", "w"}, {"f"},
           access("X", {"n", "c", "w"}, {plain, plain, IndexShift{1, "f", -geti(a, "pad")}}) * access("Wt", {"c", "f"}));
  return b.build_or_throw();
}

// Column sums S[c] = sum(r) X[r, c]: a reduction across the partitions (the Tensor engine's, against ones).
Kernel colsum(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("colsum");
  b.dim("R", geti(a, "R")).dim("C", geti(a, "C"));
  b.input("X", t, {"R", "C"}).output("S", t, {"C"});
  b.reduce(ReduceOp::sum, "S", {"c"}, {"r"}, access("X", {"r", "c"}));
  return b.build_or_throw();
}

Kernel rmsnorm(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("rmsnorm");
  b.dim("R", geti(a, "R")).dim("C", geti(a, "C"));
  b.input("X", t, {"R", "C"}).input("gamma", t, {"C"}).output("Y", t, {"R", "C"});
  b.reduce(ReduceOp::mean, "ms", {"r"}, {"c"}, unary(Fn::square, access("X", {"r", "c"})));
  b.map("Y", {"r", "c"},
        access("X", {"r", "c"}) * unary(Fn::rsqrt, access("ms", {"r"}) + getf(a, "eps")) * access("gamma", {"c"}));
  return b.build_or_throw();
}

// A map's right-hand side for a temp held in `t` (docs/KIR.md, "Temps"): cast<t>(e), or e itself
// for fp32, where temps are held anyway.
Expr held_in(DType t, Expr e) { return t == DType::fp32 ? std::move(e) : cast(t, std::move(e)); }

Kernel attention(const Args& a) {
  const DType t = getd(a, "dtype");
  const std::int64_t D = geti(a, "D");
  const bool causal = gets(a, "causal") == "1";
  KernelBuilder b("attention");
  b.dim("B", geti(a, "B")).dim("H", geti(a, "H")).dim("S", geti(a, "S")).dim("D", D);
  const std::vector<std::string> shape{"B", "H", "S", "D"};
  b.input("Q", t, shape).input("K", t, shape).input("V", t, shape).output("O", t, shape);
  b.contract("s", {"b", "h", "i", "j"}, {"d"}, access("Q", {"b", "h", "i", "d"}), access("K", {"b", "h", "j", "d"}));
  Expr scaled = access("s", {"b", "h", "i", "j"}) * (1.0 / std::sqrt(static_cast<double>(D)));
  if (causal)
    scaled = select(le(index_value("j"), index_value("i")), std::move(scaled),
                    constant(-std::numeric_limits<double>::infinity()));
  b.map("p", {"b", "h", "i", "j"}, std::move(scaled));
  b.reduce(ReduceOp::max, "mx", {"b", "h", "i"}, {"j"}, access("p", {"b", "h", "i", "j"}));
  b.map("e", {"b", "h", "i", "j"}, unary(Fn::exp, access("p", {"b", "h", "i", "j"}) - access("mx", {"b", "h", "i"})));
  b.reduce(ReduceOp::sum, "l", {"b", "h", "i"}, {"j"}, access("e", {"b", "h", "i", "j"}));
  // P = e held in the workload's dtype for PV, as flash kernels keep it (the sum stays over fp32 e)
  std::string pe = "e";
  if (t != DType::fp32) {
    b.map("pb", {"b", "h", "i", "j"}, held_in(t, access("e", {"b", "h", "i", "j"})));
    pe = "pb";
  }
  b.contract("o", {"b", "h", "i", "d"}, {"j"}, access(pe, {"b", "h", "i", "j"}), access("V", {"b", "h", "j", "d"}));
  b.map("O", {"b", "h", "i", "d"}, access("o", {"b", "h", "i", "d"}) / access("l", {"b", "h", "i"}));
  return b.build_or_throw();
}

Kernel swiglu(const Args& a) {
  const DType t = getd(a, "dtype");
  KernelBuilder b("swiglu");
  b.dim("M", geti(a, "M")).dim("D", geti(a, "D")).dim("F", geti(a, "F"));
  b.input("X", t, {"M", "D"}).input("Wg", t, {"D", "F"}).input("Wu", t, {"D", "F"}).input("Wd", t, {"F", "D"});
  b.output("Y", t, {"M", "D"});
  b.contract("g", {"m", "f"}, {"d"}, access("X", {"m", "d"}), access("Wg", {"d", "f"}));
  b.contract("u", {"m", "f"}, {"d"}, access("X", {"m", "d"}), access("Wu", {"d", "f"}));
  // h is held in the workload's dtype, as hand kernels keep it (an fp32 h would run the last
  // contraction at the Tensor engine's fp32 rate)
  Expr h = unary(Fn::silu, access("g", {"m", "f"})) * access("u", {"m", "f"});
  b.map("h", {"m", "f"}, held_in(t, std::move(h)));
  b.contract("Y", {"m", "d"}, {"f"}, access("h", {"m", "f"}), access("Wd", {"f", "d"}));
  return b.build_or_throw();
}

std::vector<std::string> split_chain(const std::string& s) {
  std::vector<std::string> r;
  std::size_t start = 0;
  while (true) {
    const auto p = s.find('+', start);
    r.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return r;
}

Kernel eltwise(const Args& a) {
  const DType t = getd(a, "dtype");
  const auto ops = split_chain(gets(a, "ops"));
  bool binary = false;
  for (const auto& o : ops) binary = binary || std::find(kBinary.begin(), kBinary.end(), o) != kBinary.end();
  KernelBuilder b("eltwise");
  b.dim("R", geti(a, "R")).dim("C", geti(a, "C"));
  b.input("X", t, {"R", "C"});
  if (binary) b.input("Y", t, {"R", "C"});
  b.output("Z", t, {"R", "C"});
  Expr cur = access("X", {"r", "c"});
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Fn f = *fn_from_string(ops[i]);
    Expr e = fn_arity(f) == 2 ? call(f, {std::move(cur), access("Y", {"r", "c"})}) : unary(f, std::move(cur));
    const std::string out = i + 1 == ops.size() ? "Z" : fmt::format("t{}", i + 1);
    b.map(out, {"r", "c"}, std::move(e));
    cur = access(out, {"r", "c"});
  }
  return b.build_or_throw();
}

Param I(std::string k, std::string d) { return {std::move(k), std::move(d), PType::integer, {}}; }
Param F(std::string k, std::string d) { return {std::move(k), std::move(d), PType::real, {}}; }
Param T(std::string d) { return {"dtype", std::move(d), PType::dtype, {}}; }
Param C(std::string k, std::string d, std::vector<std::string> c) {
  return {std::move(k), std::move(d), PType::choice, std::move(c)};
}

const std::vector<Def>& defs() {
  static const std::vector<Def> d = [] {
    std::vector<std::string> acts = {"gelu", "gelu_erf", "relu", "silu", "none"};
    std::vector<Def> v;
    v.push_back({"matmul", "C = A·B (nn), Aᵀ·B (tn: A stored [K, M]) or A·Bᵀ (nt: B stored [N, K])",
                 {I("M", "512"), I("N", "512"), I("K", "512"), T("bf16"), C("layout", "nn", {"nn", "tn", "nt"})},
                 matmul});
    v.push_back({"bmm", "batched matmul C[b] = A[b]·W[b]",
                 {I("B", "4"), I("M", "256"), I("N", "256"), I("K", "256"), T("bf16")}, bmm});
    v.push_back({"matmul_bias_act", "C = act(A·W + bias), bias fp32[N]",
                 {I("M", "512"), I("N", "512"), I("K", "512"), T("bf16"), C("act", "gelu", acts)}, matmul_bias_act});
    v.push_back({"softmax", "row softmax with max subtraction", {I("R", "512"), I("C", "1024"), T("fp32")}, softmax});
    v.push_back({"layernorm", "Y = (X - mean) * rsqrt(var + eps) * gamma + beta over rows",
                 {I("R", "512"), I("C", "1024"), F("eps", "1e-05"), T("fp32")}, layernorm});
    v.push_back({"rmsnorm", "Y = X * rsqrt(mean(X²) + eps) * gamma over rows",
                 {I("R", "512"), I("C", "1024"), F("eps", "1e-06"), T("fp32")}, rmsnorm});
    v.push_back({"attention", "O = softmax(Q·Kᵀ / sqrt(D)) · V per batch and head, optional causal mask",
                 {I("B", "1"), I("H", "8"), I("S", "512"), I("D", "128"), C("causal", "0", {"0", "1"}), T("bf16")},
                 attention});
    v.push_back({"swiglu", "Y = (silu(X·Wg) * (X·Wu)) · Wd",
                 {I("M", "256"), I("D", "512"), I("F", "1024"), T("bf16")}, swiglu});
    v.push_back({"eltwise", "a chain of elementwise ops on X (binary ops take a second input Y), ops joined by '+'",
                 {I("R", "512"), I("C", "1024"), Param{"ops", "add+gelu", PType::chain, {}}, T("fp32")}, eltwise});
    v.push_back({"conv1d_dw", "depthwise 1-D convolution Y[n, c, w] = sum(f) X[n, c, w + f - pad] * Wt[c, f], zero padded",
                 {I("N", "8"), I("C", "512"), I("W", "2048"), I("F", "3"), Param{"pad", "1", PType::natural, {}},
                  T("fp32")},
                 conv1d_dw});
    v.push_back({"colsum", "column sums S[c] = sum(r) X[r, c] (summed across partitions by the Tensor engine)",
                 {I("R", "4096"), I("C", "1024"), T("bf16")}, colsum});
    return v;
  }();
  return d;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? std::string(sep) : "") + v[i];
  return s;
}

std::string param_doc(const Param& p) {
  switch (p.type) {
    case PType::choice: {
      std::vector<std::string> c = p.choices;
      return fmt::format("{}={} ({})", p.key, p.def, join(c, "|"));
    }
    case PType::dtype: return fmt::format("dtype={} (bf16|fp16|fp32|fp8_e4m3|fp8_e4m3fn)", p.def);
    case PType::chain: return fmt::format("{}={} (ops joined by '+')", p.key, p.def);
    default: return fmt::format("{}={}", p.key, p.def);
  }
}

std::string example(const Def& d) {
  std::vector<std::string> kv;
  for (const auto& p : d.params) kv.push_back(p.key + "=" + p.def);
  return d.name + ":" + join(kv, ",");
}

// Nothing when `v` is a valid value of parameter `p`, else the one-line reason.
Expected<void, std::string> check_value(const Def& d, const Param& p, const std::string& v) {
  const auto bad = [&](std::string_view what) {
    return unexpected(fmt::format("workload '{}': bad value '{}' for {}: expected {}", d.name, excerpt(v), p.key, what));
  };
  switch (p.type) {
    case PType::integer:
    case PType::natural: {
      const std::int64_t lo = p.type == PType::natural ? 0 : 1;
      std::int64_t x = 0;
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || x < lo || x > (std::int64_t{1} << 31))
        return bad(lo ? "a positive integer" : "a non-negative integer");
      return {};
    }
    case PType::real: {
      double x = 0;
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(x) || x < 0)
        return bad("a non-negative number");
      return {};
    }
    case PType::dtype:
      if (!dtype_from_string(v)) return bad(fmt::format("one of {}", dtype_names()));
      return {};
    case PType::choice:
      if (std::find(p.choices.begin(), p.choices.end(), v) == p.choices.end())
        return bad("one of " + join(p.choices, ", "));
      return {};
    case PType::chain:
      for (const auto& o : split_chain(v))
        if (std::find(kUnary.begin(), kUnary.end(), o) == kUnary.end() &&
            std::find(kBinary.begin(), kBinary.end(), o) == kBinary.end())
          return unexpected(fmt::format("workload '{}': unknown op '{}' in ops={}: expected ops joined by '+' from {}, {}",
                                        d.name, excerpt(o), excerpt(v), join(kUnary, ", "), join(kBinary, ", ")));
      return {};
  }
  return {};
}

}  // namespace

std::vector<WorkloadInfo> workloads() {
  std::vector<WorkloadInfo> r;
  for (const auto& d : defs()) {
    std::vector<std::string> ps;
    for (const auto& p : d.params) ps.push_back(param_doc(p));
    r.push_back({d.name, join(ps, ", "), example(d), d.summary});
  }
  return r;
}

Expected<Kernel, std::string> workload(std::string_view spec) {
  spec = trim(spec);
  const auto colon = spec.find(':');
  const std::string name(trim(spec.substr(0, colon)));
  const Def* def = nullptr;
  std::vector<std::string> names;
  for (const auto& d : defs()) {
    names.push_back(d.name);
    if (d.name == name) def = &d;
  }
  if (!def) return unexpected(fmt::format("unknown workload '{}'; expected one of {}", excerpt(name), join(names, ", ")));
  Args args;
  for (const auto& p : def->params) args[p.key] = p.def;
  std::vector<std::string> keys;
  for (const auto& p : def->params) keys.push_back(p.key);
  std::map<std::string, bool, std::less<>> given;
  if (colon != std::string_view::npos) {
    std::string_view rest = spec.substr(colon + 1);
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view kv = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      const auto eq = kv.find('=');
      if (eq == std::string_view::npos)
        return unexpected(fmt::format("workload '{}': expected key=value, found '{}'", name, excerpt(kv)));
      const std::string key(trim(kv.substr(0, eq))), value(trim(kv.substr(eq + 1)));
      const Param* p = nullptr;
      for (const auto& q : def->params)
        if (q.key == key) p = &q;
      if (!p)
        return unexpected(
            fmt::format("workload '{}': unknown key '{}'; allowed keys: {}", name, excerpt(key), join(keys, ", ")));
      if (given[key]) return unexpected(fmt::format("workload '{}': key '{}' is given twice", name, key));
      given[key] = true;
      if (auto ok = check_value(*def, *p, value); !ok) return unexpected(std::move(ok.error()));
      args[key] = value;
    }
  }
  try {
    return def->build(args);
  } catch (const Error& e) {
    return unexpected(fmt::format("workload '{}': {}", name, e.what()));
  }
}

}  // namespace kevo::ir
