// Reference evaluation of a model on a whole structure with mlip's core alone (neighbour list,
// model contract, edge-gradient forces). LAMMPS results are compared against this.
#pragma once

#include <vector>

#include "mlip/data/elements.h"
#include "mlip/model/model.h"
#include "mlip/graph/neighbor_list.h"

namespace mlip::testing {

struct Evaluation {
  double energy = 0.0;
  std::vector<double> atom_energy;             // (n)
  std::vector<Vec3> forces;                    // (n)
  Mat3 virial{};                               // eV
  std::vector<std::array<double, 6>> atom_virial;  // (n) xx yy zz xy xz yz; edge i->j goes to j
};

/// The whole structure as one graph for `model`: every atom a centre, edges from its neighbour list.
struct StructureGraph {
  NeighborList nl;
  std::vector<int64_t> species, index;   // (n), (2, n_edges) row-major
  int64_t n = 0, ne = 0;
  StructureGraph(const Model& model, const Structure& s)
      : nl(build_neighbor_list(s, model.info().cutoff)), n(static_cast<int64_t>(s.size())),
        ne(static_cast<int64_t>(nl.size())) {
    species.resize(n);
    index.resize(2 * ne);
    for (int64_t i = 0; i < n; ++i) species[i] = model.info().species_index(element_symbol(s.numbers[i]));
    std::copy(nl.centers.begin(), nl.centers.end(), index.begin());
    std::copy(nl.neighbors.begin(), nl.neighbors.end(), index.begin() + ne);
  }
  /// A view of these arrays for evaluate_graph() (valid while this object lives).
  GraphView view() const {
    GraphView g;
    g.species = species.data();
    g.n_nodes = n;
    g.edge_index = index.data();
    g.edge_index_stride = ne;
    g.edge_vectors = ne > 0 ? &nl.vectors[0][0] : nullptr;
    g.n_edges = ne;
    g.n_centers = n;
    return g;
  }
};

inline Evaluation evaluate_reference(const Model& model, const Structure& s) {
  const StructureGraph graph(model, s);
  const NeighborList& nl = graph.nl;
  const int64_t n = graph.n, ne = graph.ne;
  const std::vector<int64_t>& species = graph.species;
  const std::vector<int64_t>& index = graph.index;
  ModelInput in;
  in.species = torch::tensor(species);
  in.edge_index = torch::tensor(index).reshape({2, ne});
  in.edge_vectors = torch::from_blob(const_cast<Vec3*>(nl.vectors.data()), {ne, 3}, torch::kFloat64)
                        .to(model.info().torch_dtype());
  in.n_centers = n;
  const ModelOutput out = model.evaluate(in, true);
  const torch::Tensor grad = out.edge_grad.to(torch::kFloat64).contiguous();
  EdgeForceRequest request;
  request.virial = true;
  const EdgeForces f = edge_forces(in.edge_index, in.edge_vectors.to(torch::kFloat64), grad, n, request);

  Evaluation ev;
  const torch::Tensor e = out.atom_energy.to(torch::kFloat64).contiguous();
  ev.atom_energy.assign(e.data_ptr<double>(), e.data_ptr<double>() + n);
  for (double x : ev.atom_energy) ev.energy += x;
  auto fa = f.forces.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i) ev.forces.push_back({fa[i][0], fa[i][1], fa[i][2]});
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) ev.virial[a][b] = f.virial[0][3 * a + b].item<double>();
  // Per-atom virials by a loop of its own: the LAMMPS tests check edge_forces' node virials.
  ev.atom_virial.assign(n, {0, 0, 0, 0, 0, 0});
  auto g = grad.accessor<double, 2>();
  for (int64_t k = 0; k < ne; ++k) {
    const Vec3& r = nl.vectors[k];
    auto& v = ev.atom_virial[nl.neighbors[k]];
    v[0] -= r[0] * g[k][0];
    v[1] -= r[1] * g[k][1];
    v[2] -= r[2] * g[k][2];
    v[3] -= r[0] * g[k][1];
    v[4] -= r[0] * g[k][2];
    v[5] -= r[1] * g[k][2];
  }
  return ev;
}

}  // namespace mlip::testing
