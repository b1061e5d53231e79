#include "kevo/core/json_doc.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

namespace kevo::jsondoc {

namespace {

// nlohmann's message without its tag and its own place (the Diagnostic gives line and column):
// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." reads
// "syntax error ...", "[json.exception.out_of_range.406] number overflow parsing '1e999'" reads
// "number overflow parsing '1e999'".
std::string library_message(std::string msg) {
  if (msg.starts_with("[json.exception.")) {
    const auto c = msg.find("] ");
    msg = c == std::string::npos ? std::string() : msg.substr(c + 2);
  }
  if (msg.starts_with("parse error"))
    if (const auto c = msg.find(": "); c != std::string::npos) msg = msg.substr(c + 2);
  return msg;
}

// ---- A JSON tree whose every node and key remembers its byte offset in the text. ----
// nlohmann's SAX events carry no positions, so the parser reads through an iterator that
// records how far it has read; each event then finds its token's start by scanning back.
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
  bool start_object(std::size_t) override { return open(Node::Kind::object); }
  bool key(string_t& k) override {
    pending_key_ = k;
    pending_key_pos_ = string_start();
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Node::Kind::array); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    error_pos_ = position == 0 ? 0 : position - 1;
    error_ = "invalid JSON: " + library_message(ex.what());
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
      top.members.push_back(Node::Member{std::move(pending_key_), std::move(n)});
      top.key_pos.push_back(pending_key_pos_);
    } else {
      top.items.push_back(std::move(n));
    }
    return true;
  }
  // The key under which a container sits is pending while its members are read.
  bool open(Node::Kind k) {
    if (stack_.size() >= static_cast<std::size_t>(kMaxDepth)) {
      error_pos_ = *consumed_ - 1;
      error_ = fmt::format("nested deeper than {} levels", kMaxDepth);
      return false;
    }
    stack_.push_back(make(k, *consumed_ - 1));
    keys_.emplace_back(std::move(pending_key_), pending_key_pos_);
    return true;
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


}  // namespace

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

Expected<Node, Diagnostic> parse(std::string_view text, std::string file) {
  std::size_t consumed = 0;
  CountingIt first{text.data(), text.data(), &consumed};
  CountingIt last{text.data() + text.size(), text.data(), nullptr};
  Builder b(text, &consumed);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(first, last, &b);
  } catch (const std::exception& e) {
    return unexpected(make_diagnostic(text, consumed, std::move(file), "invalid JSON: " + library_message(e.what())));
  }
  if (!ok) return unexpected(make_diagnostic(text, b.error_pos_, std::move(file), b.error_));
  return std::move(b.root);
}

Obj::Obj(const Node& n, std::string path, std::vector<std::string> keys, std::vector<std::string> optional, std::string root)
    : n_(n), path_(std::move(path)), keys_(std::move(keys)) {
  const std::size_t required = keys_.size();
  keys_.insert(keys_.end(), optional.begin(), optional.end());
  const std::string display = path_.empty() ? root : path_;
  const std::string where = path_.empty() ? root : "'" + path_ + "'";
  if (n.kind != Node::Kind::object)
    throw Located{n.pos, fmt::format("'{}' must be an object, found {}", display, kind_name(n.kind))};
  for (std::size_t i = 0; i < n.members.size(); ++i) {
    const auto& k = n.members[i].first;
    if (std::find(keys_.begin(), keys_.end(), k) == keys_.end())
      throw Located{n.key_pos[i], fmt::format("unknown field '{}' in {} (allowed: {})", printable(k), where, fmt::join(keys_, ", "))};
    for (std::size_t j = 0; j < i; ++j)
      if (n.members[j].first == k) throw Located{n.key_pos[i], fmt::format("duplicate field '{}' in {}", k, where)};
  }
  for (std::size_t i = 0; i < required; ++i)
    if (!find(keys_[i])) throw Located{n.pos, fmt::format("missing field '{}' in {}", keys_[i], where)};
}

const Node* Obj::find(const std::string& k) const {
  for (const auto& [key, v] : n_.members)
    if (key == k) return &v;
  return nullptr;
}

const Node& Obj::at(const std::string& k) const {
  const Node* v = find(k);
  if (!v) throw Located{n_.pos, fmt::format("missing field '{}'", sub(k))};
  return *v;
}

std::int64_t Obj::integer(const std::string& k, std::int64_t lo, std::int64_t hi) const {
  const Node& v = at(k);
  if (v.kind != Node::Kind::integer)
    throw Located{v.pos, fmt::format("'{}' must be an integer, found {}", sub(k), kind_name(v.kind))};
  if (v.i < lo || v.i > hi || v.num > static_cast<double>(hi)) {
    const bool saturated = v.num >= 9.2e18;  // an unsigned integer past int64's range
    throw Located{v.pos, fmt::format("'{}' = {} is out of range (allowed {}..{})", sub(k),
                                     saturated ? fmt::format("{}", v.num) : std::to_string(v.i), lo, hi)};
  }
  return v.i;
}

double Obj::number(const std::string& k, double lo, double hi) const {
  const Node& v = at(k);
  if (v.kind != Node::Kind::integer && v.kind != Node::Kind::number)
    throw Located{v.pos, fmt::format("'{}' must be a number, found {}", sub(k), kind_name(v.kind))};
  if (!std::isfinite(v.num) || !(v.num >= lo && v.num <= hi))
    throw Located{v.pos, fmt::format("'{}' = {} is out of range (allowed {}..{})", sub(k), v.num, lo, hi)};
  return v.num;
}

bool Obj::boolean(const std::string& k) const {
  const Node& v = at(k);
  if (v.kind != Node::Kind::boolean)
    throw Located{v.pos, fmt::format("'{}' must be true or false, found {}", sub(k), kind_name(v.kind))};
  return v.b;
}

std::string Obj::string(const std::string& k) const {
  const Node& v = at(k);
  if (v.kind != Node::Kind::string) throw Located{v.pos, fmt::format("'{}' must be a string, found {}", sub(k), kind_name(v.kind))};
  if (v.s.empty()) throw Located{v.pos, fmt::format("'{}' must not be empty", sub(k))};
  return v.s;
}

// A name kevo prints in every header: no control bytes (a terminal escape in a target's name would
// reach the user's terminal through every run).
std::string Obj::name(const std::string& k) const {
  std::string s = string(k);
  if (printable(s) != s) throw Located{at(k).pos, fmt::format("'{}' = \"{}\" holds control bytes", sub(k), printable(s))};
  return s;
}

std::vector<std::pair<std::string, std::string>> Obj::string_map(const std::string& k, bool may_be_empty) const {
  const Node& m = at(k);
  if (m.kind != Node::Kind::object)
    throw Located{m.pos, fmt::format("'{}' must be an object of \"key\": \"text\" pairs, found {}", sub(k), kind_name(m.kind))};
  if (m.members.empty() && !may_be_empty) throw Located{m.pos, fmt::format("'{}' must not be empty", sub(k))};
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < m.members.size(); ++i) {
    const auto& [key, v] = m.members[i];
    for (std::size_t j = 0; j < i; ++j)
      if (m.members[j].first == key) throw Located{m.key_pos[i], fmt::format("duplicate field '{}' in '{}'", printable(key), sub(k))};
    if (v.kind != Node::Kind::string)
      throw Located{v.pos, fmt::format("'{}.{}' must be a string, found {}", sub(k), printable(key), kind_name(v.kind))};
    out.emplace_back(key, v.s);
  }
  return out;
}

}  // namespace kevo::jsondoc
