#include "kevo/core/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace kevo {

std::string printable_lines(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  std::string out;
  for (std::size_t at = 0; at <= s.size();) {
    const auto nl = std::min(s.find('\n', at), s.size());
    out += (at ? "\n" : "") + printable(s.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what
// JSON can hold as a string without loss.
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // the sequence's length and the range of its second byte, by its first byte
    const std::size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += len;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u < 0x7f) {
      out += s[i++];
      continue;
    }
    std::size_t len = 0;  // a valid UTF-8 sequence starting here (no overlongs, no surrogates)
    if (u >= 0xc2 && u <= 0xdf) len = 2;
    else if (u >= 0xe0 && u <= 0xef) len = 3;
    else if (u >= 0xf0 && u <= 0xf4) len = 4;
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && len >= 3) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      if ((u == 0xe0 && b1 < 0xa0) || (u == 0xed && b1 >= 0xa0) || (u == 0xf0 && b1 < 0x90) || (u == 0xf4 && b1 >= 0x90)) ok = false;
    }
    if (ok) {
      std::uint32_t cp = len == 2 ? (u & 0x1fu) : len == 3 ? (u & 0x0fu) : (u & 0x07u);
      for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3fu);
      const bool hidden = (cp >= 0x80 && cp <= 0x9f) || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
                          (cp >= 0x2066 && cp <= 0x2069);
      if (hidden) out += fmt::format("\\u{:04x}", cp);
      else out.append(s.substr(i, len));
      i += len;
    } else {
      out += fmt::format("\\x{:02x}", u);
      ++i;
    }
  }
  return out;
}

std::string Diagnostic::headline() const {
  if (loc.line > 0) return fmt::format("{}:{}:{}: {}", printable(loc.file), loc.line, loc.column, printable(message));
  return fmt::format("{}: {}", printable(loc.file), printable(message));
}

std::string Diagnostic::str() const {
  std::string s = headline();
  if (!source_line.empty()) {
    // The line as printable() shows it; the caret under the column's character there.
    s += "\n  " + printable(source_line) + "\n  ";
    const auto col = static_cast<std::size_t>(std::max(1, loc.column));
    const std::string before = printable(std::string_view(source_line).substr(0, std::min(col - 1, source_line.size())));
    for (char c : before)
      if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) s += ' ';  // one per character, not per byte
    s += '^';
  }
  return s;
}

std::string excerpt(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return printable(s);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // not inside a character
  return fmt::format("{}... ({} bytes)", printable(s.substr(0, cut)), s.size());
}

Diagnostic make_diagnostic(std::string_view text, std::size_t pos, std::string file, std::string message) {
  pos = std::min(pos, text.size());
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  std::size_t line_end = text.find('\n', line_start);
  if (line_end == std::string_view::npos) line_end = text.size();
  std::string src(text.substr(line_start, line_end - line_start));
  if (!src.empty() && src.back() == '\r') src.pop_back();
  if (src.size() > 200) src = src.substr(0, 200) + "...";
  Diagnostic d;
  d.loc = SourceLoc{file.empty() ? std::string("<string>") : std::move(file), line,
                    static_cast<int>(pos - line_start) + 1};
  d.message = std::move(message);
  d.source_line = std::move(src);
  return d;
}

}  // namespace kevo
