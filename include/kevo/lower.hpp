// Module lower: kernel + genome + target -> TileProgram (or a typed reason the genome is invalid).
#pragma once
#include "kevo/lower/check.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/lower/program.hpp"
