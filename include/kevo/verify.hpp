// kevo::verify -- the tile-program interpreter (runs a TileProgram on this CPU) and the
// correctness oracle that compares lowered programs with ir's reference evaluator.
#pragma once
#include "kevo/verify/interpreter.hpp"
