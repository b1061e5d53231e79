// kevo::core — what every module shares: located errors, Expected, the invalid-schedule type, stable hashing,
// counter-based random streams, typed genes and search spaces, statuses and file helpers.
#pragma once
#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/invalid.hpp"
#include "kevo/core/io.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/core/status.hpp"
