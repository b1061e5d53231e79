// The op DAG with Boost.Graph: ops are vertices, an edge i -> j means op j reads the tensor op i
// writes. Kept out of public headers; callers get plain index lists.
#include "kevo/ir/graph.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <map>
#include <queue>
#include <string>

#include "kevo/core/error.hpp"

namespace kevo::ir {

namespace {
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

void reads(const Expr& e, std::vector<const std::string*>& out) {
  if (e.kind == Expr::Kind::access) out.push_back(&e.tensor);
  for (const auto& a : e.args) reads(a, out);
}

Graph build(const Kernel& k) {
  Graph g(k.ops.size());
  std::map<std::string, std::size_t, std::less<>> writer;
  for (std::size_t j = 0; j < k.ops.size(); ++j) writer.emplace(k.ops[j].out, j);
  for (std::size_t j = 0; j < k.ops.size(); ++j) {
    std::vector<const std::string*> rs;
    reads(k.ops[j].expr, rs);
    std::vector<std::size_t> from;
    for (const auto* t : rs)
      if (auto it = writer.find(*t); it != writer.end()) from.push_back(it->second);
    std::sort(from.begin(), from.end());
    from.erase(std::unique(from.begin(), from.end()), from.end());
    for (auto i : from) boost::add_edge(i, j, g);
  }
  return g;
}
}  // namespace

OpGraph op_graph(const Kernel& k) {
  const Graph g = build(k);
  OpGraph r;
  const auto n = boost::num_vertices(g);
  r.producers.resize(n);
  r.consumers.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    for (auto [it, end] = boost::out_edges(v, g); it != end; ++it) r.consumers[v].push_back(boost::target(*it, g));
    for (auto [it, end] = boost::in_edges(v, g); it != end; ++it) r.producers[v].push_back(boost::source(*it, g));
    std::sort(r.consumers[v].begin(), r.consumers[v].end());
    std::sort(r.producers[v].begin(), r.producers[v].end());
  }
  // Kahn's algorithm taking the lowest-numbered ready op first: deterministic, and equal to
  // program order whenever program order is already topological (always, for valid kernels).
  std::vector<std::size_t> indeg(n);
  for (std::size_t v = 0; v < n; ++v) indeg[v] = boost::in_degree(v, g);
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t v = 0; v < n; ++v)
    if (indeg[v] == 0) ready.push(v);
  while (!ready.empty()) {
    const std::size_t v = ready.top();
    ready.pop();
    r.topo_order.push_back(v);
    for (auto [it, end] = boost::out_edges(v, g); it != end; ++it)
      if (--indeg[boost::target(*it, g)] == 0) ready.push(boost::target(*it, g));
  }
  if (r.topo_order.size() != n) throw Error("kernel " + k.name + ": the op graph has a cycle");
  return r;
}

std::vector<std::size_t> unused_ops(const Kernel& k) {
  const Graph g = build(k);
  const auto rg = boost::make_reverse_graph(g);
  const auto n = boost::num_vertices(g);
  std::vector<boost::default_color_type> color(n, boost::white_color);
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, rg));
  for (std::size_t v = 0; v < n; ++v) {
    const Tensor* t = k.tensor(k.ops[v].out);
    if (t && t->role == Role::output && color[v] == boost::white_color) {
      boost::queue<std::size_t> q;
      boost::breadth_first_visit(rg, v, q, boost::default_bfs_visitor(), cmap);
    }
  }
  std::vector<std::size_t> r;
  for (std::size_t v = 0; v < n; ++v)
    if (color[v] == boost::white_color) r.push_back(v);
  return r;
}

}  // namespace kevo::ir
