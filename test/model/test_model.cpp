// The model module: ONNX graphs built here with ONNX's own protobuf classes, imported into kernels
// whose reference evaluation is compared with a direct computation; the kernel table and tuning.
#include <onnx/onnx_pb.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <cmath>
#include <fstream>
#include <random>

#include "kevo/ir/eval.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/model.hpp"
#include "kevo/search/session.hpp"
#include "kevo/session/resolve.hpp"
#include "kevo/target/target.hpp"

using namespace kevo;

namespace {

struct G {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  int n = 0;
  G() {
    m.set_ir_version(8);
    m.set_producer_name("kevo-test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(13);
    g = m.mutable_graph();
    g->set_name("t");
  }
  void value(onnx::ValueInfoProto* v, const std::string& name, std::vector<std::int64_t> shape, const std::string& param = "") {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto_DataType_FLOAT);
    auto* s = tt->mutable_shape();
    for (auto d : shape) {
      auto* dim = s->add_dim();
      if (d > 0 || (param.empty() && d != -1)) dim->set_dim_value(d);  // (0 and -5: literal bad sizes)
      else dim->set_dim_param(param);
    }
  }
  void input(const std::string& name, std::vector<std::int64_t> shape, const std::string& param = "") {
    value(g->add_input(), name, std::move(shape), param);
  }
  void output(const std::string& name, std::vector<std::int64_t> shape) { value(g->add_output(), name, std::move(shape)); }
  void init(const std::string& name, std::vector<std::int64_t> shape, std::vector<float> data = {}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_FLOAT);
    std::int64_t count = 1;
    for (auto d : shape) {
      t->add_dims(d);
      count *= d;
    }
    if (data.empty()) {
      std::mt19937 rng(static_cast<unsigned>(count + static_cast<std::int64_t>(name.size())));
      std::uniform_real_distribution<float> u(-0.5f, 0.5f);
      for (std::int64_t i = 0; i < count; ++i) data.push_back(u(rng));
    }
    for (float f : data) t->add_float_data(f);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* nd = g->add_node();
    nd->set_op_type(op);
    nd->set_name(op + "_" + std::to_string(n++));
    for (auto& i : in) nd->add_input(i);
    for (auto& o : out) nd->add_output(o);
    return nd;
  }
  static void attr_i(onnx::NodeProto* nd, const std::string& name, std::int64_t v) {
    auto* a = nd->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr_ints(onnx::NodeProto* nd, const std::string& name, std::vector<std::int64_t> v) {
    auto* a = nd->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (auto x : v) a->add_ints(x);
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

const model::ModelKernel* find_kind(const model::Model& m, std::string_view kind) {
  for (const auto& k : m.kernels)
    if (k.kind == kind) return &k;
  return nullptr;
}

// A transformer-style block: Linear (MatMul + Add bias + Relu), the decomposed LayerNorm torch
// exports, Softmax, an attention subgraph, an elementwise chain and a Transpose.
G block(std::int64_t S = 16, std::int64_t D = 32) {
  G t;
  t.input("x", {-1, S, D}, "batch");
  t.init("W1", {D, D});
  t.init("b1", {D});
  t.init("gamma", {D});
  t.init("beta", {D});
  t.init("two", {}, {2.0f});
  t.init("eps", {}, {1e-5f});
  t.init("scale", {}, {std::sqrt(static_cast<float>(D))});
  t.init("half", {}, {0.5f});
  t.node("MatMul", {"x", "W1"}, {"h0"});
  t.node("Add", {"b1", "h0"}, {"h1"});
  t.node("Relu", {"h1"}, {"h"});
  auto* rm = t.node("ReduceMean", {"h"}, {"mu"});
  G::attr_ints(rm, "axes", {-1});
  t.node("Sub", {"h", "mu"}, {"xc"});
  t.node("Pow", {"xc", "two"}, {"sq"});
  auto* rm2 = t.node("ReduceMean", {"sq"}, {"var"});
  G::attr_ints(rm2, "axes", {-1});
  t.node("Add", {"var", "eps"}, {"ve"});
  t.node("Sqrt", {"ve"}, {"sd"});
  t.node("Div", {"xc", "sd"}, {"nx"});
  t.node("Mul", {"nx", "gamma"}, {"gx"});
  t.node("Add", {"gx", "beta"}, {"ln"});
  // attention on ln (batch x S x D as heads = batch): q = ln / sqrt(D), kt = Transpose(ln)
  t.node("Div", {"ln", "scale"}, {"q"});
  auto* tr = t.node("Transpose", {"ln"}, {"kt"});
  G::attr_ints(tr, "perm", {0, 2, 1});
  t.node("MatMul", {"q", "kt"}, {"s"});
  auto* sm = t.node("Softmax", {"s"}, {"p"});
  G::attr_i(sm, "axis", -1);
  t.node("MatMul", {"p", "ln"}, {"att"});
  // residual chain: (att + x) * 0.5, tanh
  t.node("Add", {"att", "x"}, {"r0"});
  t.node("Mul", {"r0", "half"}, {"r1"});
  t.node("Tanh", {"r1"}, {"y"});
  t.output("y", {-1, S, D});
  return t;
}

}  // namespace

TEST_CASE("model: a transformer-style block imports into fused kernels, nothing dropped") {
  G t = block();
  model::ImportOptions opt;
  opt.dims["batch"] = 2;
  auto m = model::import_onnx_bytes(t.bytes(), "block.onnx", opt);
  REQUIRE(m);
  std::vector<std::string> kinds;
  for (const auto& k : m->kernels) kinds.push_back(k.kind);
  CHECK(kinds == std::vector<std::string>{"matmul_bias_act", "layernorm", "attention", "eltwise"});
  const auto* mm = find_kind(*m, "matmul_bias_act");
  REQUIRE(mm);
  CHECK(mm->op == "MatMul+Add+Relu");
  CHECK(mm->shape == "M=32,K=32,N=32");  // batch 2 x seq 16 flattened into M
  const auto* el = find_kind(*m, "eltwise");
  REQUIRE(el);
  CHECK(el->op == "Add+Mul+Tanh");
  // Every node is in a kernel or listed: here only the Transpose (absorbed nowhere) is listed.
  std::size_t covered = m->unsupported.size();
  for (const auto& k : m->kernels)
    for (const auto& inst : k.instances) covered += inst.nodes.size();
  CHECK(covered == m->nodes);
  REQUIRE(m->unsupported.size() == 1);
  CHECK(m->unsupported[0].op_type == "Transpose");
  CHECK(m->unsupported[0].reason.find("data movement") != std::string::npos);
  // The layernorm kernel is the workload's own (same hash as layernorm:R=32,C=32).
  const auto* ln = find_kind(*m, "layernorm");
  REQUIRE(ln);
  auto wl = ir::workload("layernorm:R=32,C=32,eps=1e-05,dtype=fp32");
  REQUIRE(wl);
  const auto a = ir::evaluate(ln->kernel, ir::random_inputs(ln->kernel, 3));
  const auto b = ir::evaluate(*wl, ir::random_inputs(*wl, 3));
  CHECK(a.back() == b.back());
}

TEST_CASE("model: imported kernels evaluate to the graph's arithmetic") {
  G t = block(8, 16);
  model::ImportOptions opt;
  opt.dims["batch"] = 1;
  auto m = model::import_onnx_bytes(t.bytes(), "block.onnx", opt);
  REQUIRE(m);
  // matmul_bias_act against a direct loop over the weights the model holds.
  const auto* mm = find_kind(*m, "matmul_bias_act");
  REQUIRE(mm);
  const auto& W = m->weights.at("W1").data;
  const auto& bias = m->weights.at("b1").data;
  auto ins = ir::random_inputs(mm->kernel, 7);
  ins[1] = W;
  ins[2] = bias;
  const auto out = ir::evaluate(mm->kernel, ins);
  const auto& X = ins[0];
  double worst = 0;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) {
      double acc = bias[static_cast<std::size_t>(j)];
      for (int k = 0; k < 16; ++k) acc += X[static_cast<std::size_t>(i * 16 + k)] * W[static_cast<std::size_t>(k * 16 + j)];
      worst = std::max(worst, std::abs(std::max(acc, 0.0) - out[3][static_cast<std::size_t>(i * 16 + j)]));
    }
  CHECK(worst < 1e-4);
  // attention: inputs bound to q's source (ln), kt and ln; scale folded (1/sqrt(D)).
  const auto* at = find_kind(*m, "attention");
  REQUIRE(at);
  REQUIRE(at->instances[0].inputs.size() == 3);
  CHECK(at->instances[0].inputs[0].value == "ln");
  CHECK(at->instances[0].inputs[1].value == "kt");
  CHECK(at->instances[0].outputs[0].value == "att");
}

TEST_CASE("model: identical kernels are listed once with their count") {
  G t;
  t.input("x", {64, 32});
  t.init("W1", {32, 32});
  t.init("W2", {32, 32});
  t.node("MatMul", {"x", "W1"}, {"a"});
  t.node("Relu", {"a"}, {"b"});
  t.node("MatMul", {"b", "W2"}, {"c"});
  t.node("Relu", {"c"}, {"y"});
  t.output("y", {64, 32});
  auto m = model::import_onnx_bytes(t.bytes(), "mlp.onnx");
  REQUIRE(m);
  REQUIRE(m->kernels.size() == 1);
  CHECK(m->kernels[0].count() == 2);
  CHECK(m->kernels[0].op == "MatMul+Relu");
  CHECK(m->unsupported.empty());
}

TEST_CASE("model: a long elementwise chain is fused 64 nodes per kernel, every node covered") {
  // one fused expression per chain cost about n^2 in its length: 1,000 Relus took 44 s to import
  G t;
  t.input("x", {8, 16});
  std::string prev = "x";
  for (int i = 0; i < 200; ++i) {
    const std::string out = i == 199 ? "y" : fmt::format("v{}", i);
    t.node(i % 2 ? "Relu" : "Neg", {prev}, {out});
    prev = out;
  }
  t.output("y", {8, 16});
  const auto m = model::import_onnx_bytes(t.bytes(), "chain.onnx");
  REQUIRE(m);
  std::size_t instances = 0, nodes = 0;
  for (const auto& k : m->kernels)
    for (const auto& inst : k.instances) {
      ++instances;
      nodes += inst.nodes.size();
      CHECK(inst.nodes.size() <= 64);
    }
  CHECK(instances == 4);  // 64 + 64 + 64 + 8
  CHECK(nodes == 200);
  CHECK(m->unsupported.empty());
}

TEST_CASE("model: Gemm with transB and bias, fused epilogue only for a single consumer") {
  G t;
  t.input("x", {16, 8});
  t.init("W", {24, 8});
  t.init("C", {24});
  auto* gm = t.node("Gemm", {"x", "W", "C"}, {"g"});
  G::attr_i(gm, "transB", 1);
  t.node("Relu", {"g"}, {"r"});
  t.node("Sigmoid", {"g"}, {"s"});  // g has two consumers: no activation fused
  t.node("Add", {"r", "s"}, {"y"});
  t.output("y", {16, 24});
  auto m = model::import_onnx_bytes(t.bytes(), "gemm.onnx");
  REQUIRE(m);
  const auto* mm = find_kind(*m, "matmul_bias_act");
  REQUIRE(mm);
  CHECK(mm->op == "Gemm");
  CHECK(mm->shape == "M=16,K=8,N=24");
  // Relu and Sigmoid each start a chain; Add joins them (its own chain).
  std::size_t eltwise = 0;
  for (const auto& k : m->kernels) eltwise += k.kind == "eltwise" ? k.count() : 0;
  CHECK(eltwise >= 2);
}

TEST_CASE("model: bad files and unsupported graphs are one-line located errors") {
  auto junk = model::import_onnx_bytes(std::string("\x08\x01\x12\xff\xff garbage", 14), "junk.onnx");
  REQUIRE_FALSE(junk);
  CHECK(junk.error().find("junk.onnx: not an ONNX model") == 0);
  CHECK(junk.error().find('\n') == std::string::npos);
  CHECK_FALSE(model::import_onnx("/nonexistent/m.onnx"));
  CHECK(model::import_onnx(std::filesystem::temp_directory_path()).error().find("is a directory") != std::string::npos);
  G t;
  t.input("x", {4, 4});
  t.node("FancyOp", {"x"}, {"y"});
  t.output("y", {4, 4});
  auto u = model::import_onnx_bytes(t.bytes(), "fancy.onnx");
  REQUIRE_FALSE(u);
  CHECK(u.error() == "fancy.onnx: no kernel kevo can express in 1 node(s); node 'FancyOp_0' (FancyOp): no kevo kernel for this op");
  // A name that is not UTF-8 (was an uncaught JSON exception once the kernels were written, exit 1)
  G w;
  w.input("x\xff", {4, 4});
  w.node("Relu", {"x\xff"}, {"y"});
  w.output("y", {4, 4});
  auto nu = model::import_onnx_bytes(w.bytes(), "w.onnx");
  REQUIRE_FALSE(nu);
  CHECK(nu.error() == "w.onnx: node 0's input 'x\\xff' is not valid UTF-8 (ONNX strings are UTF-8)");
  // A dynamic dim without a binding names the flag.
  G d = block();
  auto dyn = model::import_onnx_bytes(d.bytes(), "dyn.onnx");
  REQUIRE_FALSE(dyn);
  CHECK(dyn.error().find("--dim batch=N") != std::string::npos);
  // A node reading an undefined value.
  G b;
  b.input("x", {4});
  b.node("Relu", {"nope"}, {"y"});
  auto bad = model::import_onnx_bytes(b.bytes(), "b.onnx");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().find("b.onnx: node 'Relu_0' (Relu) reads 'nope'") == 0);
  // Attributes ONNX's shape inference divides by: a zero stride, dilation, kernel size or group
  // killed the process (SIGFPE); now the model's error.
  for (const char* attr : {"strides", "dilations", "kernel_shape"})
    for (const char* op : {"Conv", "MaxPool", "AveragePool"}) {
      INFO(op << " " << attr);
      G z;
      z.input("x", {1, 2, 6, 6});
      z.init("w", {3, 2, 3, 3});
      auto* n = std::string(op) == "Conv" ? z.node(op, {"x", "w"}, {"y"}) : z.node(op, {"x"}, {"y"});
      if (std::string(attr) != "kernel_shape") G::attr_ints(n, "kernel_shape", {3, 3});
      G::attr_ints(n, attr, {0, 0});
      z.output("y", {1, 3, 4, 4});
      const auto e = model::import_onnx_bytes(z.bytes(), "z.onnx");
      REQUIRE_FALSE(e);
      CHECK(e.error().find(fmt::format("z.onnx: node '{}_0' ({}): attribute '{}' holds 0; it must be positive", op, op, attr)) == 0);
    }
  // A cycle, a value written twice, dimensions out of range: the model's errors (a cycle and a
  // double writer were imported, exit 0; 2^40 wrapped to "size 0"; -5 read as "dynamic")
  {
    G c;
    c.input("x", {4, 4});
    c.node("Add", {"x", "z"}, {"y"});
    c.node("Relu", {"y"}, {"z"});
    c.output("z", {4, 4});
    const auto e = model::import_onnx_bytes(c.bytes(), "c.onnx");
    REQUIRE_FALSE(e);
    CHECK(e.error() == "c.onnx: node 'Add_0' reads 'z' before node 'Relu_1' writes it (a cycle, or nodes out of order)");
    G w;
    w.input("x", {4, 4});
    w.node("Relu", {"x"}, {"y"});
    w.node("Neg", {"x"}, {"y"});
    w.output("y", {4, 4});
    CHECK(model::import_onnx_bytes(w.bytes(), "w.onnx").error() == "w.onnx: value 'y' is written by node 'Relu_0' and again by node 'Neg_1'");
    for (const std::int64_t d : {std::int64_t{1} << 40, std::int64_t{-5}, std::int64_t{0}}) {
      G h;
      h.input("x", {d, 4});
      h.node("Relu", {"x"}, {"y"});
      h.output("y", {d, 4});
      const auto r = model::import_onnx_bytes(h.bytes(), "h.onnx");
      REQUIRE_FALSE(r);
      CHECK(r.error().find(fmt::format("h.onnx: input 'x' dim 0 is {}: ", d)) == 0);
    }
  }
  // An initializer or Constant whose values do not fill its dims: the file's error (it imported,
  // with the weight silently missing, and Model::reference then failed on a missing key).
  {
    G s;
    s.input("x", {4, 2});
    s.init("w", {2, 3}, {1, 2, 3, 4, 5});
    s.node("MatMul", {"x", "w"}, {"y"});
    s.output("y", {4, 3});
    const auto e = model::import_onnx_bytes(s.bytes(), "s.onnx");
    REQUIRE_FALSE(e);
    CHECK(e.error() == "s.onnx: initializer 'w' holds 5 values, but its dims [2, 3] need 6");
    G r;
    r.input("x", {4, 2});
    r.init("w", {2, 3});
    auto* ti = r.g->mutable_initializer(0);
    ti->clear_float_data();
    ti->set_raw_data(std::string(23, '\0'));
    r.node("MatMul", {"x", "w"}, {"y"});
    r.output("y", {4, 3});
    const auto re = model::import_onnx_bytes(r.bytes(), "r.onnx");
    REQUIRE_FALSE(re);
    CHECK(re.error() == "r.onnx: initializer 'w' has 23 bytes of raw data, not a whole number of its type's values");
    ti->set_raw_data(std::string(20, '\0'));
    CHECK(model::import_onnx_bytes(r.bytes(), "r.onnx").error() == "r.onnx: initializer 'w' holds 5 values, but its dims [2, 3] need 6");
    ti->set_raw_data(std::string(24, '\0'));
    CHECK(model::import_onnx_bytes(r.bytes(), "r.onnx"));
    G c;
    c.input("x", {4});
    auto* k = c.node("Constant", {}, {"b"});
    auto* a = k->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto_DataType_FLOAT);
    a->mutable_t()->add_dims(4);
    for (float f : {1.f, 2.f, 3.f}) a->mutable_t()->add_float_data(f);
    c.node("Add", {"x", "b"}, {"y"});
    c.output("y", {4});
    const auto ce = model::import_onnx_bytes(c.bytes(), "c.onnx");
    REQUIRE_FALSE(ce);
    CHECK(ce.error() == "c.onnx: node 'Constant_0' (Constant): its value holds 3 values, but its dims [4] need 4");
    a->mutable_t()->add_float_data(4.f);
    CHECK(model::import_onnx_bytes(c.bytes(), "c.onnx"));
  }
  CHECK(model::parse_dims("batch=2,seq=128")->at("seq") == 128);
  CHECK_FALSE(model::parse_dims("batch=x"));
  CHECK_FALSE(model::parse_dims("=3"));
}

TEST_CASE("model: the kernel table's shares add up to the total; tuning is Amdahl") {
  G t = block(16, 64);
  model::ImportOptions opt;
  opt.dims["batch"] = 2;
  auto m = model::import_onnx_bytes(t.bytes(), "block.onnx", opt);
  REQUIRE(m);
  const auto tgt = *target::load_target("trn2");
  auto r = session::runner_by_name("sim", tgt);
  REQUIRE(r);
  const auto p = model::profile(*m, tgt, *r);
  double sum = 0, share = 0;
  for (const auto& row : p.rows) {
    CHECK(row.ok);
    CHECK(row.default_ns > 0);
    sum += row.total_ns;
    share += row.share;
  }
  CHECK(sum == Approx(p.total_ns).epsilon(1e-12));
  CHECK(share == Approx(1.0).epsilon(1e-12));
  const auto hot = model::hot_rows(p, 0.5);
  REQUIRE_FALSE(hot.empty());
  double covered = 0;
  for (auto i : hot) covered += p.rows[i].share;
  CHECK(covered >= 0.5);
  const auto budgets = model::split_budget(p, hot, 100, 8);
  for (std::size_t i = 1; i < hot.size(); ++i) CHECK(budgets[i] <= budgets[i - 1]);
  model::TuneOptions to;
  to.share = 0.5;
  to.budget = 48;
  to.threads = 1;
  const auto res = model::tune(*m, p, tgt, *r, to);
  REQUIRE(res.tuned.size() == hot.size());
  double after = 0;
  for (std::size_t i = 0; i < p.rows.size(); ++i) after += res.after_row_ns[i];
  CHECK(after == Approx(res.after_ns));
  CHECK(res.before_ns == Approx(p.total_ns));
  for (const auto& tk : res.tuned) {
    CHECK(tk.verification.ok);
    CHECK(tk.after_ns <= tk.before_ns);
  }
  CHECK(res.speedup() >= 1.0);
}

TEST_CASE("model: Conv as a reduction over shifted reads, its bias and Relu a second kernel; MaxPool listed") {
  G t;
  t.input("x", {1, 2, 6, 6});
  t.init("w", {3, 2, 3, 3});
  t.init("b", {3});
  auto* cv = t.node("Conv", {"x", "w", "b"}, {"c"});
  G::attr_ints(cv, "pads", {1, 1, 1, 1});
  G::attr_ints(cv, "kernel_shape", {3, 3});
  t.node("Relu", {"c"}, {"r"});
  auto* mp = t.node("MaxPool", {"r"}, {"y"});
  G::attr_ints(mp, "kernel_shape", {2, 2});
  G::attr_ints(mp, "strides", {2, 2});
  t.output("y", {1, 3, 3, 3});
  auto m = model::import_onnx_bytes(t.bytes(), "cnn.onnx");
  REQUIRE(m);
  REQUIRE(m->kernels.size() == 2);
  CHECK(m->kernels[0].kind == "conv2d");
  CHECK(m->kernels[1].op == "Conv bias+Relu");
  CHECK(m->kernels[1].instances[0].inputs[0].value == "c (before bias)");
  REQUIRE(m->unsupported.size() == 1);
  CHECK(m->unsupported[0].op_type == "MaxPool");
  // The conv kernel, then the bias kernel, against a direct loop (zero padding 1).
  const auto& k = m->kernels[0].kernel;
  auto ins = ir::random_inputs(k, 5);
  const auto& x = ins[0];
  ins[1] = m->weights.at("w").data;
  const auto& w = ins[1];
  const auto out = ir::evaluate(k, ins);
  const auto& e = m->kernels[1].kernel;
  auto eins = ir::random_inputs(e, 6);
  eins[0] = out[static_cast<std::size_t>(k.tensor("Y") - k.tensors.data())];
  eins[1] = m->weights.at("b").data;
  const auto eout = ir::evaluate(e, eins);
  const auto& y = eout[static_cast<std::size_t>(e.tensor("Y") - e.tensors.data())];
  double worst = 0;
  for (int o = 0; o < 3; ++o)
    for (int h = 0; h < 6; ++h)
      for (int ww = 0; ww < 6; ++ww) {
        double acc = eins[1][static_cast<std::size_t>(o)];
        for (int c = 0; c < 2; ++c)
          for (int kh = 0; kh < 3; ++kh)
            for (int kw = 0; kw < 3; ++kw) {
              const int ih = h + kh - 1, iw = ww + kw - 1;
              if (ih < 0 || ih >= 6 || iw < 0 || iw >= 6) continue;
              acc += x[static_cast<std::size_t>((c * 6 + ih) * 6 + iw)] * w[static_cast<std::size_t>(((o * 2 + c) * 3 + kh) * 3 + kw)];
            }
        worst = std::max(worst, std::abs(std::max(acc, 0.0) - y[static_cast<std::size_t>((o * 6 + h) * 6 + ww)]));
      }
  CHECK(worst < 1e-4);
}

TEST_CASE("model: RMSNorm, LayerNormalization, erf GELU epilogue; a Softmax over axis 0 is listed with its reason") {
  G t;
  t.input("x", {8, 16});
  t.init("two", {}, {2.0f});
  t.init("eps", {}, {1e-6f});
  t.init("g", {16});
  t.init("g2", {16});
  t.init("b2", {16});
  t.init("W", {16, 16});
  t.init("bias", {16});
  t.init("sqrt2", {}, {1.41421356f});
  t.init("one", {}, {1.0f});
  t.init("half", {}, {0.5f});
  t.node("Pow", {"x", "two"}, {"sq"});
  G::attr_ints(t.node("ReduceMean", {"sq"}, {"ms"}), "axes", {-1});
  t.node("Add", {"ms", "eps"}, {"mse"});
  t.node("Sqrt", {"mse"}, {"rms"});
  t.node("Div", {"x", "rms"}, {"xn"});
  t.node("Mul", {"xn", "g"}, {"rn"});
  auto* ln = t.node("LayerNormalization", {"rn", "g2", "b2"}, {"ln"});
  G::attr_i(ln, "axis", -1);
  t.node("MatMul", {"ln", "W"}, {"h"});
  t.node("Add", {"h", "bias"}, {"hb"});
  t.node("Div", {"hb", "sqrt2"}, {"d"});
  t.node("Erf", {"d"}, {"e"});
  t.node("Add", {"e", "one"}, {"e1"});
  t.node("Mul", {"hb", "e1"}, {"m"});
  t.node("Mul", {"m", "half"}, {"gelu"});
  G::attr_i(t.node("Softmax", {"gelu"}, {"y"}), "axis", 0);
  t.output("y", {8, 16});
  t.m.mutable_opset_import(0)->set_version(17);
  auto m = model::import_onnx_bytes(t.bytes(), "norms.onnx");
  REQUIRE(m);
  std::vector<std::string> kinds;
  for (const auto& k : m->kernels) kinds.push_back(k.kind + ":" + k.op);
  CHECK(kinds == std::vector<std::string>{"rmsnorm:RMSNorm (Pow/ReduceMean/Sqrt/Div)", "layernorm:LayerNormalization",
                                          "matmul_bias_act:MatMul+Add+Gelu"});
  REQUIRE(m->unsupported.size() == 1);
  CHECK(m->unsupported[0].op_type == "Softmax");
  CHECK(m->unsupported[0].reason == "Softmax over axis 0 (only the last axis is expressed)");
  // The RMSNorm kernel is the workload's structure.
  auto wl = ir::workload("rmsnorm:R=8,C=16,eps=1e-06,dtype=fp32");
  REQUIRE(wl);
  const auto a = ir::evaluate(m->kernels[0].kernel, ir::random_inputs(m->kernels[0].kernel, 4));
  const auto b = ir::evaluate(*wl, ir::random_inputs(*wl, 4));
  REQUIRE(a.back().size() == b.back().size());
  for (std::size_t i = 0; i < a.back().size(); ++i) CHECK(a.back()[i] == Approx(b.back()[i]).margin(1e-6));
}

TEST_CASE("model: a node kevo would compute differently from ONNX is listed with its reason, never imported") {
  // Each of these imported once, silently computing something else (or crashed the process).
  const auto reason = [](const G& t, const std::string& node, const model::ImportOptions& o = {}) -> std::string {
    const auto m = model::import_onnx_bytes(t.bytes(), "m.onnx", o);
    if (!m) return "error: " + m.error();
    for (const auto& u : m->unsupported)
      if (u.node == node) return u.reason;
    return "imported";
  };
  // (G holds a pointer into its own model: built in place, never copied)
  const auto one = [](G& t, const std::string& op, std::vector<std::int64_t> shape, int opset = 13) {
    t.m.mutable_opset_import(0)->set_version(opset);
    t.input("x", shape);
    t.input("x2", shape);
    t.node("Relu", {"x2"}, {"keep"});  // a second kernel, so the model imports whatever the first does
    t.output("keep", shape);
    auto* n = t.node(op, {"x"}, {"y"});
    t.output("y", shape);
    return n;
  };
  // Softmax before opset 13 defaults to axis 1 over the input flattened to 2-D: the last axis only
  // when the input has rank 2 (it was imported as a softmax over the last axis whatever the rank).
  {
    G t;
    auto* n = one(t, "Softmax", {2, 3, 4}, 11);
    (void)n;
    CHECK(reason(t, "Softmax_1") == "Softmax over axis 1, the default before opset 13 (this model's is 11) (only the last axis is expressed)");
    G t2;
    auto* n2 = one(t2, "Softmax", {3, 4}, 11);
    (void)n2;
    CHECK(reason(t2, "Softmax_1") == "imported");
    G t3;
    auto* n3 = one(t3, "Softmax", {2, 3, 4}, 11);
    G::attr_i(n3, "axis", 2);
    CHECK(reason(t3, "Softmax_1") == "imported");
  }
  // Max of three inputs (was max of the first two), of one (a protobuf CHECK failure)
  {
    G t;
    auto* n = one(t, "Max", {4, 4});
    n->add_input("x2");
    n->add_input("x");
    CHECK(reason(t, "Max_1") == "Max of 3 input(s) (kevo expresses it of two)");
    G t1;
    auto* n1 = one(t1, "Min", {4, 4});
    (void)n1;
    CHECK(reason(t1, "Min_1") == "Min of 1 input(s) (kevo expresses it of two)");
    G t2;
    auto* n2 = one(t2, "MatMul", {4, 4});
    (void)n2;
    CHECK(reason(t2, "MatMul_1") == "1 input(s) given; ONNX's MatMul takes 2");
  }
  // an operator of another domain (ONNX Runtime's NHWC Conv is not ONNX's NCHW one)
  {
    G t;
    auto* n = one(t, "Relu", {4, 4});
    n->set_domain("com.ms.internal.nhwc");
    CHECK(reason(t, "Relu_1") == "an operator of domain 'com.ms.internal.nhwc', not ONNX's own");
  }
  // a legacy broadcast along an axis (opset < 7): not numpy's
  {
    G t;
    t.m.mutable_opset_import(0)->set_version(6);
    t.input("a", {2, 3, 3});
    t.init("b", {3});
    auto* n = t.node("Add", {"a", "b"}, {"y"});
    G::attr_i(n, "broadcast", 1);
    G::attr_i(n, "axis", 1);
    t.output("y", {2, 3, 3});
    CHECK(reason(t, "Add_0").find("error: m.onnx: no kernel kevo can express in 1 node(s); node 'Add_0' (Add): a legacy broadcast along axis 1 (opset 6 < 7)") == 0);
  }
  // an int32 matrix product (was computed in fp32: 16777217 + 1 = 16777216), unless --dtype
  {
    G t;
    t.input("a", {2, 2});
    t.input("b", {2, 2});
    t.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_INT32);
    t.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_INT32);
    t.node("MatMul", {"a", "b"}, {"y"});
    t.output("y", {2, 2});
    t.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto_DataType_INT32);
    CHECK(reason(t, "MatMul_0").find("matmul kernel: value 'a' is INT32: kevo computes in fp32, fp16 or bf16") != std::string::npos);
    model::ImportOptions o;
    o.dtype = ir::DType::fp32;
    CHECK(reason(t, "MatMul_0", o) == "imported");
  }
  // LayerNormalization's InvStdDev output (was dropped), a Scale of [1] (was read past its value)
  {
    G t;
    t.m.mutable_opset_import(0)->set_version(17);
    t.input("x", {4, 8});
    t.init("g", {8});
    t.node("LayerNormalization", {"x", "g"}, {"y", "", "inv"});
    t.output("y", {4, 8});
    t.output("inv", {4, 1});
    CHECK(reason(t, "LayerNormalization_0").find("with its Mean/InvStdDev outputs used") != std::string::npos);
    G s;
    s.m.mutable_opset_import(0)->set_version(17);
    s.input("x", {4, 8});
    s.init("g", {1});
    s.node("LayerNormalization", {"x", "g"}, {"y"});
    s.output("y", {4, 8});
    CHECK(reason(s, "LayerNormalization_0").find("LayerNormalization's Scale [1] (kevo takes one value per element of the last axis, [8])") !=
          std::string::npos);
  }
  // a zero-size initializer (SIGFPE), a shape whose product wraps (imported as 4 x 8)
  {
    G t;
    t.input("x2", {4, 4});
    t.node("Relu", {"x2"}, {"keep"});
    t.output("keep", {4, 4});
    t.init("c", {2, 0});
    t.node("ReduceSum", {"c"}, {"y"});
    t.output("y", {2, 1});
    CHECK(reason(t, "ReduceSum_1") == "value 'c' [2, 0] is empty (a zero-size tensor)");
    G w;
    w.input("x", {1824726041, 1263665316, 8});
    w.node("Relu", {"x"}, {"y"});
    w.output("y", {1824726041, 1263665316, 8});
    CHECK(reason(w, "Relu_0").find("value 'x' [1824726041, 1263665316, 8] has more than 2^40 elements") != std::string::npos);
  }
  // the model's own errors: an attribute of the wrong type (alpha = INT 2 read as 1), an
  // initializer a node also writes (a crash), a --dim the model does not have (ignored)
  {
    G t;
    t.input("a", {3, 4});
    t.init("b", {4, 2});
    G::attr_i(t.node("Gemm", {"a", "b"}, {"y"}), "alpha", 2);
    t.output("y", {3, 2});
    CHECK(reason(t, "Gemm_0") == "error: m.onnx: node 'Gemm_0' (Gemm): attribute 'alpha' is INT, not FLOAT as ONNX defines it");
    G d;
    d.input("x", {2, 3});
    d.init("s", {2, 3});
    d.node("Relu", {"x"}, {"s"});
    d.output("s", {2, 3});
    CHECK(reason(d, "Relu_0") == "error: m.onnx: value 's' is an initializer and written by node 'Relu_0'");
    G b = block();
    model::ImportOptions o;
    o.dims = {{"batch", 2}, {"bacth", 3}};
    CHECK(reason(b, "x", o) == "error: m.onnx: --dim bacth: the model has no dynamic dimension named 'bacth' (it has batch)");
  }
  // a Constant given as value_float is inlined like one given as a tensor (it was a kernel input)
  {
    G t;
    t.input("x", {4, 8});
    auto* c = t.node("Constant", {}, {"c"});
    auto* a = c->add_attribute();
    a->set_name("value_float");
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(2.0f);
    t.node("Mul", {"x", "c"}, {"y"});
    t.output("y", {4, 8});
    const auto m = model::import_onnx_bytes(t.bytes(), "m.onnx");
    REQUIRE(m);
    REQUIRE(m->kernels.size() == 1);
    CHECK(ir::print_kernel(m->kernels[0].kernel).find("Y[r, c] = X0[r, c] * 2") != std::string::npos);
    CHECK(m->kernels[0].kernel.tensors.size() == 2);
  }
}
