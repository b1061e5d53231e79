#include "kevo/core/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kevo {

std::string Diagnostic::headline() const {
  if (loc.line > 0) return fmt::format("{}:{}:{}: {}", loc.file, loc.line, loc.column, message);
  return fmt::format("{}: {}", loc.file, message);
}

std::string Diagnostic::str() const {
  std::string s = headline();
  if (!source_line.empty()) {
    s += "\n  " + source_line + "\n  ";
    const int col = std::max(1, loc.column);
    for (int i = 1; i < col && i <= static_cast<int>(source_line.size()); ++i)
      s += source_line[static_cast<std::size_t>(i - 1)] == '\t' ? '\t' : ' ';
    s += '^';
  }
  return s;
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
