#include "kevo/lower/check.hpp"

#include <fmt/format.h>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>

#include "instr_check.hpp"

namespace kevo::lower {

Expected<void, Invalid> check_program(const TileProgram& p, const target::Target& t) {
  if (p.dep_begin.size() != p.instrs.size() + 1) return unexpected(Invalid{"internal", "dependency index does not match the instructions"});
  std::vector<detail::BufFacts> facts;
  facts.reserve(p.buffers.size());
  for (const auto& b : p.buffers) facts.push_back(detail::BufFacts::of(b));
  for (std::size_t i = 0; i < p.instrs.size(); ++i) {
    for (auto d : p.preds(i))
      if (d >= i)
        return unexpected(
            Invalid{"internal", fmt::format("instruction {} ({}) depends on a later instruction {}", i, to_string(p.instrs[i].op), d)});
    if (auto r = detail::check_instr(p.instrs[i], i, facts, p.buffers, t); !r) return r;
  }
  return {};
}

bool dependencies_form_dag(const TileProgram& p) {
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  G g(p.instrs.size());
  for (std::size_t i = 0; i < p.instrs.size(); ++i)
    for (auto d : p.preds(i)) boost::add_edge(d, i, g);
  std::vector<std::size_t> order;
  order.reserve(p.instrs.size());
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    return false;
  }
  for (std::size_t i = 0; i < p.instrs.size(); ++i)
    for (auto d : p.preds(i))
      if (d >= i) return false;
  return true;
}

}  // namespace kevo::lower
