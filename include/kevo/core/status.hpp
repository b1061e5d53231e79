// The outcome of measuring one candidate, shared by runners (Measurement) and the evolution
// engine (Evaluation) so that a status flows from device to history without translation.
#pragma once
#include <optional>
#include <string_view>

namespace kevo {

enum class Status : unsigned char {
  ok,         // measured and (where checked) correct
  invalid,    // rejected before measurement (overflow, tile limit, cannot lower, bad genome)
  incorrect,  // measured, but its output disagreed with the reference
  timeout,    // ran past its time limit
  crashed,    // the program or worker died
  error,      // anything else that went wrong (I/O, protocol, garbage output)
};

constexpr std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid: return "invalid";
    case Status::incorrect: return "incorrect";
    case Status::timeout: return "timeout";
    case Status::crashed: return "crashed";
    case Status::error: return "error";
  }
  return "error";
}

constexpr std::optional<Status> status_from_string(std::string_view s) noexcept {
  for (auto st : {Status::ok, Status::invalid, Status::incorrect, Status::timeout, Status::crashed, Status::error})
    if (to_string(st) == s) return st;
  return std::nullopt;
}

}  // namespace kevo
