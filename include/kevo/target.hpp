// Module target: compute targets (NeuronCore generations and this host's CPU) described as data.
// Built-in targets are compiled in; users load their own JSON files with load_target(path).
#pragma once
#include "kevo/target/target.hpp"
