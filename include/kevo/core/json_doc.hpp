// A JSON document whose every value and key remembers its byte offset in the text, and a reader
// of objects over it that names the field and the place of every mistake. The JSON files users
// write by hand (targets, GPU targets) are read through it, so that a wrong type, a value out of
// range, an unknown or missing field is one located line ("file:line:col: 'tensor_core.m' = 0 is
// out of range (allowed 1..1024)"), never a JSON library's message without a place.
// nlohmann's headers stay in lib/core: this face includes only the standard library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"

namespace kevo::jsondoc {

struct Node {
  // An object's member: its key and value. (Not a std::pair: a pair may not hold the incomplete
  // Node, which libstdc++ tolerates under g++ but not under clang.)
  struct Member;
  enum class Kind { null, boolean, integer, number, string, object, array } kind = Kind::null;
  bool b = false;
  std::int64_t i = 0;  // integers; unsigned ones past int64's range saturate (num holds the value)
  double num = 0;      // integers and numbers
  std::string s;
  std::vector<Member> members;       // objects, in the text's order
  std::vector<std::size_t> key_pos;  // where each member's key starts
  std::vector<Node> items;           // arrays
  std::size_t pos = 0;               // where the value starts (0-based byte offset)
};
struct Node::Member {
  std::string first;  // the key
  Node second;        // the value
};

// "an integer", "a string", ...: for messages.
const char* kind_name(Node::Kind k);

// A mistake at byte offset `pos` of the text being read; read() turns it into a Diagnostic.
struct Located {
  std::size_t pos;
  std::string message;
};

// Nesting deeper than this is refused (a hand-written document needs a handful of levels; a deep
// one would overflow the stack when the tree is destroyed).
inline constexpr int kMaxDepth = 64;

// The tree of `text`; a syntax error, or nesting deeper than kMaxDepth, is a Diagnostic located in
// `file`.
Expected<Node, Diagnostic> parse(std::string_view text, std::string file);

// Parses `text` and hands the tree to `read`; a Located that `read` throws becomes a Diagnostic.
template <typename F>
auto read(std::string_view text, std::string file, F&& read_tree)
    -> Expected<decltype(read_tree(std::declval<const Node&>())), Diagnostic> {
  auto root = parse(text, file);
  if (!root) return unexpected(root.error());
  try {
    return read_tree(*root);
  } catch (const Located& l) {
    return unexpected(make_diagnostic(text, l.pos, std::move(file), l.message));
  }
}

// Reads one object: every key must be known, every required key present, none twice. Every
// accessor throws Located naming the field by its dotted path ("tensor_core.m").
class Obj {
 public:
  // `keys` must all be present; `optional` may be left out (has() tells). `root` names the
  // document in messages about its top level ("the target").
  Obj(const Node& n, std::string path, std::vector<std::string> keys, std::vector<std::string> optional = {},
      std::string root = "the document");

  [[nodiscard]] const Node& at(const std::string& k) const;
  [[nodiscard]] bool has(const std::string& k) const { return find(k) != nullptr; }
  // The dotted path of member k ("memory.partitions").
  [[nodiscard]] std::string sub(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  [[nodiscard]] std::int64_t integer(const std::string& k, std::int64_t lo, std::int64_t hi) const;
  [[nodiscard]] double number(const std::string& k, double lo, double hi) const;  // finite, in [lo, hi]
  [[nodiscard]] bool boolean(const std::string& k) const;
  [[nodiscard]] std::string string(const std::string& k) const;  // non-empty
  // A string printed in headers: non-empty and free of control bytes.
  [[nodiscard]] std::string name(const std::string& k) const;
  // An object of "key": "string" pairs (sources of figures): non-empty unless `may_be_empty`.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> string_map(const std::string& k, bool may_be_empty = false) const;

 private:
  [[nodiscard]] const Node* find(const std::string& k) const;
  const Node& n_;
  std::string path_;
  std::vector<std::string> keys_;
};

}  // namespace kevo::jsondoc
