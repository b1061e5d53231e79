// The correctness oracle: a lowered program against ir's reference evaluator, with fresh random
// inputs per trial, NaN-poisoned outputs and on-chip buffers, and two execution orders (stored
// and adversarial) so that a missing dependency edge shows up as a wrong result.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kevo/core/error.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/eval.hpp"
#include "kevo/verify/interpreter.hpp"

namespace kevo::verify {

CheckResult check_program(const ir::Kernel& k, const lower::TileProgram& p, std::uint64_t seed, int trials) {
  CheckResult total;
  auto fail = [&](std::string msg, CheckFailure why, int order) {
    total.ok = false;
    total.message = std::move(msg);
    total.failure = why;
    total.order = order;
    return total;
  };
  try {
    const Interpreter interp(p);
    const std::vector<std::uint32_t> adv = adversarial_order(p);
    const auto depths = reduction_depths(k);
    const auto rounding = rounding_dtypes(k);
    std::vector<int> outputs;
    for (std::size_t t = 0; t < k.tensors.size(); ++t)
      if (k.tensors[t].role == ir::Role::output) outputs.push_back(static_cast<int>(t));
    for (int trial = 0; trial < std::max(trials, 1); ++trial) {
      const std::uint64_t s = mix64(seed ^ mix64(0x7e57u + static_cast<std::uint64_t>(trial)));
      const auto inputs = ir::random_inputs(k, s);
      // fp64 values and, per element, fp32 arithmetic's own error there (compare's allowance)
      const auto [want, allowance] = reference_with_allowance(k, inputs);
      for (int pass = 0; pass < 2; ++pass) {
        Memory m = interp.allocate();
        interp.bind_inputs(m, inputs);
        if (pass == 0) interp.execute(m);
        else interp.execute_in_order(m, adv);
        for (int t : outputs) {
          const auto got = interp.output(m, t);
          CheckResult r = compare(k, t, got, want[t], tolerance_for(rounding[static_cast<std::size_t>(t)], depths[t], want[t]), allowance[t]);
          total.max_abs_err = std::max(total.max_abs_err, r.max_abs_err);
          total.max_rel_err = std::max(total.max_rel_err, r.max_rel_err);
          if (!r.ok)
            return fail(fmt::format("trial {} (input seed {:#x}), {} order: {}", trial, s,
                                    pass == 0 ? "program" : "adversarial", r.message),
                        r.failure, pass);
        }
      }
    }
  } catch (const Error& e) {
    return fail(e.what(), CheckFailure::error, -1);
  }
  return total;
}

}  // namespace kevo::verify
