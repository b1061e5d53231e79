#include "kevo/target/target.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "builtin.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"

namespace kevo::target {

std::string_view to_string(Engine e) noexcept {
  switch (e) {
    case Engine::tensor: return "tensor";
    case Engine::vector: return "vector";
    case Engine::scalar: return "scalar";
    case Engine::gpsimd: return "gpsimd";
  }
  return "?";
}

double Target::peak_tensor_flops(ir::DType t) const noexcept {
  switch (t) {
    case ir::DType::fp32: return peak_tensor_flops_fp32;
    case ir::DType::fp8_e4m3: return peak_tensor_flops_fp8;
    case ir::DType::bf16:
    case ir::DType::fp16: return peak_tensor_flops_bf16;
  }
  return peak_tensor_flops_bf16;
}

std::uint64_t Target::hash() const {
  StableHasher h;
  h.str(name).str(generation).u64(host ? 1 : 0);
  h.i64(partitions).i64(sbuf_bytes_per_partition).i64(psum_bytes_per_partition).i64(psum_banks).i64(psum_bank_bytes);
  h.i64(pmax).i64(stationary_fmax).i64(moving_fmax).i64(sbuf_free_max_elems).i64(psum_free_max_elems);
  for (const auto& e : engines)
    h.f64(e.clock_ghz).f64(e.elems_per_cycle_16bit).f64(e.elems_per_cycle_32bit).f64(e.fixed_overhead_cycles).f64(e.min_ii_cycles);
  h.f64(matmul_min_cycles).f64(matmul_fp32_factor).f64(matmul_fixed_cycles).f64(transpose_factor).u64(port_conflicts ? 1 : 0);
  h.i64(row_tile_min);
  h.i64(dma_queues).f64(dma_queue_bytes_per_ns).f64(hbm_bytes_per_ns).f64(dma_fixed_ns).f64(dma_descriptor_ns);
  h.i64(dma_descriptor_min_bytes).f64(dma_transpose_efficiency);
  h.f64(peak_tensor_flops_bf16).f64(peak_tensor_flops_fp8).f64(peak_tensor_flops_fp32).f64(peak_vector_flops);
  h.u64(sources.size());
  for (const auto& s : sources) h.str(s);
  h.u64(sim_params.size());
  for (const auto& [k, v] : sim_params) h.str(k).f64(v);
  h.str(sim_fitted_by).str(sim_source);
  return h.digest();
}

namespace {

// ---- A JSON tree whose every node and key remembers its byte offset in the text. ----
// nlohmann's SAX events carry no positions, so the parser reads through an iterator that
// records how far it has read; each event then finds its token's start by scanning back.
struct Node {
  enum class Kind { null, boolean, integer, number, string, object, array } kind = Kind::null;
  bool b = false;
  std::int64_t i = 0;
  double num = 0;
  std::string s;
  std::vector<std::pair<std::string, Node>> members;
  std::vector<std::size_t> key_pos;
  std::vector<Node> items;
  std::size_t pos = 0;
};

struct CountingIt {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char* base = nullptr;
  std::size_t* consumed = nullptr;
  reference operator*() const { return *p; }
  CountingIt& operator++() {
    ++p;
    if (consumed) *consumed = static_cast<std::size_t>(p - base);
    return *this;
  }
  CountingIt operator++(int) {
    CountingIt c = *this;
    ++*this;
    return c;
  }
  friend bool operator==(const CountingIt& a, const CountingIt& b) { return a.p == b.p; }
  friend bool operator!=(const CountingIt& a, const CountingIt& b) { return a.p != b.p; }
};

class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  Builder(std::string_view text, const std::size_t* consumed) : text_(text), consumed_(consumed) {}

  bool null() override { return value(make(Node::Kind::null, scalar_start())); }
  bool boolean(bool v) override {
    Node n = make(Node::Kind::boolean, scalar_start());
    n.b = v;
    return value(std::move(n));
  }
  bool number_integer(number_integer_t v) override {
    Node n = make(Node::Kind::integer, scalar_start());
    n.i = v;
    n.num = static_cast<double>(v);
    return value(std::move(n));
  }
  bool number_unsigned(number_unsigned_t v) override {
    Node n = make(Node::Kind::integer, scalar_start());
    n.i = v > static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())
              ? std::numeric_limits<std::int64_t>::max()
              : static_cast<std::int64_t>(v);
    n.num = static_cast<double>(v);
    return value(std::move(n));
  }
  bool number_float(number_float_t v, const string_t&) override {
    Node n = make(Node::Kind::number, scalar_start());
    n.num = v;
    return value(std::move(n));
  }
  bool string(string_t& v) override {
    Node n = make(Node::Kind::string, string_start());
    n.s = v;
    return value(std::move(n));
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override {
    open(Node::Kind::object);
    return true;
  }
  bool key(string_t& k) override {
    pending_key_ = k;
    pending_key_pos_ = string_start();
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    open(Node::Kind::array);
    return true;
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    error_pos_ = position == 0 ? 0 : position - 1;
    std::string msg = ex.what();
    // nlohmann's messages read "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    if (auto c = msg.find(": ", msg.find("parse error")); c != std::string::npos) msg = msg.substr(c + 2);
    error_ = "invalid JSON: " + msg;
    return false;
  }

  Node root;
  std::string error_;
  std::size_t error_pos_ = 0;

 private:
  static Node make(Node::Kind k, std::size_t pos) {
    Node n;
    n.kind = k;
    n.pos = pos;
    return n;
  }
  std::size_t scalar_start() const {
    std::size_t e = std::min(*consumed_, text_.size());
    auto tok = [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' || c == 'E';
    };
    while (e > 0 && !tok(text_[e - 1])) --e;
    while (e > 0 && tok(text_[e - 1])) --e;
    return e;
  }
  std::size_t string_start() const {
    std::size_t e = std::min(*consumed_, text_.size());
    while (e > 0 && text_[e - 1] != '"') --e;
    if (e == 0) return 0;
    std::size_t s = e - 1;  // closing quote
    while (s > 0) {
      --s;
      if (text_[s] == '"') {
        std::size_t bs = 0;
        for (std::size_t j = s; j > 0 && text_[j - 1] == '\\'; --j) ++bs;
        if (bs % 2 == 0) return s;
      }
    }
    return 0;
  }
  bool value(Node n) {
    if (stack_.empty()) {
      root = std::move(n);
      return true;
    }
    Node& top = stack_.back();
    if (top.kind == Node::Kind::object) {
      top.members.emplace_back(std::move(pending_key_), std::move(n));
      top.key_pos.push_back(pending_key_pos_);
    } else {
      top.items.push_back(std::move(n));
    }
    return true;
  }
  // The key under which a container sits is pending while its members are read.
  void open(Node::Kind k) {
    stack_.push_back(make(k, *consumed_ - 1));
    keys_.emplace_back(std::move(pending_key_), pending_key_pos_);
  }
  bool close() {
    Node n = std::move(stack_.back());
    stack_.pop_back();
    pending_key_ = std::move(keys_.back().first);
    pending_key_pos_ = keys_.back().second;
    keys_.pop_back();
    return value(std::move(n));
  }

  std::string_view text_;
  const std::size_t* consumed_;
  std::vector<Node> stack_;
  std::vector<std::pair<std::string, std::size_t>> keys_;
  std::string pending_key_;
  std::size_t pending_key_pos_ = 0;
};

struct Located {
  std::size_t pos;
  std::string message;
};

const char* kind_name(Node::Kind k) {
  switch (k) {
    case Node::Kind::null: return "null";
    case Node::Kind::boolean: return "a boolean";
    case Node::Kind::integer: return "an integer";
    case Node::Kind::number: return "a number";
    case Node::Kind::string: return "a string";
    case Node::Kind::object: return "an object";
    case Node::Kind::array: return "an array";
  }
  return "?";
}

// Reads one object: every key must be known, every known key present.
class Obj {
 public:
  // `optional` keys may be left out (has() tells); every other key must be present.
  Obj(const Node& n, std::string path, std::vector<std::string> keys, std::vector<std::string> optional = {})
      : n_(n), path_(std::move(path)), keys_(std::move(keys)) {
    const std::size_t required = keys_.size();
    keys_.insert(keys_.end(), optional.begin(), optional.end());
    if (n.kind != Node::Kind::object)
      throw Located{n.pos, fmt::format("'{}' must be an object, found {}", display(), kind_name(n.kind))};
    for (std::size_t i = 0; i < n.members.size(); ++i) {
      const auto& k = n.members[i].first;
      if (std::find(keys_.begin(), keys_.end(), k) == keys_.end())
        throw Located{n.key_pos[i], fmt::format("unknown field '{}' in {} (allowed: {})", k, where(),
                                                fmt::join(keys_, ", "))};
      for (std::size_t j = 0; j < i; ++j)
        if (n.members[j].first == k) throw Located{n.key_pos[i], fmt::format("duplicate field '{}' in {}", k, where())};
    }
    for (std::size_t i = 0; i < required; ++i)
      if (!find(keys_[i])) throw Located{n.pos, fmt::format("missing field '{}' in {}", keys_[i], where())};
  }
  const Node& at(const std::string& k) const { return *find(k); }
  [[nodiscard]] bool has(const std::string& k) const { return find(k) != nullptr; }
  std::string sub(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  std::int64_t integer(const std::string& k, std::int64_t lo, std::int64_t hi) const {
    const Node& v = at(k);
    if (v.kind != Node::Kind::integer)
      throw Located{v.pos, fmt::format("'{}' must be an integer, found {}", sub(k), kind_name(v.kind))};
    if (v.i < lo || v.i > hi)
      throw Located{v.pos, fmt::format("'{}' = {} is out of range (allowed {}..{})", sub(k), v.i, lo, hi)};
    return v.i;
  }
  double number(const std::string& k, double lo, double hi) const {
    const Node& v = at(k);
    if (v.kind != Node::Kind::integer && v.kind != Node::Kind::number)
      throw Located{v.pos, fmt::format("'{}' must be a number, found {}", sub(k), kind_name(v.kind))};
    if (!(v.num >= lo && v.num <= hi))
      throw Located{v.pos, fmt::format("'{}' = {} is out of range (allowed {}..{})", sub(k), v.num, lo, hi)};
    return v.num;
  }
  bool boolean(const std::string& k) const {
    const Node& v = at(k);
    if (v.kind != Node::Kind::boolean)
      throw Located{v.pos, fmt::format("'{}' must be true or false, found {}", sub(k), kind_name(v.kind))};
    return v.b;
  }
  std::string string(const std::string& k) const {
    const Node& v = at(k);
    if (v.kind != Node::Kind::string)
      throw Located{v.pos, fmt::format("'{}' must be a string, found {}", sub(k), kind_name(v.kind))};
    if (v.s.empty()) throw Located{v.pos, fmt::format("'{}' must not be empty", sub(k))};
    return v.s;
  }
  // A name kevo prints in every header: no control bytes (a terminal escape in a target's name
  // would reach the user's terminal through every run).
  std::string name(const std::string& k) const {
    std::string s = string(k);
    if (printable(s) != s) throw Located{at(k).pos, fmt::format("'{}' = \"{}\" holds control bytes", sub(k), printable(s))};
    return s;
  }

 private:
  const Node* find(const std::string& k) const {
    for (const auto& [key, v] : n_.members)
      if (key == k) return &v;
    return nullptr;
  }
  std::string display() const { return path_.empty() ? "the target" : path_; }
  std::string where() const { return path_.empty() ? "the target" : "'" + path_ + "'"; }
  const Node& n_;
  std::string path_;
  std::vector<std::string> keys_;
};

constexpr double kBig = 1e30;

Target read_target(const Node& root) {
  Target t;
  std::vector<std::string> top_keys = {"name",          "generation", "host", "memory",     "tile_limits", "engines",
                                       "matmul",        "port_conflicts", "dma", "peak_flops", "sources"};
  // "sim" is optional: the simulator's parameters for this generation.
  for (const auto& m : root.members)
    if (m.first == "sim") top_keys.emplace_back("sim");
  Obj top(root, "", top_keys);
  t.name = top.name("name");
  t.generation = top.name("generation");
  t.host = top.boolean("host");

  Obj mem(top.at("memory"), "memory",
          {"partitions", "sbuf_bytes_per_partition", "psum_bytes_per_partition", "psum_banks", "psum_bank_bytes"});
  t.partitions = static_cast<int>(mem.integer("partitions", 1, 1024));
  t.sbuf_bytes_per_partition = mem.integer("sbuf_bytes_per_partition", 1024, std::int64_t{1} << 40);
  t.psum_bytes_per_partition = mem.integer("psum_bytes_per_partition", 0, std::int64_t{1} << 40);
  t.psum_banks = static_cast<int>(mem.integer("psum_banks", 1, 64));
  t.psum_bank_bytes = mem.integer("psum_bank_bytes", 64, std::int64_t{1} << 30);
  if (t.psum_banks * t.psum_bank_bytes > t.psum_bytes_per_partition)
    throw Located{mem.at("psum_banks").pos,
                  fmt::format("'memory.psum_banks' x 'memory.psum_bank_bytes' = {} exceeds 'memory.psum_bytes_per_partition' = {}",
                              t.psum_banks * t.psum_bank_bytes, t.psum_bytes_per_partition)};

  Obj lim(top.at("tile_limits"), "tile_limits",
          {"pmax", "stationary_fmax", "moving_fmax", "sbuf_free_max_elems", "psum_free_max_elems"});
  t.pmax = static_cast<int>(lim.integer("pmax", 1, t.partitions));
  t.stationary_fmax = static_cast<int>(lim.integer("stationary_fmax", 1, 1 << 20));
  t.moving_fmax = static_cast<int>(lim.integer("moving_fmax", 1, 1 << 20));
  t.sbuf_free_max_elems = lim.integer("sbuf_free_max_elems", 1, std::int64_t{1} << 40);
  t.psum_free_max_elems = lim.integer("psum_free_max_elems", 1, std::int64_t{1} << 40);

  Obj eng(top.at("engines"), "engines", {"tensor", "vector", "scalar", "gpsimd"});
  const char* names[kNumEngines] = {"tensor", "vector", "scalar", "gpsimd"};
  for (int e = 0; e < kNumEngines; ++e) {
    Obj es(eng.at(names[e]), eng.sub(names[e]),
           {"clock_ghz", "elems_per_cycle_16bit", "elems_per_cycle_32bit", "fixed_overhead_cycles", "min_ii_cycles"});
    auto& s = t.engines[e];
    s.clock_ghz = es.number("clock_ghz", 1e-3, 1e3);
    s.elems_per_cycle_16bit = es.number("elems_per_cycle_16bit", 1e-6, 1e6);
    s.elems_per_cycle_32bit = es.number("elems_per_cycle_32bit", 1e-6, 1e6);
    s.fixed_overhead_cycles = es.number("fixed_overhead_cycles", 0, 1e9);
    s.min_ii_cycles = es.number("min_ii_cycles", 0, 1e9);
  }

  Obj mm(top.at("matmul"), "matmul", {"min_cycles", "fp32_factor", "fixed_cycles", "transpose_factor"}, {"row_tile_min"});
  t.matmul_min_cycles = mm.number("min_cycles", 0, 1e9);
  t.matmul_fp32_factor = mm.number("fp32_factor", 1e-3, 1e3);
  t.matmul_fixed_cycles = mm.number("fixed_cycles", 0, 1e9);
  t.transpose_factor = mm.number("transpose_factor", 1e-3, 1e3);
  if (mm.has("row_tile_min")) {
    t.row_tile_min = static_cast<int>(mm.integer("row_tile_min", 0, 64));
    if (t.row_tile_min != 0 && t.row_tile_min != 32 && t.row_tile_min != 64)
      throw Located{mm.at("row_tile_min").pos, fmt::format("'matmul.row_tile_min' = {} must be 0, 32 or 64", t.row_tile_min)};
  }
  t.port_conflicts = top.boolean("port_conflicts");

  Obj dma(top.at("dma"), "dma",
          {"queues", "queue_bytes_per_ns", "hbm_bytes_per_ns", "fixed_ns", "descriptor_ns", "descriptor_min_bytes",
           "transpose_efficiency"});
  // DMA engines per core: 16 on every NeuronCore generation; the simulator takes up to 64
  t.dma_queues = static_cast<int>(dma.integer("queues", 1, 64));
  t.dma_queue_bytes_per_ns = dma.number("queue_bytes_per_ns", 1e-3, 1e4);
  t.hbm_bytes_per_ns = dma.number("hbm_bytes_per_ns", 1e-3, 1e6);
  t.dma_fixed_ns = dma.number("fixed_ns", 0, 1e7);
  t.dma_descriptor_ns = dma.number("descriptor_ns", 0, 1e4);
  t.dma_descriptor_min_bytes = dma.integer("descriptor_min_bytes", 0, std::int64_t{1} << 40);
  t.dma_transpose_efficiency = dma.number("transpose_efficiency", 1e-6, 1.0);

  Obj pk(top.at("peak_flops"), "peak_flops", {"tensor_bf16", "tensor_fp8", "tensor_fp32", "vector"});
  t.peak_tensor_flops_bf16 = pk.number("tensor_bf16", 1, kBig);
  t.peak_tensor_flops_fp8 = pk.number("tensor_fp8", 1, kBig);
  t.peak_tensor_flops_fp32 = pk.number("tensor_fp32", 1, kBig);
  t.peak_vector_flops = pk.number("vector", 1, kBig);

  const Node& src = top.at("sources");
  if (src.kind != Node::Kind::object)
    throw Located{src.pos, fmt::format("'sources' must be an object of \"field group\": \"source\" strings, found {}",
                                       kind_name(src.kind))};
  if (src.members.empty()) throw Located{src.pos, "'sources' must name the source of the figures"};
  for (std::size_t i = 0; i < src.members.size(); ++i) {
    const auto& [k, v] = src.members[i];
    if (v.kind != Node::Kind::string)
      throw Located{v.pos, fmt::format("'sources.{}' must be a string, found {}", k, kind_name(v.kind))};
    t.sources.push_back(k + ": " + v.s);
  }

  if (std::find(top_keys.begin(), top_keys.end(), "sim") != top_keys.end()) {
    Obj sim(top.at("sim"), "sim", {"params", "fitted_by", "source"});
    t.sim_fitted_by = sim.string("fitted_by");
    t.sim_source = sim.string("source");
    const Node& ps = sim.at("params");
    if (ps.kind != Node::Kind::object)
      throw Located{ps.pos, fmt::format("'sim.params' must be an object of \"name\": number, found {}", kind_name(ps.kind))};
    for (std::size_t i = 0; i < ps.members.size(); ++i) {
      const auto& [k, v] = ps.members[i];
      if (std::find(std::begin(kSimParamNames), std::end(kSimParamNames), k) == std::end(kSimParamNames))
        throw Located{ps.key_pos[i], fmt::format("unknown simulator parameter '{}' in 'sim.params' (known: {})", k,
                                                 fmt::join(kSimParamNames, ", "))};
      for (std::size_t j = 0; j < i; ++j)
        if (ps.members[j].first == k) throw Located{ps.key_pos[i], fmt::format("duplicate field '{}' in 'sim.params'", k)};
      if (v.kind != Node::Kind::integer && v.kind != Node::Kind::number)
        throw Located{v.pos, fmt::format("'sim.params.{}' must be a number, found {}", k, kind_name(v.kind))};
      const auto r = sim_param_range(k);
      if (!std::isfinite(v.num) || v.num < r.lo || v.num > r.hi)
        throw Located{v.pos, fmt::format("'sim.params.{}' = {} is outside its physical range [{:g}, {:g}]", k, v.num, r.lo, r.hi)};
      t.sim_params.emplace_back(k, v.num);
    }
  }
  return t;
}

}  // namespace

Expected<Target, Diagnostic> parse_target(std::string_view json, std::string file) {
  std::size_t consumed = 0;
  CountingIt first{json.data(), json.data(), &consumed};
  CountingIt last{json.data() + json.size(), json.data(), nullptr};
  Builder b(json, &consumed);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(first, last, &b);
  } catch (const std::exception& e) {
    return unexpected(make_diagnostic(json, consumed, file, std::string("invalid JSON: ") + e.what()));
  }
  if (!ok) return unexpected(make_diagnostic(json, b.error_pos_, file, b.error_));
  try {
    return read_target(b.root);
  } catch (const Located& l) {
    return unexpected(make_diagnostic(json, l.pos, file, l.message));
  }
}

std::vector<std::string> builtin_targets() {
  std::vector<std::string> out;
  for (const auto& b : detail::builtin_table()) out.emplace_back(b.name);
  return out;
}

std::string builtin_target_json(std::string_view name) {
  for (const auto& b : detail::builtin_table())
    if (b.name == name) return std::string(b.json);
  return {};
}

Expected<Target, Diagnostic> load_target(std::string_view name_or_path) {
  for (const auto& b : detail::builtin_table())
    if (b.name == name_or_path) {
      auto t = parse_target(b.json, fmt::format("<built-in {}.json>", b.name));
      if (!t) throw Error("kevo: built-in target " + std::string(b.name) + " is broken: " + t.error().str());
      return t;
    }
  const std::filesystem::path p{std::string(name_or_path)};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) {
    Diagnostic d;
    d.loc.file = std::string(name_or_path);
    d.message = fmt::format("no such target: not a built-in ({}) and not a readable .json file",
                            fmt::join(builtin_targets(), ", "));
    return unexpected(std::move(d));
  }
  std::string text;
  try {
    text = read_file(p);
  } catch (const Error& e) {
    Diagnostic d;
    d.loc.file = std::string(name_or_path);
    d.message = e.what();
    return unexpected(std::move(d));
  }
  return parse_target(text, p.string());
}

}  // namespace kevo::target
