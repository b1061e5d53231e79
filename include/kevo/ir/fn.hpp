// The arithmetic of every elementwise ir::Fn, written once: the reference evaluator (double or
// float) and the tile-program interpreter (float) both call these, so the oracle and the thing
// it checks cannot drift apart in a formula. NaN propagates through max, min and relu so that a
// NaN-poisoned (unwritten) value never disappears. Fn::cast is the identity here: rounding to the
// target dtype is the caller's (it happens at tensor boundaries / on buffer writes).
#pragma once
#include <cmath>
#include <limits>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// A comparison: its value is 1 or 0 (a select's predicate as it stands).
constexpr bool is_comparison(Fn f) noexcept {
  return f == Fn::lt || f == Fn::le || f == Fn::gt || f == Fn::ge || f == Fn::eq || f == Fn::ne;
}
// The comparison that holds exactly where `f` fails (lt <-> ge, le <-> gt, eq <-> ne); `f` itself
// for anything else.
constexpr Fn negated_comparison(Fn f) noexcept {
  switch (f) {
    case Fn::lt: return Fn::ge;
    case Fn::ge: return Fn::lt;
    case Fn::le: return Fn::gt;
    case Fn::gt: return Fn::le;
    case Fn::eq: return Fn::ne;
    case Fn::ne: return Fn::eq;
    default: return f;
  }
}

template <typename T>
T fn_apply_unary(Fn f, T x) noexcept {
  switch (f) {
    case Fn::exp: return std::exp(x);
    case Fn::log: return std::log(x);
    case Fn::tanh: return std::tanh(x);
    // 0.5 x (1 + tanh u) = x / (1 + exp(-2u)) and 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2):
    // the same functions without 1 + tanh or 1 + erf, which cancel to a few float ulps for
    // negative x (gelu_erf(-3.46) was 1e-4 off in float; bench/differential seed 1 case 27268)
    case Fn::gelu_tanh: {
      const T c = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
      return x / (1 + std::exp(static_cast<T>(-2) * c * (x + static_cast<T>(0.044715) * x * x * x)));
    }
    case Fn::gelu_erf: return static_cast<T>(0.5) * x * std::erfc(-x * static_cast<T>(0.7071067811865476));
    case Fn::silu: return x / (1 + std::exp(-x));
    case Fn::relu: return (x > 0 || x != x) ? x : T(0);
    case Fn::sigmoid: return 1 / (1 + std::exp(-x));
    case Fn::rsqrt: return 1 / std::sqrt(x);
    case Fn::sqrt: return std::sqrt(x);
    case Fn::square: return x * x;
    case Fn::abs: return std::abs(x);
    case Fn::neg: return -x;
    case Fn::reciprocal: return 1 / x;
    case Fn::cast: return x;
    default: return std::numeric_limits<T>::quiet_NaN();  // not a unary function
  }
}

template <typename T>
T fn_apply_binary(Fn f, T a, T b) noexcept {
  switch (f) {
    case Fn::add: return a + b;
    case Fn::sub: return a - b;
    case Fn::mul: return a * b;
    case Fn::div: return a / b;
    case Fn::max: return (a != a || b != b) ? a + b : (a > b ? a : b);
    case Fn::min: return (a != a || b != b) ? a + b : (a < b ? a : b);
    case Fn::lt: return a < b ? T(1) : T(0);
    case Fn::le: return a <= b ? T(1) : T(0);
    case Fn::gt: return a > b ? T(1) : T(0);
    case Fn::ge: return a >= b ? T(1) : T(0);
    case Fn::eq: return a == b ? T(1) : T(0);
    case Fn::ne: return a != b ? T(1) : T(0);
    default: return std::numeric_limits<T>::quiet_NaN();  // not a binary function
  }
}

}  // namespace kevo::ir
