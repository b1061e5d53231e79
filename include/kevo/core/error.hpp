// Errors shared by every kevo module: located text errors (file:line:column with a caret line)
// and the exception type for I/O failures and broken invariants. Expected failures (an invalid
// schedule, a parse error) travel as values: see kevo/core/expected.hpp.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace kevo {

// A position in a text the user wrote (kernel, schedule, config, checkpoint, LLM reply).
struct SourceLoc {
  std::string file;  // "<string>" when the text did not come from a file
  int line = 0;      // 1-based; 0 = unknown
  int column = 0;    // 1-based; 0 = unknown
};

// A located diagnostic: "file:line:col: message", then the offending line and a caret.
struct Diagnostic {
  SourceLoc loc;
  std::string message;
  std::string source_line;  // the line of text at loc.line, if known

  // One line: "file:line:col: message" (what the CLI prints first).
  [[nodiscard]] std::string headline() const;
  // Headline plus the source line and a caret under loc.column.
  [[nodiscard]] std::string str() const;
};

// `s` safe to print on a terminal: control bytes (tab and newline included), DEL and bytes that are
// not part of valid UTF-8 are written as \xNN, and the C1 controls and the bidirectional
// formatting characters (U+0080-U+009F, U+200E/F, U+202A-U+202E, U+2066-U+2069, which reorder
// what a terminal shows) as \uNNNN; printable ASCII and other valid UTF-8 are kept. Every echo of
// user or worker bytes in a message goes through it (Diagnostic does).
std::string printable(std::string_view s);

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what
// JSON can hold as a string without loss.
[[nodiscard]] bool valid_utf8(std::string_view s);

// Multi-line text (a schedule of several nests) as its lines, each through printable(), without
// trailing line breaks: printed, it reads and pastes back as the text it was.
std::string printable_lines(std::string_view s);

// printable(s) cut to its first `max_bytes` bytes (never inside a UTF-8 character) followed by
// "... (N bytes)" when longer: what a message quotes of a value the user gave, so that a 20 KB
// value is not echoed whole.
std::string excerpt(std::string_view s, std::size_t max_bytes = 64);

// Builds a Diagnostic for offset `pos` (0-based byte offset) in `text`.
Diagnostic make_diagnostic(std::string_view text, std::size_t pos, std::string file, std::string message);

// Thrown for I/O failures, corrupt files and broken invariants; never for ordinary bad candidates.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when user-written text cannot be accepted and there is no Expected to return it in.
class ParseError : public Error {
 public:
  explicit ParseError(Diagnostic d) : Error(d.str()), diag_(std::move(d)) {}
  [[nodiscard]] const Diagnostic& diagnostic() const noexcept { return diag_; }

 private:
  Diagnostic diag_;
};

}  // namespace kevo
