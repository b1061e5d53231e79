// Row-major reshapes of a kernel that compute the same thing over the same memory: one dimension
// of size N = outer * inner becomes two, outer then inner. Every tensor keeps its elements, their
// order in HBM and its position in Kernel::tensors, so a program written for the reshaped kernel
// reads and writes exactly the bytes the original's would (a flat view, as numpy's reshape of a
// C-ordered array). The schedule module uses it to lay a long index down the partitions
// (docs/SCHEDULE.md, "Long indices split across partitions").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// Dimensions tied together by the indices that run along them: an op index at dim D of one
// access and at dim E of another ties D and E (they have one size, ir::validate checks it).
// A class can be split only as a whole, and only where every access to its dims is a plain
// index used nowhere else in its op (no shift, no stride, not an added index, not a mask's
// `index` value).
struct DimClass {
  std::vector<std::string> dims;  // dim names, in Kernel::dims order
  std::int64_t size = 0;
  // (op, index name) for each index that runs along the class's dims (an op may have several:
  // `Y[i, j] = X[i, j]` with both dims named N splits i and j)
  std::vector<std::pair<int, std::string>> uses;
  bool splittable = false;
  // every access plain as above, though a split may be barred (by the rank it would give a
  // tensor): the class can still be held as one with another (merge_classes lowers ranks)
  bool mergeable = false;
  std::string why_not;  // when not splittable: the op and access that pin it
};
std::vector<DimClass> dim_classes(const Kernel& k);

// What a split renamed: dim D into D_o, D_i (suffixed further where taken) and, per op, its index
// x into x_o, x_i, with x = x_o * inner + x_i.
struct Split {
  struct Renamed {
    int op = -1;        // the op whose index it is (-1 for a dim)
    std::string from;   // D or x
    std::string outer;  // D_o or x_o
    std::string inner;  // D_i or x_i
  };
  std::vector<Renamed> dims;     // each dim of the class
  std::vector<Renamed> indices;  // each (op, index) of the class
  std::int64_t outer = 1, inner = 1;
};

// What a merge renamed: each pair of dims (A, B) into AB, and per op each index pair (x, y) into
// xy, with xy = x * inner + y (inner: the size of the second class).
struct Merge {
  struct Pair {
    int op = -1;         // the op whose indices they are (-1 for dims)
    std::string first;   // A or x
    std::string second;  // B or y
    std::string merged;  // AB or xy
  };
  std::vector<Pair> dims, indices;
  std::int64_t outer = 1, inner = 1;
};

// Whether the mergeable classes `a` then `b` (results of dim_classes(k)) merge into one class of
// size a.size * b.size: every tensor with a dim of either has a's dim immediately followed by b's,
// and every op indexes them as a pair, x at a's dim and y at b's, never one without the other,
// reducing over both or neither. Empty when they do, else why not.
std::string why_not_merge(const Kernel& k, const DimClass& a, const DimClass& b);
// Merges them (a row-major reshape: each pair of dims becomes one, each pair of indices one);
// throws kevo::Error when why_not_merge says why not.
Kernel merge_classes(const Kernel& k, const DimClass& a, const DimClass& b, Merge* what = nullptr);

// Splits the splittable class `c` (a result of dim_classes(k)) into `outer` x size/outer.
// Throws kevo::Error when `c` is not splittable or `outer` does not divide its size.
Kernel split_class(const Kernel& k, const DimClass& c, std::int64_t outer, Split* what = nullptr);

// The same kernel with every division written as a product: x / c as x * (1/c) for a constant c,
// c1 / c2 folded, and x / y as x * reciprocal(y). NKI's ISA has no divide (aws-neuron-sdk
// nki/api/nki.api.shared.rst, "Supported Math Operators for NKI ISA", lists reciprocal and no
// divide; nki.language lists divide as "not supported"), so the schedule module lowers this form.
// Values agree with the original up to a rounding of the reciprocal. Ops, tensors and indices
// are unchanged; a kernel without divisions comes back equal.
Kernel divisions_as_products(const Kernel& k);

}  // namespace kevo::ir
