// Checks on report.html shared by the cli test's files: the texts of one SVG class, and whether
// a tick label is round.
#pragma once
#include <regex>
#include <string>
#include <vector>

namespace kevo_test {
inline std::vector<std::string> svg_texts(const std::string& html, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("class=\"" + cls + "\"[^>]*>([^<]*)<");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator(); ++it) out.push_back((*it)[1]);
  return out;
}
// A round tick label: no zero padding, at most 3 significant digits once trailing zeros go
// ("250 us", "1.5 ms", "10 ms", "1.02 ms" on a narrow axis), a unit.
inline bool round_label(const std::string& s) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex(R"((0|[1-9][0-9]*)(\.[0-9]*[1-9])? (ns|us|ms|s))"))) return false;
  std::string digits = std::string(m[1]) + (m[2].matched ? std::string(m[2]).substr(1) : "");
  while (!digits.empty() && digits.front() == '0') digits.erase(0, 1);
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return digits.size() <= 3;
}
}  // namespace kevo_test
