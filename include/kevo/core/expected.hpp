// A small expected<T, E>: the value or the reason it could not be produced. Used for every
// expected failure (invalid schedule, parse error, rejected LLM proposal) so that callers
// handle them as ordinary data, never as exceptions.
#pragma once
#include <utility>
#include <variant>

#include "kevo/core/error.hpp"

namespace kevo {

template <typename E>
struct Unexpected {
  E error;
};
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

}  // namespace kevo
