// kevo::emit -- prints lowered tile programs as NKI Python kernels (see kevo/emit/nki.hpp).
#pragma once
#include "kevo/emit/nki.hpp"
