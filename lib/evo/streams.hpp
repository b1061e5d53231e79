// Private: the random stream ids of the built-in strategies and the engine. Each algorithmic
// decision draws from its own counter-based stream Rng(seed).fork(id)... so that the same seed
// gives the same choices whatever the thread count or evaluation order.
#pragma once
#include <cstdint>

namespace kevo::evo::detail {

enum Stream : std::uint64_t { s_init = 1, s_breed = 2, s_random = 3, s_migrate = 4, s_async = 5, s_fill = 6 };

}  // namespace kevo::evo::detail
