// The neighbour graph's device kernels (mlip/model/device_graph.h), one element each, for the host
// and the device (device_kernels.h): atoms binned into cells at least a cutoff wide, each atom's
// neighbours found in its 27 cells in a fixed order (cells in order, atoms of a cell by index), so
// the graph is the same on every run and every device.
#pragma once

#include "device_kernels.h"

namespace mlip::kernels {

// dx^2 + dy^2 + dz^2 rounded the same in every kernel: on a GPU without fused multiply-adds
// (nvcc contracts by default, and differently where it inlines differently), so that counting and
// listing agree on a pair at the cutoff. The host's loop is built with -ffp-contract=off
// (common/CMakeLists.txt: its ISA clones have FMA), so it rounds as the GPU does.
template <typename T> MLIP_HD T squared_norm(T x, T y, T z) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(double))
    return __dadd_rn(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)), __dmul_rn(z, z));
  else
    return __fadd_rn(__fadd_rn(__fmul_rn(x, x), __fmul_rn(y, y)), __fmul_rn(z, z));
#else
  return x * x + y * y + z * z;
#endif
}

// Positions and the cell list over them. T is the positions' type (float64: LAMMPS's). The cells
// (dims, about a cutoff wide) go into `buckets` lists: one each where there are few enough cells
// (cell_grid.h: about 8 per atom), else hashed, so that a few atoms far from the rest (a
// sputtered atom in a shrink-wrapped box) need neither wider cells nor lists for the empty ones.
// A search visits the same cells and atoms in the same order either way.
template <typename T> struct CellGrid {
  using value_type = T;
  const T* x;                          // (n, 3) positions, Å (ghosts as images: no wrapping here)
  const int64_t* species;              // (n) model species, -1 for atoms the model skips
  const T* frame;                      // (6) the grid's corner lo[3], then 1 / cell width per axis (in the
                                       // device's memory: a recorded step's copy changes it each step)
  int64_t dims[3];                     // cells per axis
  int64_t buckets;                     // lists: the cells' number, or fewer (hashed)
  const int64_t *by_cell, *cell_first; // atoms of bucket c: by_cell[cell_first[c] .. cell_first[c + 1])
  T cut2;                              // cutoff squared: edges strictly inside it

  // Cells narrower than the cutoff would miss neighbours; any wider (or atoms outside the grid,
  // clamped to its edge cells: clamping never moves two atoms more than one cell apart) only cost time.
  MLIP_HD int64_t cells() const { return buckets; }
  MLIP_HD bool hashed() const { return buckets < dims[0] * dims[1] * dims[2]; }
  MLIP_HD int64_t coord(int64_t i, int d) const {
    const T u = (x[3 * i + d] - frame[d]) * frame[3 + d];
    const int64_t c = u > T(0) ? static_cast<int64_t>(u) : 0;
    return c < dims[d] ? c : dims[d] - 1;
  }
  // The bucket of cell (a, b, c): its index, or its index mixed (splitmix64's finaliser) modulo
  // the buckets.
  MLIP_HD int64_t bucket(int64_t a, int64_t b, int64_t c) const {
    const int64_t cell = (a * dims[1] + b) * dims[2] + c;
    if (!hashed()) return cell;
    uint64_t h = static_cast<uint64_t>(cell);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return static_cast<int64_t>(h % static_cast<uint64_t>(buckets));
  }
  MLIP_HD int64_t cell_of(int64_t i) const { return bucket(coord(i, 0), coord(i, 1), coord(i, 2)); }

  // Whether any of atom i's 27 cells is marked (marked: per cell).
  MLIP_HD bool near_marked(int64_t i, const uint8_t* marked) const {
    const int64_t c0 = coord(i, 0), c1 = coord(i, 1), c2 = coord(i, 2);
    for (int64_t a = c0 > 0 ? c0 - 1 : 0; a <= c0 + 1 && a < dims[0]; ++a)
      for (int64_t b = c1 > 0 ? c1 - 1 : 0; b <= c1 + 1 && b < dims[1]; ++b)
        for (int64_t c = c2 > 0 ? c2 - 1 : 0; c <= c2 + 1 && c < dims[2]; ++c)
          if (marked[bucket(a, b, c)]) return true;
    return false;
  }

  // visit(j, dx, dy, dz) for each atom j != i the model takes within the cutoff of i; a visit that
  // returns true stops the search. Hashed, a bucket holds other cells' atoms too: each atom is
  // taken in its own cell's turn only.
  template <class Visit> MLIP_HD void for_each_neighbor(int64_t i, Visit&& visit) const {
    const int64_t c0 = coord(i, 0), c1 = coord(i, 1), c2 = coord(i, 2);
    const bool shared = hashed();
    for (int64_t a = c0 - 1; a <= c0 + 1; ++a) {
      if (a < 0 || a >= dims[0]) continue;
      for (int64_t b = c1 - 1; b <= c1 + 1; ++b) {
        if (b < 0 || b >= dims[1]) continue;
        for (int64_t c = c2 - 1; c <= c2 + 1; ++c) {
          if (c < 0 || c >= dims[2]) continue;
          const int64_t cell = bucket(a, b, c);
          for (int64_t k = cell_first[cell]; k < cell_first[cell + 1]; ++k) {
            const int64_t j = by_cell[k];
            if (j == i || species[j] < 0) continue;
            if (shared && (coord(j, 0) != a || coord(j, 1) != b || coord(j, 2) != c)) continue;
            const T dx = x[3 * j] - x[3 * i], dy = x[3 * j + 1] - x[3 * i + 1], dz = x[3 * j + 2] - x[3 * i + 2];
            if (squared_norm(dx, dy, dz) < cut2 && visit(j, dx, dy, dz)) return;
          }
        }
      }
    }
  }
};

// cell[i]: the cell of atom i; atoms the model skips go to a bucket after the last cell, which no
// search visits; elements (n).
template <typename T> struct GraphCellOf {
  static constexpr Kernel id = Kernel::GraphCellOf;
  CellGrid<T> o;
  int64_t* cell;
  MLIP_HD void operator()(int64_t i) const { cell[i] = o.species[i] < 0 ? o.cells() : o.cell_of(i); }
};

// out[i]: atom i is reached (in[i]), or the model takes it and a reached atom is within the
// cutoff: one message-passing hop further; elements (n). marked[c]: cell c holds a reached atom,
// so that an atom with none in its 27 cells (most atoms, where a step's centres come in chunks)
// looks at no atom.
template <typename T> struct GraphReach {
  static constexpr Kernel id = Kernel::GraphReach;
  CellGrid<T> o;
  const bool* in;
  const uint8_t* marked;
  bool* out;
  MLIP_HD void operator()(int64_t i) const {
    bool reached = in[i];
    if (!reached && o.species[i] >= 0 && o.near_marked(i, marked))
      o.for_each_neighbor(i, [&](int64_t j, T, T, T) { return reached = in[j]; });
    out[i] = reached;
  }
};

// count[i]: edges of atom i when it sends (from[i]), else 0; elements (n).
template <typename T> struct GraphCountEdges {
  static constexpr Kernel id = Kernel::GraphCountEdges;
  CellGrid<T> o;
  const bool* from;
  int64_t* count;
  MLIP_HD void operator()(int64_t i) const {
    int64_t n = 0;
    if (from[i]) o.for_each_neighbor(i, [&](int64_t, T, T, T) { return ++n, false; });
    count[i] = n;
  }
};

// The edges of atom i in its slots [first[i], end[i]): centre and neighbour nodes, r_ij; elements (n).
template <typename T> struct GraphListEdges {
  static constexpr Kernel id = Kernel::GraphListEdges;
  CellGrid<T> o;
  const bool* from;
  const int64_t *first, *end, *node_of;  // node_of: each atom's node (-1: none)
  int64_t *center, *neighbor;      // (E) each
  T* vectors;                      // (E, 3)
  MLIP_HD void operator()(int64_t i) const {
    int64_t k = first[i];
    const int64_t stop = end[i];   // never past its slots
    if (!from[i] || k >= stop) return;
    o.for_each_neighbor(i, [&](int64_t j, T dx, T dy, T dz) {
      center[k] = node_of[i];
      neighbor[k] = node_of[j];
      vectors[3 * k] = dx, vectors[3 * k + 1] = dy, vectors[3 * k + 2] = dz;
      return ++k == stop;
    });
  }
};

// The grouped step (mlip/model/device_step.h): centres are the atoms with a node slot (slot[i] >= 0).
// count[i * n_species + s]: centre i's neighbours of species s (zeros for other atoms); elements (n).
template <typename T> struct GraphCountBySpecies {
  static constexpr Kernel id = Kernel::GraphCountBySpecies;
  CellGrid<T> o;
  const int64_t* slot;
  int64_t n_species;
  int64_t* count;
  MLIP_HD void operator()(int64_t i) const {
    int64_t* c = count + i * n_species;
    for (int64_t s = 0; s < n_species; ++s) c[s] = 0;
    if (slot[i] >= 0) o.for_each_neighbor(i, [&](int64_t j, T, T, T) { return ++c[o.species[j]], false; });
  }
};

// Centre i's edges in the slots of their embedding nets: net g of edge i -> j is species[j] (plus
// species[i] * n_species with one net per species pair); its k-th edge in net g goes to
// chunk_of[i] * chunk_edges + net_first[g] + cursor[i * n_species + species[j]] (the layout of i's
// chunk: each chunk has its nets at the same places; cursor: i's first place within its chunk in
// each net its edges go to, by neighbour species, advanced here: only thread i touches row i),
// unless that is past the net's capacity (net_first[g + 1]):
// then it is dropped, and the counts tell the caller. Never past i's own places either
// (cursor_end: cursor plus GraphCountBySpecies's count), so that a listing that found more
// neighbours than the count did cannot write into the next centre's (on a GPU, a race).
// Neighbour node of atom j: first_atom_node + j; elements (n).
template <typename T> struct GraphListGrouped {
  static constexpr Kernel id = Kernel::GraphListGrouped;
  CellGrid<T> o;
  const int64_t* slot;
  int64_t n_species, n_nets, first_atom_node;
  bool pair_nets;
  const int64_t* net_first;   // (n_nets + 1)
  const int64_t* chunk_of;    // (n)
  int64_t chunk_edges;
  int64_t* cursor;            // (n, n_species)
  const int64_t* cursor_end;  // (n, n_species)
  int64_t *center, *neighbor; // (E) each
  T* vectors;                 // (E, 3)
  MLIP_HD void operator()(int64_t i) const {
    if (slot[i] < 0) return;
    int64_t* at = cursor + i * n_species;
    const int64_t* stop = cursor_end + i * n_species;
    const int64_t row = pair_nets ? o.species[i] * n_species : 0, base = chunk_of[i] * chunk_edges;
    o.for_each_neighbor(i, [&](int64_t j, T dx, T dy, T dz) {
      const int64_t s = o.species[j];
      if (at[s] >= stop[s]) return false;
      const int64_t g = row + s, place = net_first[g] + at[s]++;
      if (place < net_first[g + 1]) {
        const int64_t k = base + place;
        center[k] = slot[i];
        neighbor[k] = first_atom_node + j;
        vectors[3 * k] = dx, vectors[3 * k + 1] = dy, vectors[3 * k + 2] = dz;
      }
      return false;
    });
  }
};

}  // namespace mlip::kernels
