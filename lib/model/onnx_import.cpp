// ONNX ModelProto -> kevo kernels. The graph is read with the ONNX project's own protobuf classes
// (Debian libonnx-dev: onnx/onnx_pb.h, https://github.com/onnx/onnx/blob/main/onnx/onnx.proto),
// shapes completed with ONNX shape inference (onnx/shape_inference/implementation.h). Patterns are
// matched in passes over the node list, each node claimed by at most one kernel: attention, norm
// decompositions, norm and softmax ops, matrix products with their epilogues, reductions, then
// elementwise chains; what is left is listed as unsupported with its reason.
#include <fmt/format.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kevo/ir/analysis.hpp"
#include "kevo/ir/builder.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/core/error.hpp"
#include "kevo/core/io.hpp"
#include "kevo/model/import.hpp"

namespace kevo::model {

namespace {

using ir::access;
using ir::constant;
using ir::DType;
using ir::Expr;
using ir::Fn;
using ir::IndexShift;
using ir::KernelBuilder;
using ir::ReduceOp;
using Shape = std::vector<std::int64_t>;

struct ValueInfo {
  Shape shape;
  bool shape_known = false;
  int elem_type = 0;  // onnx::TensorProto_DataType
  int producer = -1;
  std::vector<int> consumers;
  const onnx::TensorProto* init = nullptr;  // initializer or Constant value (aliases through Identity)
};

std::optional<DType> dtype_of(int t) {
  switch (t) {
    case onnx::TensorProto_DataType_FLOAT: return DType::fp32;
    case onnx::TensorProto_DataType_FLOAT16: return DType::fp16;
    case onnx::TensorProto_DataType_BFLOAT16: return DType::bf16;
    default: return std::nullopt;
  }
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v = 0;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// The largest dimension an imported graph may hold (kevo's ir takes extents up to 2^31).
constexpr std::int64_t kMaxOnnxDim = std::int64_t{1} << 31;

// The float values of a tensor (float, fp16, bf16, double, int32/int64), or nullopt.
std::optional<std::vector<float>> tensor_floats(const onnx::TensorProto& t) {
  std::int64_t n = 1;
  for (auto d : t.dims()) {
    if (d < 0 || (d > 0 && n > (std::int64_t{1} << 31) / d)) return std::nullopt;  // (a product past 2^31 would wrap)
    n *= d;
  }
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) return std::nullopt;
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(n));
  const std::string& raw = t.raw_data();
  auto from_raw = [&](std::size_t width, auto conv) -> bool {
    if (raw.size() != static_cast<std::size_t>(n) * width) return false;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(conv(raw.data() + i * width));
    return true;
  };
  switch (t.data_type()) {
    case onnx::TensorProto_DataType_FLOAT:
      if (!raw.empty()) {
        if (!from_raw(4, [](const char* p) { float f; std::memcpy(&f, p, 4); return f; })) return std::nullopt;
      } else {
        out.assign(t.float_data().begin(), t.float_data().end());
      }
      break;
    case onnx::TensorProto_DataType_DOUBLE:
      if (!raw.empty()) {
        if (!from_raw(8, [](const char* p) { double f; std::memcpy(&f, p, 8); return static_cast<float>(f); })) return std::nullopt;
      } else {
        for (double d : t.double_data()) out.push_back(static_cast<float>(d));
      }
      break;
    case onnx::TensorProto_DataType_FLOAT16:
    case onnx::TensorProto_DataType_BFLOAT16: {
      const bool bf = t.data_type() == onnx::TensorProto_DataType_BFLOAT16;
      auto conv = [bf](std::uint16_t h) {
        if (!bf) return half_to_float(h);
        const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      };
      if (!raw.empty()) {
        if (!from_raw(2, [&](const char* p) { std::uint16_t h; std::memcpy(&h, p, 2); return conv(h); })) return std::nullopt;
      } else {
        for (auto v : t.int32_data()) out.push_back(conv(static_cast<std::uint16_t>(v)));
      }
      break;
    }
    case onnx::TensorProto_DataType_INT64:
      if (!raw.empty()) {
        if (!from_raw(8, [](const char* p) { std::int64_t f; std::memcpy(&f, p, 8); return static_cast<float>(f); })) return std::nullopt;
      } else {
        for (auto v : t.int64_data()) out.push_back(static_cast<float>(v));
      }
      break;
    case onnx::TensorProto_DataType_INT32:
      if (!raw.empty()) {
        if (!from_raw(4, [](const char* p) { std::int32_t f; std::memcpy(&f, p, 4); return static_cast<float>(f); })) return std::nullopt;
      } else {
        for (auto v : t.int32_data()) out.push_back(static_cast<float>(v));
      }
      break;
    default: return std::nullopt;
  }
  if (static_cast<std::int64_t>(out.size()) != n) return std::nullopt;
  return out;
}

// The number of values an initializer stores inline (raw bytes or its typed field), or nullopt
// where kevo cannot tell (external data, a type it does not know the width of). An initializer
// whose count disagrees with its dims is a broken file: ONNX requires the two to agree.
std::optional<std::int64_t> stored_values(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) return std::nullopt;
  std::size_t width = 0;
  std::int64_t typed = 0;
  switch (t.data_type()) {
    case onnx::TensorProto_DataType_FLOAT: width = 4, typed = t.float_data_size(); break;
    case onnx::TensorProto_DataType_DOUBLE: width = 8, typed = t.double_data_size(); break;
    case onnx::TensorProto_DataType_INT64: width = 8, typed = t.int64_data_size(); break;
    case onnx::TensorProto_DataType_UINT64: width = 8, typed = t.uint64_data_size(); break;
    case onnx::TensorProto_DataType_UINT32: width = 4, typed = t.uint64_data_size(); break;
    case onnx::TensorProto_DataType_INT32: width = 4, typed = t.int32_data_size(); break;
    case onnx::TensorProto_DataType_FLOAT16:
    case onnx::TensorProto_DataType_BFLOAT16:
    case onnx::TensorProto_DataType_INT16:
    case onnx::TensorProto_DataType_UINT16: width = 2, typed = t.int32_data_size(); break;
    case onnx::TensorProto_DataType_INT8:
    case onnx::TensorProto_DataType_UINT8:
    case onnx::TensorProto_DataType_BOOL: width = 1, typed = t.int32_data_size(); break;
    default: return std::nullopt;
  }
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() % width) return -1;  // (a partial value: never a valid count)
    return static_cast<std::int64_t>(t.raw_data().size() / width);
  }
  return typed;
}

// The product of dims [from, to), saturated at INT64_MAX (the screen refuses any value past 2^40
// elements before a pattern multiplies its dims, so a saturated product is never a kernel's).
std::int64_t product(const Shape& s, std::size_t from = 0, std::size_t to = std::string::npos) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < std::min(to, s.size()); ++i)
    if (__builtin_mul_overflow(p, s[i], &p)) return std::numeric_limits<std::int64_t>::max();
  return p;
}

std::string shape_text(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Why an inline tensor's values do not fill its dims ("holds 5 values, but its dims [2, 3] need
// 6"), or nullopt when they do or kevo cannot count them.
std::optional<std::string> count_mismatch(const onnx::TensorProto& t) {
  const auto got = stored_values(t);
  std::int64_t want = 1;  // (saturated past 2^40: a protobuf message holds under 2^31 values)
  for (const auto d : t.dims()) want = d > 0 && want > (std::int64_t{1} << 40) / d ? std::int64_t{1} << 40 : want * d;
  if (!got || *got == want) return std::nullopt;
  if (*got < 0) return fmt::format("has {} bytes of raw data, not a whole number of its type's values", t.raw_data().size());
  return fmt::format("holds {} values, but its dims {} need {}", *got, shape_text(Shape(t.dims().begin(), t.dims().end())), want);
}

class Importer {
 public:
  Importer(onnx::ModelProto& m, std::string name, const ImportOptions& opt) : m_(m), g_(*m.mutable_graph()), name_(std::move(name)), opt_(opt) {}

  Expected<Model, std::string> run();

 private:
  onnx::ModelProto& m_;
  onnx::GraphProto& g_;
  std::string name_;
  const ImportOptions& opt_;
  std::unordered_map<std::string, ValueInfo> values_;
  std::vector<bool> claimed_;
  std::vector<std::string> why_;      // per node: the reason a pattern rejected it (if any)
  std::vector<std::string> blocked_;  // per node: why no pattern may take it (screen), or empty
  std::deque<onnx::TensorProto> synthetic_;  // Constant values given as value_float(s)
  Model model_;
  std::map<std::uint64_t, std::size_t> by_hash_;
  std::vector<std::pair<int, std::size_t>> order_;  // (first node, kernel index) for graph order

  const onnx::NodeProto& node(int i) const { return g_.node(i); }
  std::string node_name(int i) const {
    const auto& n = node(i);
    return n.name().empty() ? fmt::format("{}#{}", n.op_type(), i) : n.name();
  }
  ValueInfo* value(const std::string& v) {
    auto it = values_.find(v);
    return it == values_.end() ? nullptr : &it->second;
  }
  bool free_node(int i) const {
    return i >= 0 && !claimed_[static_cast<std::size_t>(i)] && blocked_[static_cast<std::size_t>(i)].empty();
  }
  std::string screen(int i);
  // The single unclaimed consumer of value v (nullopt if it has zero or several, or is a graph output).
  std::optional<int> sole_consumer(const std::string& v) {
    auto* vi = value(v);
    if (!vi || vi->consumers.size() != 1 || outputs_.count(v)) return std::nullopt;
    const int c = vi->consumers[0];
    if (!free_node(c)) return std::nullopt;
    return c;
  }
  bool is_op(int i, std::string_view op) const { return node(i).op_type() == op; }
  std::optional<Shape> shape(const std::string& v) {
    auto* vi = value(v);
    if (!vi || !vi->shape_known) return std::nullopt;
    return vi->shape;
  }
  std::optional<float> scalar(const std::string& v) {
    auto* vi = value(v);
    if (!vi || !vi->init) return std::nullopt;
    for (auto d : vi->init->dims())
      if (d != 1) return std::nullopt;
    auto f = tensor_floats(*vi->init);
    if (!f || f->size() != 1) return std::nullopt;
    return (*f)[0];
  }
  bool is_const(const std::string& v) {
    auto* vi = value(v);
    return vi && vi->init;
  }
  std::optional<std::int64_t> attr_int(int i, std::string_view name) const {
    for (const auto& a : node(i).attribute())
      if (a.name() == name && a.type() == onnx::AttributeProto_AttributeType_INT) return a.i();
    return std::nullopt;
  }
  std::optional<float> attr_float(int i, std::string_view name) const {
    for (const auto& a : node(i).attribute())
      if (a.name() == name && a.type() == onnx::AttributeProto_AttributeType_FLOAT) return a.f();
    return std::nullopt;
  }
  std::optional<std::vector<std::int64_t>> attr_ints(int i, std::string_view name) const {
    for (const auto& a : node(i).attribute())
      if (a.name() == name && a.type() == onnx::AttributeProto_AttributeType_INTS)
        return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
    return std::nullopt;
  }
  // A Softmax's or LayerNormalization's axis: its attribute, else the default (Softmax before
  // opset 13: 1, over the input flattened to 2-D at that axis; -1 from opset 13 and for
  // LayerNormalization).
  std::int64_t axis_of(int i) const {
    const bool old = node(i).op_type() == "Softmax" && model_.opset < 13;
    return attr_int(i, "axis").value_or(old ? 1 : -1);
  }
  // Whether that axis is the last of a rank-r input: the only case kevo expresses (and where the
  // pre-13 flattening to [d0 x ... x d(r-2), d(r-1)] computes the same softmax).
  bool last_axis(int i, std::size_t r) const {
    const auto a = axis_of(i);
    return a == -1 || a == static_cast<std::int64_t>(r) - 1;
  }
  // ReduceMean over the last axis only, keepdims (attribute axes, or opset 18's second input).
  bool reduce_last(int i) {
    const auto& n = node(i);
    auto in = shape(n.input(0));
    if (!in || in->empty()) return false;
    std::vector<std::int64_t> axes;
    if (auto a = attr_ints(i, "axes")) axes = *a;
    else if (n.input_size() > 1 && is_const(n.input(1))) {
      auto f = tensor_floats(*value(n.input(1))->init);
      if (!f) return false;
      for (float x : *f) axes.push_back(static_cast<std::int64_t>(x));
    }
    if (axes.size() != 1) return false;
    const auto r = static_cast<std::int64_t>(in->size());
    if (axes[0] != -1 && axes[0] != r - 1) return false;
    return attr_int(i, "keepdims").value_or(1) == 1;
  }

  std::set<std::string> outputs_;  // graph outputs

  DType dt(const std::string& v) {
    if (opt_.dtype) return *opt_.dtype;
    auto* vi = value(v);
    return vi ? dtype_of(vi->elem_type).value_or(DType::fp32) : DType::fp32;
  }
  Binding bind(const std::string& tensor, const std::string& v) {
    Binding b{tensor, v, shape(v).value_or(Shape{}), is_const(v)};
    if (b.initializer && !model_.weights.count(v))
      if (auto f = tensor_floats(*value(v)->init)) model_.weights.emplace(v, Weight{b.shape, std::move(*f)});
    return b;
  }

  // `first`: the graph position for ordering when `nodes` is empty (a Conv's bias kernel).
  void add(std::string kind, std::string op, Expected<ir::Kernel, Diagnostic> k, const std::vector<int>& nodes,
           std::vector<Binding> ins, std::vector<Binding> outs, int first = -1);

  // Pattern passes.
  void pass_attention();
  void pass_norms();
  void pass_ops();
  void pass_matmul();
  void pass_reduce();
  void pass_conv();
  void pass_eltwise();

  // Epilogue after a matrix product's output `v`: bias (a constant broadcast along N) and an
  // activation, claimed only when each intermediate has a single consumer.
  struct Epilogue {
    std::vector<int> nodes;
    std::string bias;  // value
    Shape bias_shape;
    std::optional<Fn> act;
    std::string out;
    std::string label;
  };
  Epilogue epilogue(const std::string& v, std::int64_t N, bool allow_bias);
  // GELU (erf form) starting at node i on value x: Div(x, sqrt2) -> Erf -> Add 1 -> Mul x -> Mul 0.5.
  std::optional<std::pair<std::vector<int>, std::string>> gelu_erf_at(int i, const std::string& x);
};

void Importer::add(std::string kind, std::string op, Expected<ir::Kernel, Diagnostic> k, const std::vector<int>& nodes,
                   std::vector<Binding> ins, std::vector<Binding> outs, int first) {
  if (!k) {
    for (int n : nodes) why_[static_cast<std::size_t>(n)] = fmt::format("{} kernel rejected by kevo ir: {}", kind, k.error().headline());
    return;
  }
  // A pattern never takes a screened node (free_node), but every node of a kernel is checked here
  // too, as is every value it binds: a value kevo does not compute in (int32, double) is not
  // computed in fp32 instead unless --dtype says so.
  std::string why;
  for (int n : nodes)
    if (why.empty() && !blocked_[static_cast<std::size_t>(n)].empty())
      why = fmt::format("{} kernel not formed: node '{}': {}", kind, node_name(n), blocked_[static_cast<std::size_t>(n)]);
  if (!opt_.dtype)
    for (const auto* list : {&ins, &outs})
      for (const auto& b : *list)
        if (const auto* v = value(b.value); why.empty() && v && v->elem_type != 0 && !dtype_of(v->elem_type))
          why = fmt::format("{} kernel: value '{}' is {}: kevo computes in fp32, fp16 or bf16 (--dtype imports every tensor as one)",
                            kind, printable(b.value), onnx::TensorProto_DataType_Name(v->elem_type));
  if (!why.empty()) {
    for (int n : nodes)
      if (blocked_[static_cast<std::size_t>(n)].empty()) why_[static_cast<std::size_t>(n)] = why;
    return;
  }
  for (int n : nodes) claimed_[static_cast<std::size_t>(n)] = true;
  Instance inst;
  for (int n : nodes) inst.nodes.push_back(node_name(n));
  inst.inputs = std::move(ins);
  inst.outputs = std::move(outs);
  const auto h = ir::kernel_hash(*k);
  auto it = by_hash_.find(h);
  if (it != by_hash_.end()) {
    model_.kernels[it->second].instances.push_back(std::move(inst));
    return;
  }
  ModelKernel mk;
  mk.kind = std::move(kind);
  mk.op = std::move(op);
  mk.kernel = std::move(*k);
  mk.hash = h;
  for (const auto& d : mk.kernel.dims) mk.shape += (mk.shape.empty() ? "" : ",") + fmt::format("{}={}", d.name, d.size);
  mk.instances.push_back(std::move(inst));
  by_hash_[h] = model_.kernels.size();
  order_.emplace_back(nodes.empty() ? first : *std::min_element(nodes.begin(), nodes.end()), model_.kernels.size());
  model_.kernels.push_back(std::move(mk));
}

std::optional<std::pair<std::vector<int>, std::string>> Importer::gelu_erf_at(int i, const std::string& x) {
  // torch 1.13's gelu symbolic: Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5).
  if (!free_node(i) || !is_op(i, "Div") || node(i).input(0) != x) return std::nullopt;
  auto s = scalar(node(i).input(1));
  if (!s || std::abs(*s - 1.41421356f) > 1e-4f) return std::nullopt;
  std::vector<int> nodes{i};
  auto erf = sole_consumer(node(i).output(0));
  if (!erf || !is_op(*erf, "Erf")) return std::nullopt;
  nodes.push_back(*erf);
  auto add1 = sole_consumer(node(*erf).output(0));
  if (!add1 || !is_op(*add1, "Add")) return std::nullopt;
  const auto& an = node(*add1);
  auto one = scalar(an.input(0) == node(*erf).output(0) ? an.input(1) : an.input(0));
  if (!one || *one != 1.0f) return std::nullopt;
  nodes.push_back(*add1);
  auto mulx = sole_consumer(an.output(0));
  if (!mulx || !is_op(*mulx, "Mul")) return std::nullopt;
  const auto& mn = node(*mulx);
  if (!((mn.input(0) == x && mn.input(1) == an.output(0)) || (mn.input(1) == x && mn.input(0) == an.output(0)))) return std::nullopt;
  nodes.push_back(*mulx);
  auto half = sole_consumer(mn.output(0));
  if (!half || !is_op(*half, "Mul")) return std::nullopt;
  const auto& hn = node(*half);
  auto h = scalar(hn.input(0) == mn.output(0) ? hn.input(1) : hn.input(0));
  if (!h || *h != 0.5f) return std::nullopt;
  nodes.push_back(*half);
  return std::make_pair(nodes, hn.output(0));
}

Importer::Epilogue Importer::epilogue(const std::string& v, std::int64_t N, bool allow_bias) {
  Epilogue e;
  e.out = v;
  auto c = sole_consumer(v);
  if (allow_bias && c && is_op(*c, "Add")) {
    const auto& n = node(*c);
    const std::string other = n.input(0) == v ? n.input(1) : n.input(0);
    auto bs = shape(other);
    if (is_const(other) && bs && !bs->empty() && bs->back() == N && product(*bs) == N && shape(n.output(0)) == shape(v)) {
      e.nodes.push_back(*c);
      e.bias = other;
      e.bias_shape = *bs;
      e.out = n.output(0);
      e.label += "+Add";
      c = sole_consumer(e.out);
    }
  }
  // torch's erf GELU reads its input twice (Div and Mul): two consumers, both in the pattern.
  if (auto* ov = value(e.out); ov && ov->consumers.size() == 2 && !outputs_.count(e.out))
    for (int c2 : ov->consumers)
      if (auto g = gelu_erf_at(c2, e.out)) {
        const int other = ov->consumers[0] == c2 ? ov->consumers[1] : ov->consumers[0];
        if (other != g->first[3]) continue;
        e.nodes.insert(e.nodes.end(), g->first.begin(), g->first.end());
        e.act = Fn::gelu_erf;
        e.out = g->second;
        e.label += "+Gelu";
        return e;
      }
  if (!c) return e;
  static const std::map<std::string, Fn, std::less<>> acts = {
      {"Relu", Fn::relu}, {"Sigmoid", Fn::sigmoid}, {"Tanh", Fn::tanh}};
  if (auto it = acts.find(node(*c).op_type()); it != acts.end()) {
    e.nodes.push_back(*c);
    e.act = it->second;
    e.out = node(*c).output(0);
    e.label += "+" + it->first;
  }
  return e;
}

// Attention: MatMul(Q', KT) -> [Mul/Div by a constant] -> Softmax(last) -> MatMul(P, V), where Q'
// may be Q scaled by a constant (torch scales q before the product).
void Importer::pass_attention() {
  for (int s = 0; s < g_.node_size(); ++s) {
    if (!free_node(s) || !is_op(s, "Softmax")) continue;
    const auto& sn = node(s);
    auto ss = shape(sn.input(0));
    if (!ss || ss->size() < 3) continue;
    if (!last_axis(s, ss->size())) continue;
    std::vector<int> nodes{s};
    double scale = 1.0;
    std::string scores = sn.input(0);
    auto* sv = value(scores);
    if (!sv || sv->producer < 0 || !free_node(sv->producer)) continue;
    int p = sv->producer;
    if ((is_op(p, "Mul") || is_op(p, "Div")) && sole_consumer(scores) == s) {
      auto c = scalar(node(p).input(1));
      if (!c || *c == 0) continue;
      scale = is_op(p, "Mul") ? *c : 1.0 / *c;
      nodes.push_back(p);
      scores = node(p).input(0);
      sv = value(scores);
      if (!sv || sv->producer < 0 || !free_node(sv->producer)) continue;
      p = sv->producer;
    }
    if (!is_op(p, "MatMul") || sv->consumers.size() != 1) continue;
    const int qk = p;
    std::string q = node(qk).input(0);
    const std::string kt = node(qk).input(1);
    if (is_const(q) || is_const(kt)) continue;
    nodes.push_back(qk);
    if (auto* qv = value(q); qv && qv->producer >= 0 && free_node(qv->producer) && qv->consumers.size() == 1 &&
                             (is_op(qv->producer, "Mul") || is_op(qv->producer, "Div"))) {
      const int qs = qv->producer;
      if (auto c = scalar(node(qs).input(1)); c && *c != 0) {
        scale *= is_op(qs, "Mul") ? *c : 1.0 / *c;
        nodes.push_back(qs);
        q = node(qs).input(0);
      }
    }
    auto pv = sole_consumer(sn.output(0));
    if (!pv || !is_op(*pv, "MatMul") || node(*pv).input(0) != sn.output(0)) continue;
    const std::string v = node(*pv).input(1);
    if (is_const(v)) continue;
    nodes.push_back(*pv);
    const std::string out = node(*pv).output(0);
    auto qsh = shape(q), ksh = shape(kt), vsh = shape(v), osh = shape(out);
    if (!qsh || !ksh || !vsh || !osh) continue;
    const std::size_t r = qsh->size();
    if (ksh->size() != r || vsh->size() != r || r < 3 || r > 4) continue;
    bool same_batch = true;
    for (std::size_t i = 0; i + 2 < r; ++i) same_batch = same_batch && (*qsh)[i] == (*ksh)[i] && (*qsh)[i] == (*vsh)[i];
    const std::int64_t S = (*qsh)[r - 2], D = (*qsh)[r - 1];
    if (!same_batch || (*ksh)[r - 2] != D || (*ksh)[r - 1] != S || (*vsh)[r - 2] != S || (*vsh)[r - 1] != D) {
      for (int n : nodes) why_[static_cast<std::size_t>(n)] = "attention with cross/unequal sequence or head dims is not matched";
      continue;
    }
    // The attention workload's structure (ir/workloads.cpp), K read transposed as stored.
    const DType t = dt(q);
    KernelBuilder b("attention");
    std::vector<std::string> bd = r == 4 ? std::vector<std::string>{"B", "H"} : std::vector<std::string>{"H"};
    std::vector<std::string> bi = r == 4 ? std::vector<std::string>{"b", "h"} : std::vector<std::string>{"h"};
    for (std::size_t i = 0; i < bd.size(); ++i) b.dim(bd[i], (*qsh)[i]);
    b.dim("S", S).dim("D", D);
    auto cat = [](std::vector<std::string> a, std::vector<std::string> x) {
      a.insert(a.end(), x.begin(), x.end());
      return a;
    };
    b.input("Q", t, cat(bd, {"S", "D"})).input("KT", t, cat(bd, {"D", "S"})).input("V", t, cat(bd, {"S", "D"}));
    b.output("O", t, cat(bd, {"S", "D"}));
    b.contract("s", cat(bi, {"i", "j"}), {"d"}, access("Q", cat(bi, {"i", "d"})), access("KT", cat(bi, {"d", "j"})));
    b.map("p", cat(bi, {"i", "j"}), access("s", cat(bi, {"i", "j"})) * scale);
    b.reduce(ReduceOp::max, "mx", cat(bi, {"i"}), {"j"}, access("p", cat(bi, {"i", "j"})));
    b.map("e", cat(bi, {"i", "j"}), ir::unary(Fn::exp, access("p", cat(bi, {"i", "j"})) - access("mx", cat(bi, {"i"}))));
    b.reduce(ReduceOp::sum, "l", cat(bi, {"i"}), {"j"}, access("e", cat(bi, {"i", "j"})));
    b.contract("o", cat(bi, {"i", "d"}), {"j"}, access("e", cat(bi, {"i", "j"})), access("V", cat(bi, {"j", "d"})));
    b.map("O", cat(bi, {"i", "d"}), access("o", cat(bi, {"i", "d"})) / access("l", cat(bi, {"i"})));
    std::sort(nodes.begin(), nodes.end());
    add("attention", "MatMul+Scale+Softmax+MatMul", b.build(), nodes, {bind("Q", q), bind("KT", kt), bind("V", v)},
        {bind("O", out)});
  }
}

// LayerNorm (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div [, Mul gamma] [, Add beta]) and
// RMSNorm (Pow 2 | Mul x x, ReduceMean, Add eps, Sqrt, Div x | Reciprocal + Mul x [, Mul gamma]).
void Importer::pass_norms() {
  for (int r1 = 0; r1 < g_.node_size(); ++r1) {
    if (!free_node(r1) || !is_op(r1, "ReduceMean") || !reduce_last(r1)) continue;
    const std::string x0 = node(r1).input(0);
    auto xs = shape(x0);
    if (!xs || xs->empty()) continue;
    const std::int64_t C = xs->back(), R = product(*xs) / C;
    // The tail: Add eps -> Sqrt -> (Div num | Reciprocal -> Mul num), then optional Mul gamma, Add beta.
    auto tail = [&](const std::string& var, const std::string& num, std::vector<int>& nodes, double& eps, std::string& gamma,
                    std::string& beta, std::string& out) -> bool {
      auto a = sole_consumer(var);
      if (!a || !is_op(*a, "Add")) return false;
      const auto& an = node(*a);
      auto e = scalar(an.input(0) == var ? an.input(1) : an.input(0));
      if (!e) return false;
      eps = *e;
      nodes.push_back(*a);
      auto sq = sole_consumer(an.output(0));
      if (!sq || !is_op(*sq, "Sqrt")) return false;
      nodes.push_back(*sq);
      const std::string sd = node(*sq).output(0);
      auto d = sole_consumer(sd);
      if (!d) return false;
      if (is_op(*d, "Div") && node(*d).input(0) == num && node(*d).input(1) == sd) {
        nodes.push_back(*d);
        out = node(*d).output(0);
      } else if (is_op(*d, "Reciprocal")) {
        nodes.push_back(*d);
        auto m = sole_consumer(node(*d).output(0));
        if (!m || !is_op(*m, "Mul")) return false;
        const auto& mn = node(*m);
        if (!((mn.input(0) == num) || (mn.input(1) == num))) return false;
        nodes.push_back(*m);
        out = mn.output(0);
      } else {
        return false;
      }
      auto affine = [&](std::string_view op, std::string& param) {
        auto c = sole_consumer(out);
        if (!c || !is_op(*c, op)) return;
        const auto& cn = node(*c);
        const std::string other = cn.input(0) == out ? cn.input(1) : cn.input(0);
        auto ps = shape(other);
        if (!is_const(other) || !ps || product(*ps) != C || ps->empty() || ps->back() != C) return;
        param = other;
        nodes.push_back(*c);
        out = cn.output(0);
      };
      affine("Mul", gamma);
      if (!gamma.empty()) affine("Add", beta);
      return true;
    };
    std::vector<int> nodes{r1};
    double eps = 0;
    std::string gamma, beta, out;
    const auto build_out = [&](KernelBuilder& b, Expr normed) {
      if (!gamma.empty()) normed = std::move(normed) * access("gamma", {"c"});
      if (!beta.empty()) normed = std::move(normed) + access("beta", {"c"});
      b.map("Y", {"r", "c"}, std::move(normed));
    };
    const auto params = [&](KernelBuilder& b, std::vector<Binding>& ins) {
      if (!gamma.empty()) {
        b.input("gamma", dt(gamma), {"C"});
        ins.push_back(bind("gamma", gamma));
      }
      if (!beta.empty()) {
        b.input("beta", dt(beta), {"C"});
        ins.push_back(bind("beta", beta));
      }
    };
    // LayerNorm: r1 = mean(x); Sub(x, r1) feeds Pow and Div.
    auto sub = sole_consumer(node(r1).output(0));
    if (sub && is_op(*sub, "Sub") && node(*sub).input(0) == x0 && node(*sub).input(1) == node(r1).output(0)) {
      const std::string xc = node(*sub).output(0);
      auto* xcv = value(xc);
      int pw = -1;
      if (xcv && xcv->consumers.size() == 2)
        for (int c : xcv->consumers)
          if (free_node(c) && is_op(c, "Pow") && node(c).input(0) == xc && scalar(node(c).input(1)) == 2.0f) pw = c;
      if (pw >= 0) {
        auto r2 = sole_consumer(node(pw).output(0));
        if (r2 && is_op(*r2, "ReduceMean") && reduce_last(*r2)) {
          nodes.insert(nodes.end(), {*sub, pw, *r2});
          // The Div's numerator is xc, whose other consumer it is.
          claimed_[static_cast<std::size_t>(pw)] = true;  // so xc's remaining free consumer is the Div
          const bool ok = [&] {
            auto* v = value(xc);
            int div = -1;
            for (int c : v->consumers)
              if (c != pw) div = c;
            claimed_[static_cast<std::size_t>(pw)] = false;
            if (div < 0 || !free_node(div)) return false;
            return tail(node(*r2).output(0), xc, nodes, eps, gamma, beta, out) &&
                   std::find(nodes.begin(), nodes.end(), div) != nodes.end();
          }();
          if (ok) {
            const DType t = dt(x0);
            KernelBuilder b("layernorm");
            b.dim("R", R).dim("C", C);
            std::vector<Binding> ins{bind("X", x0)};
            b.input("X", t, {"R", "C"});
            params(b, ins);
            b.output("Y", t, {"R", "C"});
            b.reduce(ReduceOp::mean, "mu", {"r"}, {"c"}, access("X", {"r", "c"}));
            b.map("xc", {"r", "c"}, access("X", {"r", "c"}) - access("mu", {"r"}));
            b.reduce(ReduceOp::mean, "var", {"r"}, {"c"}, ir::unary(Fn::square, access("xc", {"r", "c"})));
            build_out(b, access("xc", {"r", "c"}) * ir::unary(Fn::rsqrt, access("var", {"r"}) + eps));
            std::sort(nodes.begin(), nodes.end());
            add("layernorm", "LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div)", b.build(), nodes, ins, {bind("Y", out)});
            continue;
          }
        }
      }
    }
    // RMSNorm: r1 = mean(x * x) or mean(x ^ 2).
    nodes = {r1};
    gamma.clear();
    beta.clear();
    auto* in = value(x0);
    if (!in || in->producer < 0 || !free_node(in->producer) || in->consumers.size() != 1) continue;
    const int sqn = in->producer;
    const auto& sq = node(sqn);
    std::string x;
    if (is_op(sqn, "Pow") && scalar(sq.input(1)) == 2.0f) x = sq.input(0);
    else if (is_op(sqn, "Mul") && sq.input(0) == sq.input(1)) x = sq.input(0);
    if (x.empty()) continue;
    nodes.push_back(sqn);
    if (!tail(node(r1).output(0), x, nodes, eps, gamma, beta, out) || !beta.empty()) continue;
    const DType t = dt(x);
    KernelBuilder b("rmsnorm");
    b.dim("R", R).dim("C", C);
    std::vector<Binding> ins{bind("X", x)};
    b.input("X", t, {"R", "C"});
    params(b, ins);
    b.output("Y", t, {"R", "C"});
    b.reduce(ReduceOp::mean, "ms", {"r"}, {"c"}, ir::unary(Fn::square, access("X", {"r", "c"})));
    build_out(b, access("X", {"r", "c"}) * ir::unary(Fn::rsqrt, access("ms", {"r"}) + eps));
    std::sort(nodes.begin(), nodes.end());
    add("rmsnorm", "RMSNorm (Pow/ReduceMean/Sqrt/Div)", b.build(), nodes, ins, {bind("Y", out)});
  }
}

// Softmax and LayerNormalization ops over the last axis.
void Importer::pass_ops() {
  for (int i = 0; i < g_.node_size(); ++i) {
    if (!free_node(i)) continue;
    const auto& n = node(i);
    if (n.op_type() != "Softmax" && n.op_type() != "LayerNormalization") continue;
    auto xs = shape(n.input(0));
    if (!xs || xs->empty()) continue;
    if (!last_axis(i, xs->size())) {
      const bool old = n.op_type() == "Softmax" && model_.opset < 13;
      why_[static_cast<std::size_t>(i)] =
          fmt::format("{} over axis {}{} (only the last axis is expressed)", n.op_type(), axis_of(i),
                      old && !attr_int(i, "axis") ? fmt::format(", the default before opset 13 (this model's is {})", model_.opset) : "");
      continue;
    }
    const std::int64_t C = xs->back(), R = product(*xs) / C;
    const DType t = dt(n.input(0));
    if (n.op_type() == "Softmax") {
      KernelBuilder b("softmax");
      b.dim("R", R).dim("C", C);
      b.input("X", t, {"R", "C"}).output("Y", t, {"R", "C"});
      b.reduce(ReduceOp::max, "mx", {"r"}, {"c"}, access("X", {"r", "c"}));
      b.map("e", {"r", "c"}, ir::unary(Fn::exp, access("X", {"r", "c"}) - access("mx", {"r"})));
      b.reduce(ReduceOp::sum, "s", {"r"}, {"c"}, access("e", {"r", "c"}));
      b.map("Y", {"r", "c"}, access("e", {"r", "c"}) / access("s", {"r"}));
      add("softmax", "Softmax", b.build(), {i}, {bind("X", n.input(0))}, {bind("Y", n.output(0))});
      continue;
    }
    if ((n.output_size() > 1 && !n.output(1).empty()) || (n.output_size() > 2 && !n.output(2).empty())) {
      why_[static_cast<std::size_t>(i)] = "LayerNormalization with its Mean/InvStdDev outputs used";
      continue;
    }
    const double eps = attr_float(i, "epsilon").value_or(1e-5f);
    KernelBuilder b("layernorm");
    b.dim("R", R).dim("C", C);
    b.input("X", t, {"R", "C"});
    std::vector<Binding> ins{bind("X", n.input(0))};
    const bool has_gamma = n.input_size() > 1 && !n.input(1).empty(), has_beta = n.input_size() > 2 && !n.input(2).empty();
    // Scale and B broadcast to the normalised shape; kevo reads one value per element of the last
    // axis (a Scale of [1] bound as [C] read past its one value).
    std::string odd;
    for (int k = 1; k <= 2; ++k)
      if ((k == 1 ? has_gamma : has_beta) && odd.empty())
        if (const auto s = shape(n.input(k)); !s || s->empty() || s->back() != C || product(*s) != C)
          odd = fmt::format("LayerNormalization's {} {} (kevo takes one value per element of the last axis, [{}])", k == 1 ? "Scale" : "B",
                            s ? shape_text(*s) : std::string("of unknown shape"), C);
    if (!odd.empty()) {
      why_[static_cast<std::size_t>(i)] = odd;
      continue;
    }
    if (has_gamma) {
      b.input("gamma", dt(n.input(1)), {"C"});
      ins.push_back(bind("gamma", n.input(1)));
    }
    if (has_beta) {
      b.input("beta", dt(n.input(2)), {"C"});
      ins.push_back(bind("beta", n.input(2)));
    }
    b.output("Y", t, {"R", "C"});
    b.reduce(ReduceOp::mean, "mu", {"r"}, {"c"}, access("X", {"r", "c"}));
    b.map("xc", {"r", "c"}, access("X", {"r", "c"}) - access("mu", {"r"}));
    b.reduce(ReduceOp::mean, "var", {"r"}, {"c"}, ir::unary(Fn::square, access("xc", {"r", "c"})));
    Expr y = access("xc", {"r", "c"}) * ir::unary(Fn::rsqrt, access("var", {"r"}) + eps);
    if (has_gamma) y = std::move(y) * access("gamma", {"c"});
    if (has_beta) y = std::move(y) + access("beta", {"c"});
    b.map("Y", {"r", "c"}, std::move(y));
    add("layernorm", "LayerNormalization", b.build(), {i}, ins, {bind("Y", n.output(0))});
  }
}

// MatMul and Gemm, with bias and activation epilogues.
void Importer::pass_matmul() {
  for (int i = 0; i < g_.node_size(); ++i) {
    if (!free_node(i) || (!is_op(i, "MatMul") && !is_op(i, "Gemm"))) continue;
    const auto& n = node(i);
    auto as = shape(n.input(0)), bs = shape(n.input(1));
    if (!as || !bs) {
      why_[static_cast<std::size_t>(i)] = "operand shapes unknown (run ONNX shape inference or bind dims with --dim)";
      continue;
    }
    const bool gemm = is_op(i, "Gemm");
    const bool ta = gemm && attr_int(i, "transA").value_or(0) != 0, tb = gemm && attr_int(i, "transB").value_or(0) != 0;
    const double alpha = gemm ? attr_float(i, "alpha").value_or(1.f) : 1.0, beta = gemm ? attr_float(i, "beta").value_or(1.f) : 1.0;
    if (as->size() < 2 || bs->size() < 2) {
      why_[static_cast<std::size_t>(i)] = fmt::format("matrix-vector product {} x {} (rank-1 operand)", shape_text(*as), shape_text(*bs));
      continue;
    }
    const DType t = dt(n.input(0));
    std::vector<int> nodes{i};
    std::string label = n.op_type();
    if (bs->size() == 2) {
      // A [..., M, K] (leading dims flattened into M) times B [K, N].
      const std::int64_t K = ta ? (*as)[0] : as->back(), M = ta ? (*as)[1] : product(*as) / K;
      const std::int64_t N = tb ? (*bs)[0] : (*bs)[1];
      if ((tb ? (*bs)[1] : (*bs)[0]) != K) {
        why_[static_cast<std::size_t>(i)] = fmt::format("inner dims differ: {} x {}", shape_text(*as), shape_text(*bs));
        continue;
      }
      std::string cvalue;  // Gemm's C
      Shape cshape;
      if (gemm && n.input_size() > 2 && !n.input(2).empty()) {
        cvalue = n.input(2);
        auto cs = shape(cvalue);
        if (!cs || !(product(*cs) == N || product(*cs) == M * N) || (!cs->empty() && cs->back() != N && product(*cs) != 1)) {
          why_[static_cast<std::size_t>(i)] = fmt::format("Gemm's C {} (kevo takes C as [N], [1, N] or [M, N])",
                                                          cs ? shape_text(*cs) : std::string("of unknown shape"));
          continue;
        }
        cshape = *cs;
      }
      auto ep = epilogue(n.output(0), N, cvalue.empty());
      if (!cvalue.empty()) ep.bias = cvalue, ep.bias_shape = cshape;
      nodes.insert(nodes.end(), ep.nodes.begin(), ep.nodes.end());
      label += ep.label;
      const bool fused = !ep.bias.empty() || ep.act || alpha != 1.0;
      KernelBuilder b(!fused ? "matmul" : "matmul_bias_act");
      b.dim("M", M).dim("N", N).dim("K", K);
      b.input("A", t, ta ? std::vector<std::string>{"K", "M"} : std::vector<std::string>{"M", "K"});
      b.input("W", t, tb ? std::vector<std::string>{"N", "K"} : std::vector<std::string>{"K", "N"});
      std::vector<Binding> ins{bind("A", n.input(0)), bind("W", n.input(1))};
      const bool full_bias = !ep.bias.empty() && product(ep.bias_shape) == M * N && M != 1;
      if (!ep.bias.empty()) {
        b.input("bias", dt(ep.bias), full_bias ? std::vector<std::string>{"M", "N"} : std::vector<std::string>{"N"});
        ins.push_back(bind("bias", ep.bias));
      }
      b.output("C", t, {"M", "N"});
      const Expr a = ta ? access("A", {"k", "m"}) : access("A", {"m", "k"});
      const Expr w = tb ? access("W", {"n", "k"}) : access("W", {"k", "n"});
      if (!fused) {
        b.contract("C", {"m", "n"}, {"k"}, a, w);
      } else {
        b.contract("acc", {"m", "n"}, {"k"}, a, w);
        Expr x = access("acc", {"m", "n"});
        if (alpha != 1.0) x = std::move(x) * alpha;
        if (!ep.bias.empty()) {
          Expr bias = full_bias ? access("bias", {"m", "n"}) : access("bias", {"n"});
          if (beta != 1.0) bias = std::move(bias) * beta;
          x = std::move(x) + std::move(bias);
        }
        if (ep.act) x = ir::unary(*ep.act, std::move(x));
        b.map("C", {"m", "n"}, std::move(x));
      }
      add(fused ? "matmul_bias_act" : "matmul", label, b.build(), nodes, ins, {bind("C", ep.out)});
      continue;
    }
    // Batched: A [..., M, K] x B [..., K, N] with the same batch dims (flattened into one).
    if (gemm || as->size() != bs->size()) {
      why_[static_cast<std::size_t>(i)] = fmt::format("broadcast batched MatMul {} x {}", shape_text(*as), shape_text(*bs));
      continue;
    }
    const std::size_t r = as->size();
    if (!std::equal(as->begin(), as->end() - 2, bs->begin()) || (*as)[r - 1] != (*bs)[r - 2]) {
      why_[static_cast<std::size_t>(i)] = fmt::format("batched MatMul {} x {} (batch dims differ: broadcasting)", shape_text(*as), shape_text(*bs));
      continue;
    }
    const std::int64_t B = product(*as, 0, r - 2), M = (*as)[r - 2], K = (*as)[r - 1], N = (*bs)[r - 1];
    KernelBuilder b("bmm");
    b.dim("B", B).dim("M", M).dim("N", N).dim("K", K);
    b.input("A", t, {"B", "M", "K"}).input("W", t, {"B", "K", "N"}).output("C", t, {"B", "M", "N"});
    b.contract("C", {"b", "m", "n"}, {"k"}, access("A", {"b", "m", "k"}), access("W", {"b", "k", "n"}));
    add("bmm", "MatMul (batched)", b.build(), nodes, {bind("A", n.input(0)), bind("W", n.input(1))}, {bind("C", n.output(0))});
  }
}

// ReduceMean/ReduceSum/ReduceMax over the last axis, GlobalAveragePool.
void Importer::pass_reduce() {
  static const std::map<std::string, ReduceOp, std::less<>> ops = {
      {"ReduceMean", ReduceOp::mean}, {"ReduceSum", ReduceOp::sum}, {"ReduceMax", ReduceOp::max},
      {"ReduceMin", ReduceOp::min}, {"GlobalAveragePool", ReduceOp::mean}};
  for (int i = 0; i < g_.node_size(); ++i) {
    if (!free_node(i)) continue;
    const auto& n = node(i);
    auto it = ops.find(n.op_type());
    if (it == ops.end()) continue;
    auto xs = shape(n.input(0));
    if (!xs || xs->size() < 2) continue;
    std::int64_t R = 0, C = 0;
    if (n.op_type() == "GlobalAveragePool") {
      if (xs->size() < 3) continue;
      R = (*xs)[0] * (*xs)[1];
      C = product(*xs, 2);
    } else {
      auto axes = attr_ints(i, "axes");
      std::vector<std::int64_t> ax;
      if (axes) ax = *axes;
      else if (n.input_size() > 1 && is_const(n.input(1)))
        if (auto f = tensor_floats(*value(n.input(1))->init))
          for (float v : *f) ax.push_back(static_cast<std::int64_t>(v));
      const auto rank = static_cast<std::int64_t>(xs->size());
      if (ax.size() != 1 || (ax[0] != -1 && ax[0] != rank - 1)) {
        why_[static_cast<std::size_t>(i)] = fmt::format("{} over axes other than the last", n.op_type());
        continue;
      }
      C = xs->back();
      R = product(*xs) / C;
    }
    const DType t = dt(n.input(0));
    KernelBuilder b("reduce");
    b.dim("R", R).dim("C", C);
    b.input("X", t, {"R", "C"}).output("Y", t, {"R"});
    b.reduce(it->second, "Y", {"r"}, {"c"}, access("X", {"r", "c"}));
    add("reduce", n.op_type(), b.build(), {i}, {bind("X", n.input(0))}, {bind("Y", n.output(0))});
  }
}

// Conv (2-D, group 1, dilation 1) as a reduction over shifted reads with implicit zero padding,
// Y[n, o, h, w] = sum(c, kh, kw) X[n, c, s*h + kh - p, s*w + kw - p] * Wt[o, c, kh, kw], its bias
// and an activation fused; MaxPool without padding as a max over the window.
void Importer::pass_conv() {
  for (int i = 0; i < g_.node_size(); ++i) {
    if (!free_node(i) || (!is_op(i, "Conv") && !is_op(i, "MaxPool"))) continue;
    const auto& n = node(i);
    const bool conv = is_op(i, "Conv");
    auto xs = shape(n.input(0));
    auto ys = shape(n.output(0));
    auto fail = [&](std::string why) { why_[static_cast<std::size_t>(i)] = std::move(why); };
    if (!xs || !ys || xs->size() != 4 || ys->size() != 4) {
      fail(fmt::format("{} other than 2-D NCHW (or shapes unknown)", n.op_type()));
      continue;
    }
    const auto strides = attr_ints(i, "strides").value_or(std::vector<std::int64_t>{1, 1});
    const auto pads = attr_ints(i, "pads").value_or(std::vector<std::int64_t>{0, 0, 0, 0});
    const auto dil = attr_ints(i, "dilations").value_or(std::vector<std::int64_t>{1, 1});
    const std::string autopad = [&] {
      for (const auto& a : n.attribute())
        if (a.name() == "auto_pad") return a.s();
      return std::string("NOTSET");
    }();
    if (strides.size() != 2 || pads.size() != 4 || dil != std::vector<std::int64_t>{1, 1} || (autopad != "NOTSET" && autopad != "VALID") ||
        pads[0] != pads[2] || pads[1] != pads[3]) {
      fail(fmt::format("{} with dilation, asymmetric or automatic padding", n.op_type()));
      continue;
    }
    const DType t = dt(n.input(0));
    const std::int64_t N = (*xs)[0], C = (*xs)[1], H = (*xs)[2], W = (*xs)[3], Ho = (*ys)[2], Wo = (*ys)[3];
    const IndexShift plain{};
    const IndexShift sh{strides[0], "kh", -pads[0]}, sw{strides[1], "kw", -pads[1]};
    if (!conv) {
      fail("MaxPool: kevo's ir takes a window index's extent from a plain read, and a pooling window has no filter tensor to give it");
      continue;
    }
    auto wsh = shape(n.input(1));
    if (!wsh || wsh->size() != 4 || (*wsh)[1] != C || attr_int(i, "group").value_or(1) != 1) {
      fail("grouped Conv (or weight shape unknown)");
      continue;
    }
    const std::int64_t O = (*wsh)[0], KH = (*wsh)[2], KW = (*wsh)[3];
    const bool bias = n.input_size() > 2 && !n.input(2).empty();
    auto ep = epilogue(n.output(0), -1, false);
    // The sum writes the kernel's output directly: kevo's ir infers an intermediate's extents from
    // plain reads, and a convolution reads its input positions only shifted. The bias and the
    // activation are a second (elementwise) kernel on the convolution's output.
    KernelBuilder b("conv2d");
    b.dim("N", N).dim("C", C).dim("H", H).dim("W", W).dim("O", O).dim("Ho", Ho).dim("Wo", Wo).dim("KH", KH).dim("KW", KW);
    b.input("X", t, {"N", "C", "H", "W"}).input("Wt", t, {"O", "C", "KH", "KW"});
    b.output("Y", t, {"N", "O", "Ho", "Wo"});
    b.reduce(ReduceOp::sum, "Y", {"n", "o", "h", "w"}, {"c", "kh", "kw"},
             access("X", {"n", "c", "h", "w"}, {plain, plain, sh, sw}) * access("Wt", {"o", "c", "kh", "kw"}));
    const bool split = bias || ep.act;
    const std::string pre = split ? n.output(0) + " (before bias)" : n.output(0);
    Binding yb = bind("Y", n.output(0));
    yb.value = pre;
    add("conv2d", "Conv", b.build(), {i}, {bind("X", n.input(0)), bind("Wt", n.input(1))}, {yb});
    if (!split || !claimed_[static_cast<std::size_t>(i)]) continue;
    KernelBuilder e("eltwise");
    e.dim("N", N).dim("O", O).dim("Ho", Ho).dim("Wo", Wo);
    e.input("X0", t, {"N", "O", "Ho", "Wo"});
    Binding xb = yb;
    xb.tensor = "X0";
    std::vector<Binding> ins{xb};
    Expr y = access("X0", {"n", "o", "h", "w"});
    if (bias) {
      e.input("X1", dt(n.input(2)), {"O"});
      ins.push_back(bind("X1", n.input(2)));
      y = std::move(y) + access("X1", {"o"});
    }
    if (ep.act) y = ir::unary(*ep.act, std::move(y));
    e.output("Y", t, {"N", "O", "Ho", "Wo"});
    e.map("Y", {"n", "o", "h", "w"}, std::move(y));
    add("eltwise", bias ? "Conv bias" + ep.label : ep.label.substr(1), e.build(), ep.nodes, ins, {bind("Y", ep.out)}, i);
  }
}

// Chains of elementwise nodes: each node's output with a single consumer that is elementwise and
// keeps the chain's shape is fused; inputs from outside the chain broadcast numpy-style.
void Importer::pass_eltwise() {
  static const std::map<std::string, Fn, std::less<>> unary = {
      {"Relu", Fn::relu}, {"Sigmoid", Fn::sigmoid}, {"Tanh", Fn::tanh}, {"Exp", Fn::exp}, {"Log", Fn::log},
      {"Sqrt", Fn::sqrt}, {"Neg", Fn::neg}, {"Abs", Fn::abs}, {"Reciprocal", Fn::reciprocal}};
  static const std::map<std::string, Fn, std::less<>> binary = {
      {"Add", Fn::add}, {"Sub", Fn::sub}, {"Mul", Fn::mul}, {"Div", Fn::div}, {"Max", Fn::max}, {"Min", Fn::min}};
  auto elementwise = [&](int i) {
    const auto& op = node(i).op_type();
    if (!unary.count(op) && !binary.count(op) && op != "Pow" && op != "Erf") return false;
    if (binary.count(op) && node(i).input_size() != 2) return false;
    auto* ov = value(node(i).output(0));
    return ov && ov->shape_known && dtype_of(ov->elem_type).has_value();
  };
  for (int i0 = 0; i0 < g_.node_size(); ++i0) {
    if (!free_node(i0)) continue;
    const auto& op0 = node(i0).op_type();
    if (!unary.count(op0) && !binary.count(op0) && op0 != "Pow" && op0 != "Erf") continue;
    auto* ov0 = value(node(i0).output(0));
    if (!ov0 || !ov0->shape_known) {
      why_[static_cast<std::size_t>(i0)] = "output shape unknown";
      continue;
    }
    if (!dtype_of(ov0->elem_type)) {
      const bool real = ov0->elem_type == onnx::TensorProto_DataType_DOUBLE;
      why_[static_cast<std::size_t>(i0)] =
          real ? fmt::format("{} arithmetic: kevo computes in fp32, fp16 or bf16", onnx::TensorProto_DataType_Name(ov0->elem_type))
               : "integer arithmetic (shape computation), not a tensor kernel";
      continue;
    }
    const Shape out_shape = ov0->shape;
    const std::size_t rank = out_shape.size();
    if (rank == 0) {
      why_[static_cast<std::size_t>(i0)] = fmt::format("output '{}' has rank 0 (kevo's kernels have at least one dimension)",
                                                       printable(node(i0).output(0)));
      continue;
    }
    // The chain: i0, then while the output has one consumer that is elementwise with the same shape.
    std::vector<int> chain{i0};
    std::string cur = node(i0).output(0);
    // At most kMaxChain nodes per kernel: building one expression copies it per node, so a chain
    // of n costs about n^2 (a 2,000-node Relu chain ran for minutes); a longer chain continues in
    // the next kernel.
    constexpr std::size_t kMaxChain = 64;
    while (chain.size() < kMaxChain) {
      auto c = sole_consumer(cur);
      if (!c || !elementwise(*c) || value(node(*c).output(0))->shape != out_shape) break;
      chain.push_back(*c);
      cur = node(*c).output(0);
    }
    // Flattened to rows x columns [R, C] when every operand from outside is the output's shape, a
    // row vector along the last dim, or a scalar constant (the common case: the same kernel for
    // every rank); else expressions over indices i0..i{rank-1} and dims D0.. by position.
    bool flat = rank >= 1;
    {
      std::set<std::string> made;
      for (int i : chain) {
        for (const auto& in : node(i).input())
          if (!made.count(in) && !scalar(in)) {
            auto vs = shape(in);
            const bool full = vs && *vs == out_shape;
            const bool row = vs && !vs->empty() && vs->back() == out_shape.back() && product(*vs) == out_shape.back();
            flat = flat && (full || row);
          }
        made.insert(node(i).output(0));
      }
    }
    std::vector<std::string> idx, dims;
    if (flat) {
      idx = {"r", "c"};
      dims = {"R", "C"};
    } else {
      for (std::size_t d = 0; d < rank; ++d) {
        idx.push_back(fmt::format("i{}", d));
        dims.push_back(fmt::format("D{}", d));
      }
    }
    std::map<std::string, std::string> ext;  // ONNX value -> kernel tensor name
    std::vector<std::pair<std::string, std::vector<std::string>>> ext_dims;
    std::vector<Binding> ins;
    std::map<std::string, Expr> in_chain;
    std::string reject;
    auto operand = [&](const std::string& v) -> std::optional<Expr> {
      if (auto it = in_chain.find(v); it != in_chain.end()) return it->second;
      if (auto s = scalar(v)) return constant(*s);
      auto vs = shape(v);
      if (!vs || vs->size() > rank) {
        reject = fmt::format("operand '{}' shape unknown or larger than the output", v);
        return std::nullopt;
      }
      std::vector<std::string> ti, td;
      const std::size_t off = rank - vs->size();
      if (flat) {
        ti = *vs == out_shape ? idx : std::vector<std::string>{"c"};
        td = *vs == out_shape ? dims : std::vector<std::string>{"C"};
      }
      for (std::size_t d = 0; d < vs->size() && !flat; ++d) {
        if ((*vs)[d] == 1 && out_shape[off + d] != 1) continue;  // broadcast
        if ((*vs)[d] != out_shape[off + d]) {
          reject = fmt::format("operand '{}' {} does not broadcast to {}", v, shape_text(*vs), shape_text(out_shape));
          return std::nullopt;
        }
        ti.push_back(idx[off + d]);
        td.push_back(dims[off + d]);
      }
      auto it = ext.find(v);
      if (it == ext.end()) {
        const std::string name = fmt::format("X{}", ext.size());
        it = ext.emplace(v, name).first;
        ext_dims.emplace_back(name, td);
        ins.push_back(bind(name, v));
      }
      return access(it->second, ti);
    };
    std::vector<int> used;
    std::string label;
    for (std::size_t k = 0; k < chain.size() && reject.empty(); ++k) {
      const int i = chain[k];
      const auto& n = node(i);
      if (n.op_type() == "Div" || n.op_type() == "Erf") {
        // GELU (erf form) as one function.
        if (n.op_type() == "Div")
          if (auto g = gelu_erf_at(i, n.input(0)); g && std::all_of(g->first.begin(), g->first.end(), [&](int x) {
                return std::find(chain.begin(), chain.end(), x) != chain.end();
              })) {
            auto x = operand(n.input(0));
            if (!x) break;
            in_chain[g->second] = ir::unary(Fn::gelu_erf, *x);
            used.insert(used.end(), g->first.begin(), g->first.end());
            label += (label.empty() ? "" : "+") + std::string("Gelu");
            k += g->first.size() - 1;
            cur = g->second;
            continue;
          }
        if (n.op_type() == "Erf") {
          reject = "Erf outside the GELU pattern (kevo has no erf function)";
          break;
        }
      }
      std::optional<Expr> e;
      if (auto u = unary.find(n.op_type()); u != unary.end()) {
        auto x = operand(n.input(0));
        if (x) e = ir::unary(u->second, *x);
      } else if (auto b = binary.find(n.op_type()); b != binary.end()) {
        auto x = operand(n.input(0)), y = operand(n.input(1));
        if (x && y) e = ir::call(b->second, {*x, *y});
      } else if (n.op_type() == "Pow") {
        auto p = scalar(n.input(1));
        auto x = operand(n.input(0));
        if (!p) reject = is_const(n.input(1)) ? "Pow with a tensor exponent (kevo takes one constant for all elements)"
                                               : "Pow with a non-constant exponent";
        else if (x) {
          if (*p == 2.f) e = ir::unary(Fn::square, *x);
          else if (*p == 1.f) e = *x;
          else if (*p == 0.5f) e = ir::unary(Fn::sqrt, *x);
          else if (*p == -0.5f) e = ir::unary(Fn::rsqrt, *x);
          else if (*p == -1.f) e = ir::unary(Fn::reciprocal, *x);
          else if (*p == 3.f) e = *x * ir::unary(Fn::square, *x);
          else reject = fmt::format("Pow with exponent {}", *p);
        }
      }
      if (!e) {
        if (reject.empty()) reject = fmt::format("{} not expressible", n.op_type());
        break;
      }
      in_chain[n.output(0)] = std::move(*e);
      used.push_back(i);
      label += (label.empty() ? "" : "+") + n.op_type();
    }
    if (used.empty()) {
      // The first node alone is rejected; the rest of the chain is tried again from its own start.
      why_[static_cast<std::size_t>(i0)] = reject.empty() ? "not expressible" : reject;
      continue;
    }
    // A chain cut short by a node kevo cannot express: the part before it is a kernel; the node
    // keeps its reason (and the nodes after it start their own chain).
    if (!reject.empty() && used.size() < chain.size()) why_[static_cast<std::size_t>(chain[used.size()])] = reject;
    const std::string out = node(used.back()).output(0);
    const DType t = dt(out);
    KernelBuilder b("eltwise");
    if (flat) b.dim("R", product(out_shape) / out_shape.back()).dim("C", out_shape.back());
    else
      for (std::size_t d = 0; d < rank; ++d) b.dim(dims[d], out_shape[d]);
    for (const auto& [name, td] : ext_dims) {
      const auto& bnd = *std::find_if(ins.begin(), ins.end(), [&name = name](const Binding& x) { return x.tensor == name; });
      b.input(name, dt(bnd.value), td);
    }
    b.output("Y", t, dims);
    b.map("Y", idx, in_chain.at(out));
    if (label.size() > 60) label = fmt::format("{} elementwise ops", used.size());
    std::sort(used.begin(), used.end());
    add("eltwise", label, b.build(), used, ins, {bind("Y", out)});
  }
}

std::string data_movement_reason(std::string_view op) {
  static const std::set<std::string, std::less<>> movement = {
      "Reshape", "Transpose", "Gather", "Slice", "Concat", "Split", "Squeeze", "Unsqueeze", "Flatten", "Expand",
      "Tile", "Pad", "GatherElements", "GatherND", "ScatterND", "DepthToSpace", "SpaceToDepth"};
  static const std::set<std::string, std::less<>> shape_ops = {"Shape", "Size", "ConstantOfShape", "Range", "NonZero"};
  if (movement.count(op)) return "data movement (layout only, no arithmetic): left to the framework";
  if (shape_ops.count(op)) return "shape computation, not a tensor kernel";
  if (op == "Constant") return "a constant (inlined into the kernels that read it)";
  if (op == "Identity") return "an alias (no computation)";
  if (op == "Dropout") return "identity at inference (no computation)";
  if (op == "Cast") return "a dtype conversion (kernels round at their boundaries)";
  if (op == "ConvTranspose") return "transposed convolution: not imported";
  if (op == "AveragePool") return "average pooling: not imported";
  return "no kevo kernel for this op";
}

// Why node i is not imported whatever pattern it would be part of, or "" (checked once before the
// passes; free_node and add() honour it): an operator of another domain (an ONNX Runtime NHWC Conv
// is not ONNX's), a variadic Max/Min of other than two inputs, fewer inputs than the operator
// takes, a zero-size value, or a value past kevo's element limit (a product of dims that wrapped
// imported a 1824726041 x 1263665316 x 8 tensor as 4 x 8), and a legacy (opset < 7) broadcast
// along an axis.
std::string Importer::screen(int i) {
  const auto& n = node(i);
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return fmt::format("an operator of domain '{}', not ONNX's own", printable(n.domain()));
  if ((op == "Max" || op == "Min" || op == "Sum" || op == "Mean") && n.input_size() != 2)
    return fmt::format("{} of {} input(s) (kevo expresses it of two)", op, n.input_size());
  static const std::map<std::string, int, std::less<>> kInputs = {
      {"MatMul", 2}, {"Gemm", 2}, {"Conv", 2}, {"LayerNormalization", 2}, {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2},
      {"Pow", 2}, {"Softmax", 1}, {"MaxPool", 1}, {"ReduceMean", 1}, {"ReduceSum", 1}, {"ReduceMax", 1}, {"ReduceMin", 1},
      {"GlobalAveragePool", 1}, {"Relu", 1}, {"Sigmoid", 1}, {"Tanh", 1}, {"Exp", 1}, {"Log", 1}, {"Sqrt", 1}, {"Neg", 1},
      {"Abs", 1}, {"Reciprocal", 1}, {"Erf", 1}};
  if (const auto it = kInputs.find(op); it != kInputs.end()) {
    int given = 0;
    for (int k = 0; k < std::min(n.input_size(), it->second); ++k) given += n.input(k).empty() ? 0 : 1;
    if (given < it->second) return fmt::format("{} input(s) given; ONNX's {} takes {}", given, op, it->second);
    if (n.output_size() < 1 || n.output(0).empty()) return fmt::format("no output; ONNX's {} has one", op);
  }
  for (const auto* list : {&n.input(), &n.output()})
    for (const auto& v : *list) {
      const auto s = v.empty() ? std::nullopt : shape(v);
      if (!s) continue;
      if (std::find(s->begin(), s->end(), 0) != s->end())
        return fmt::format("value '{}' {} is empty (a zero-size tensor)", printable(v), shape_text(*s));
      if (product(*s) > (std::int64_t{1} << 40))
        return fmt::format("value '{}' {} has more than 2^40 elements (kevo's limit)", printable(v), shape_text(*s));
    }
  if (model_.opset > 0 && model_.opset < 7)
    for (const auto& a : n.attribute())
      if (a.name() == "axis" && (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow"))
        return fmt::format("a legacy broadcast along axis {} (opset {} < 7)", a.i(), model_.opset);
  return {};
}

Expected<Model, std::string> Importer::run() {
  model_.file = name_;
  model_.producer = m_.producer_name() + (m_.producer_version().empty() ? "" : " " + m_.producer_version());
  for (const auto& o : m_.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") model_.opset = o.version();
  if (!m_.has_graph() || g_.node_size() == 0) return unexpected(fmt::format("{}: the ONNX model has no graph nodes", name_));
  // Bind the graph inputs' named dims, then let ONNX infer the intermediate shapes.
  std::set<std::string> inits;
  for (const auto& t : g_.initializer()) inits.insert(t.name());
  std::set<std::string, std::less<>> params;  // the graph inputs' dynamic dims, by name
  for (auto& in : *g_.mutable_input()) {
    if (inits.count(in.name()) || !in.type().has_tensor_type()) continue;
    auto* sh = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int d = 0; d < sh->dim_size(); ++d) {
      auto* dim = sh->mutable_dim(d);
      if (dim->has_dim_value() && dim->dim_value() > kMaxOnnxDim)
        return unexpected(fmt::format("{}: input '{}' dim {} is {}: larger than kevo takes (2^31)", name_, printable(in.name()), d,
                                      dim->dim_value()));
      if (dim->has_dim_value() && dim->dim_value() > 0) continue;
      if (dim->has_dim_value())  // (an unset dim reads 0 too: has_dim_value tells them apart)
        return unexpected(fmt::format("{}: input '{}' dim {} is {}: a dimension must be positive", name_, printable(in.name()), d,
                                      dim->dim_value()));
      const std::string p = dim->has_dim_param() ? dim->dim_param() : std::string();
      if (!p.empty()) params.insert(p);
      auto it = p.empty() ? opt_.dims.end() : opt_.dims.find(p);
      if (it == opt_.dims.end())
        return unexpected(fmt::format("{}: input '{}' dim {} is dynamic{}: bind it with --dim {}=N", name_, in.name(), d,
                                      p.empty() ? std::string(" (unnamed)") : fmt::format(" ('{}')", p),
                                      p.empty() ? std::string("NAME") : p));
      if (it->second > kMaxOnnxDim)
        return unexpected(fmt::format("{}: --dim {}={}: larger than kevo takes (2^31)", name_, printable(p), it->second));
      dim->set_dim_value(it->second);
    }
  }
  // A --dim the model has no use for is a mistyped name, not a binding to ignore.
  for (const auto& [d, v] : opt_.dims)
    if (!params.count(d)) {
      std::string known;
      for (const auto& q : params) known += (known.empty() ? "" : ", ") + printable(q);
      return unexpected(fmt::format("{}: --dim {}: the model has no dynamic dimension named '{}' ({})", name_, printable(d),
                                    printable(d), known.empty() ? "it has none" : "it has " + known));
    }
  // ONNX's shape inference divides by these attributes unchecked (a Conv or pool with stride 0
  // killed the process with SIGFPE): a non-positive one is the model's error.
  for (const auto& n : g_.node())
    for (const auto& a : n.attribute()) {
      static constexpr std::string_view kPositive[] = {"strides", "dilations", "kernel_shape", "group", "blocksize"};
      if (std::find(std::begin(kPositive), std::end(kPositive), a.name()) == std::end(kPositive)) continue;
      std::vector<std::int64_t> vs(a.ints().begin(), a.ints().end());
      if (a.has_i()) vs.push_back(a.i());
      for (const auto v : vs)
        if (v <= 0)
          return unexpected(fmt::format("{}: node '{}' ({}): attribute '{}' holds {}; it must be positive", name_, printable(n.name()),
                                        printable(n.op_type()), a.name(), v));
    }
  // An attribute kevo reads, of another type than ONNX gives it (ONNX's checker refuses the file;
  // kevo used to read the default instead: a Gemm alpha stored as INT 2 imported as alpha = 1).
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = g_.node(i);
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    using A = onnx::AttributeProto;
    static const std::map<std::string, A::AttributeType, std::less<>> kTypes = {
        {"axis", A::INT}, {"axes", A::INTS}, {"keepdims", A::INT}, {"noop_with_empty_axes", A::INT}, {"alpha", A::FLOAT},
        {"beta", A::FLOAT}, {"transA", A::INT}, {"transB", A::INT}, {"epsilon", A::FLOAT}, {"stash_type", A::INT},
        {"perm", A::INTS}, {"pads", A::INTS}, {"strides", A::INTS}, {"dilations", A::INTS}, {"kernel_shape", A::INTS},
        {"group", A::INT}, {"auto_pad", A::STRING}, {"broadcast", A::INT}};
    for (const auto& a : n.attribute())
      if (const auto it = kTypes.find(a.name()); it != kTypes.end() && a.type() != it->second)
        return unexpected(fmt::format("{}: node '{}' ({}): attribute '{}' is {}, not {} as ONNX defines it", name_,
                                      printable(n.name().empty() ? fmt::format("{}#{}", n.op_type(), i) : n.name()),
                                      printable(n.op_type()), printable(a.name()), A::AttributeType_Name(a.type()),
                                      A::AttributeType_Name(it->second)));
  }
  try {
    onnx::shape_inference::InferShapes(m_);
  } catch (const std::exception&) {
    // Inference is best effort: values without a shape make their nodes unsupported, named so.
  }
  auto note_type = [&](const onnx::ValueInfoProto& vi) {
    auto& v = values_[vi.name()];
    if (!vi.type().has_tensor_type()) return;
    const auto& tt = vi.type().tensor_type();
    v.elem_type = tt.elem_type();
    if (!tt.has_shape()) return;
    Shape s;
    for (const auto& d : tt.shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() <= 0 || d.dim_value() > kMaxOnnxDim) return;  // unknown: its nodes say so
      s.push_back(d.dim_value());
    }
    v.shape = std::move(s);
    v.shape_known = true;
  };
  for (const auto& vi : g_.input()) note_type(vi);
  for (const auto& vi : g_.value_info()) note_type(vi);
  for (const auto& vi : g_.output()) {
    note_type(vi);
    outputs_.insert(vi.name());
  }
  for (const auto& t : g_.initializer()) {
    for (const auto d : t.dims())
      if (d < 0 || d > kMaxOnnxDim)
        return unexpected(fmt::format("{}: initializer '{}' has a dimension of {}: kevo takes 0 to 2^31", name_, printable(t.name()), d));
    if (auto why = count_mismatch(t)) return unexpected(fmt::format("{}: initializer '{}' {}", name_, printable(t.name()), *why));
    auto& v = values_[t.name()];
    v.init = &t;
    v.elem_type = t.data_type();
    v.shape.assign(t.dims().begin(), t.dims().end());
    v.shape_known = true;
  }
  // One writer per value, and every value written before it is read (ONNX graphs are sorted
  // topologically): a cycle or a doubly written value is the model's error, not a kernel.
  std::map<std::string, int, std::less<>> writer;
  const auto node_name = [&](int i) {
    const auto& n = g_.node(i);
    return printable(n.name().empty() ? fmt::format("{}#{}", n.op_type(), i) : n.name());
  };
  for (int i = 0; i < g_.node_size(); ++i)
    for (const auto& out : g_.node(i).output()) {
      if (out.empty()) continue;
      if (const auto [it, fresh] = writer.emplace(out, i); !fresh)
        return unexpected(fmt::format("{}: value '{}' is written by node '{}' and again by node '{}'", name_, printable(out),
                                      node_name(it->second), node_name(i)));
      // (an initializer or graph input of that name was read as the node's output: a crash)
      if (inits.count(out))
        return unexpected(fmt::format("{}: value '{}' is an initializer and written by node '{}'", name_, printable(out), node_name(i)));
      for (const auto& in : g_.input())
        if (in.name() == out)
          return unexpected(fmt::format("{}: value '{}' is a graph input and written by node '{}'", name_, printable(out), node_name(i)));
    }
  for (int i = 0; i < g_.node_size(); ++i)
    for (const auto& in : g_.node(i).input())
      if (const auto it = writer.find(in); it != writer.end() && it->second >= i)
        return unexpected(fmt::format("{}: node '{}' reads '{}' before node '{}' writes it (a cycle, or nodes out of order)", name_,
                                      node_name(i), printable(in), node_name(it->second)));
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = g_.node(i);
    for (const auto& in : n.input()) {
      if (in.empty()) continue;
      auto it = values_.find(in);
      if (it == values_.end())
        return unexpected(fmt::format("{}: node '{}' ({}) reads '{}', which no input, initializer or earlier node defines",
                                      name_, n.name().empty() ? fmt::format("{}#{}", n.op_type(), i) : n.name(), n.op_type(), in));
      it->second.consumers.push_back(i);
    }
    for (const auto& out : n.output()) {
      if (out.empty()) continue;
      auto& v = values_[out];
      v.producer = i;
      if (n.op_type() == "Constant") {
        for (const auto& a : n.attribute()) {
          if ((a.name() == "value_float" && a.type() == onnx::AttributeProto_AttributeType_FLOAT) ||
              (a.name() == "value_floats" && a.type() == onnx::AttributeProto_AttributeType_FLOATS)) {
            auto& t = synthetic_.emplace_back();  // the same constant as a tensor: inlined like `value`
            t.set_data_type(onnx::TensorProto_DataType_FLOAT);
            if (a.name() == "value_float") t.add_float_data(a.f());
            else {
              t.add_dims(a.floats_size());
              for (const float f : a.floats()) t.add_float_data(f);
            }
            v.init = &t;
            v.elem_type = t.data_type();
            v.shape.assign(t.dims().begin(), t.dims().end());
            v.shape_known = true;
          } else if (a.name() == "value" && a.has_t()) {
            if (auto why = count_mismatch(a.t())) return unexpected(fmt::format("{}: node '{}' (Constant): its value {}", name_, node_name(i), *why));
            v.init = &a.t();
            v.elem_type = a.t().data_type();
            v.shape.assign(a.t().dims().begin(), a.t().dims().end());
            v.shape_known = true;
          }
        }
      }
      if (n.op_type() == "Identity" && n.input_size() == 1) {
        const auto& src = values_[n.input(0)];
        if (src.init) {
          v.init = src.init;
          v.elem_type = src.elem_type;
          v.shape = src.shape;
          v.shape_known = src.shape_known;
        }
      }
    }
  }
  claimed_.assign(static_cast<std::size_t>(g_.node_size()), false);
  why_.assign(static_cast<std::size_t>(g_.node_size()), std::string());
  blocked_.assign(static_cast<std::size_t>(g_.node_size()), std::string());
  for (int i = 0; i < g_.node_size(); ++i) blocked_[static_cast<std::size_t>(i)] = screen(i);
  model_.nodes = static_cast<std::size_t>(g_.node_size());
  pass_attention();
  pass_norms();
  pass_ops();
  pass_matmul();
  pass_reduce();
  pass_conv();
  pass_eltwise();
  for (int i = 0; i < g_.node_size(); ++i) {
    if (claimed_[static_cast<std::size_t>(i)]) continue;
    const auto& op = node(i).op_type();
    std::string reason = blocked_[static_cast<std::size_t>(i)];
    if (reason.empty()) reason = why_[static_cast<std::size_t>(i)];
    if (reason.empty()) reason = data_movement_reason(op);
    model_.unsupported.push_back({node_name(i), op, reason});
  }
  if (model_.kernels.empty()) {
    const auto& u = model_.unsupported.front();
    return unexpected(fmt::format("{}: no kernel kevo can express in {} node(s); node '{}' ({}): {}", name_, model_.nodes, u.node,
                                  u.op_type, u.reason));
  }
  // Graph order of first appearance.
  std::sort(order_.begin(), order_.end());
  std::vector<ModelKernel> sorted;
  for (const auto& [first, k] : order_) sorted.push_back(std::move(model_.kernels[k]));
  model_.kernels = std::move(sorted);
  return std::move(model_);
}

}  // namespace

namespace {
// The first name or label of the model that is not valid UTF-8, described (ONNX's strings are
// UTF-8; protobuf's proto2 parser does not check them, and kevo writes them into JSON and tables).
std::optional<std::string> non_utf8_string(const onnx::ModelProto& m) {
  const auto bad = [](const std::string& s) { return !valid_utf8(s); };
  const auto say = [](const std::string& what, const std::string& s) {
    return fmt::format("{} '{}' is not valid UTF-8 (ONNX strings are UTF-8)", what, printable(s));
  };
  if (bad(m.producer_name())) return say("the producer name", m.producer_name());
  if (bad(m.producer_version())) return say("the producer version", m.producer_version());
  if (bad(m.domain())) return say("the model domain", m.domain());
  const auto& g = m.graph();
  if (bad(g.name())) return say("the graph name", g.name());
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const std::string where = fmt::format("node {}", i);
    if (bad(n.name())) return say(where + "'s name", n.name());
    if (bad(n.op_type())) return say(where + "'s op_type", n.op_type());
    if (bad(n.domain())) return say(where + "'s domain", n.domain());
    for (const auto& v : n.input())
      if (bad(v)) return say(where + "'s input", v);
    for (const auto& v : n.output())
      if (bad(v)) return say(where + "'s output", v);
  }
  for (const auto& t : g.initializer())
    if (bad(t.name())) return say("an initializer's name", t.name());
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
    for (const auto& v : *list)
      if (bad(v.name())) return say("a graph value's name", v.name());
  return std::nullopt;
}
}  // namespace

Expected<Model, std::string> import_onnx_bytes(std::string_view bytes, const std::string& name, const ImportOptions& opt) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  onnx::ModelProto m;
  if (bytes.empty()) return unexpected(fmt::format("{}: empty file (not an ONNX model)", name));
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX) || !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return unexpected(fmt::format("{}: not an ONNX model (the protobuf ModelProto does not parse)", name));
  if (!m.has_graph()) return unexpected(fmt::format("{}: not an ONNX model (no graph)", name));
  if (auto why = non_utf8_string(m)) return unexpected(fmt::format("{}: {}", name, *why));
  try {
    return Importer(m, name, opt).run();
  } catch (const std::exception& e) {
    return unexpected(fmt::format("{}: {}", name, e.what()));
  }
}

Expected<Model, std::string> import_onnx(const std::filesystem::path& file, const ImportOptions& opt) {
  // read_file names a directory as one (was "empty file"); bounded at protobuf's 2 GiB limit, so
  // a device never fills memory
  std::string bytes;
  try {
    bytes = read_file(file, static_cast<std::size_t>(INT32_MAX));
  } catch (const Error& e) {
    return unexpected(std::string(e.what()));
  }
  return import_onnx_bytes(bytes, file.string(), opt);
}

Expected<std::map<std::string, std::int64_t, std::less<>>, std::string> parse_dims(std::string_view text) {
  std::map<std::string, std::int64_t, std::less<>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const auto item = text.substr(start, end - start);
    if (!item.empty()) {
      const auto eq = item.find('=');
      std::int64_t v = 0;
      const char* b = eq == std::string_view::npos ? nullptr : item.data() + eq + 1;
      const auto [p, ec] = b ? std::from_chars(b, item.data() + item.size(), v) : std::from_chars_result{nullptr, std::errc::invalid_argument};
      if (eq == std::string_view::npos || eq == 0 || ec != std::errc() || p != item.data() + item.size() || v <= 0)
        return unexpected(fmt::format("--dim '{}': expected NAME=N with N a positive integer", printable(item)));
      if (!out.emplace(std::string(item.substr(0, eq)), v).second)
        return unexpected(fmt::format("--dim: '{}' is given twice", printable(item.substr(0, eq))));
    }
    start = end + 1;
  }
  return out;
}

}  // namespace kevo::model
