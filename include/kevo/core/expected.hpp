// A small expected<T, E>: the value or the reason it could not be produced. Used for every
// expected failure (invalid schedule, parse error, unsupported kernel, rejected LLM proposal) so
// that callers handle them as ordinary data, never as exceptions. Expected<void, E> is the result
// of a check or of an operation that fills an out-parameter: success carries nothing, failure the
// reason (never "an E whose code is empty").
#pragma once
#include <optional>
#include <utility>
#include <variant>

#include "kevo/core/error.hpp"

namespace kevo {

template <typename E>
struct Unexpected {
  E error;
};
template <typename E>
Unexpected(E) -> Unexpected<E>;  // for compilers without aggregate deduction (clang < 17); write
                                 // unexpected(e), not Unexpected(e): clang < 16 has no aggregate ()
template <typename E>
Unexpected<std::decay_t<E>> unexpected(E&& e) {
  return {std::forward<E>(e)};
}

template <typename T, typename E>
class Expected {
 public:
  Expected(T v) : v_(std::in_place_index<0>, std::move(v)) {}  // NOLINT(google-explicit-constructor)
  template <typename G>
  Expected(Unexpected<G> u) : v_(std::in_place_index<1>, E(std::move(u.error))) {}  // NOLINT

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const E& error() const& { return std::get<1>(v_); }
  E& error() & { return std::get<1>(v_); }

 private:
  void check() const {
    if (v_.index() != 0) throw Error("kevo: Expected::value() called on an error");
  }
  std::variant<T, E> v_;
};

// Success without a value, or the reason of the failure. `return {};` is success,
// `return unexpected(e);` failure.
template <typename E>
class Expected<void, E> {
 public:
  Expected() = default;
  template <typename G>
  Expected(Unexpected<G> u) : e_(E(std::move(u.error))) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool has_value() const noexcept { return !e_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  // Throws kevo::Error when this holds an error (as Expected<T, E>::value does).
  void value() const {
    if (e_) throw Error("kevo: Expected::value() called on an error");
  }

  // The error; only when !has_value() (std::bad_optional_access otherwise).
  const E& error() const& { return e_.value(); }
  E& error() & { return e_.value(); }

 private:
  std::optional<E> e_;
};

}  // namespace kevo
