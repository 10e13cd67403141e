#include "mlip/model/device_step.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "../ops/device_launch.h"
#include "../ops/graph_elements.h"
#include "cell_grid.h"
#include "mlip/model/cuda_graph_recorder.h"
#include "mlip/error.h"
#include "mlip/model/device_memory.h"
#include "mlip/model/host_reads.h"
#include "mlip/ops/operators.h"

namespace mlip {

using kernels::CellGrid;

namespace {

std::vector<int64_t> offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> at(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), at.begin() + 1);
  return at;
}

// The most edges of any chunk in each net, from `count` (chunks x nets, row-major).
template <class T> std::vector<int64_t> most_per_net(const T* count, int64_t chunks, int64_t nets) {
  std::vector<int64_t> most(static_cast<std::size_t>(nets), 0);
  for (int64_t c = 0; c < chunks * nets; ++c)
    most[static_cast<std::size_t>(c % nets)] = std::max(most[static_cast<std::size_t>(c % nets)], int64_t(count[c]));
  return most;
}

// The chunk of local atom i of n_local in `chunks` equal ranges.
int64_t chunk_of_atom(int64_t i, int64_t chunks, int64_t n_local) { return i * chunks / n_local; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


}  // namespace

// The step's inputs on the host and the device (fixed while the capacity is), the grid over them,
// and the recording's outputs: the packed results
//   [forces (atoms, 3) | energies (atoms) | virial (9) | shortest edge squared | counts (chunks, columns)]
// (an eager step's are its own: a recording's outputs are kept for its replays).
struct DeviceStep::Buffers {
  torch::Tensor host_real;           // positions (atoms, 3), then the grid's frame (6)
  torch::Tensor host_index;          // species (atoms), slot (atoms): each atom's centre node in its
                                     // chunk or -1, chunk_of (atoms): each centre's chunk (0 for the
                                     // others), centre_atom (chunks, centres): each centre node's
                                     // atom, `atoms` for padding, chunk_start (chunks): each chunk's
                                     // first atom; with message passing pad_node (chunks, centres):
                                     // each chunk's padding centres in turn (stage_inputs)
  torch::Tensor real, index;         // the same on the device
  torch::Tensor x, frame, species, slot, chunk_of, centre_atom, chunk_start, pad_node;   // views of them
  torch::Tensor head_species;        // (centres): the species of each centre node of a chunk, padding too
  torch::Tensor net_first;           // (nets + 1): where each net's edges start in a chunk
  CellGrid<double> grid{};
  std::pair<torch::Tensor, torch::Tensor> recorded;
  int64_t atoms = 0, chunks = 1, centers = 0, nets = 0, edges = 0;   // centres, edges: of a chunk
  int64_t columns = 0;   // counts per chunk: the nets' edges, a message-passing model's halo atoms
  int64_t others = 0;    // a message-passing model's halo atoms (nodes after the centres) of a chunk
};

DeviceStep::DeviceStep(const Model& model, double cutoff, bool record, double min_distance)
    : model_(&model), rule_(GroupingRule::of(model)), cutoff_(cutoff), min_distance_(min_distance),
      hops_(std::max(model.info().message_passing_layers, 1)), b_(std::make_unique<Buffers>()) {
  if (model.device().is_cuda())
    if (const std::string why = device_kernels_unavailable(model.device()); !why.empty())
      throw Error("the step on the GPU needs mlip's CUDA kernels (libmlip_cuda_ops.so): " + why);
  if (!record) return;
  if (!model.device().is_cuda()) throw Error("CUDA graphs need the model on a GPU (it is on " + model.device().str() + ")");
  recorder_ = std::make_unique<detail::CudaGraphRecorder>(model.device().index());
}

DeviceStep::~DeviceStep() = default;

// The host's part: the capacity this step wants (chunks, atoms and centres grown where this step
// has more, the grid chosen again where the box left its range); returns the atoms' bounding box
// (lo, hi).
std::array<double, 6> DeviceStep::stage(const double* positions, double scale, const int64_t* species, int64_t n,
                                        int64_t n_local, int64_t chunk_atoms) {
  const int64_t ns = rule_.n_species;
  wanted_ = capacity_;
  if (chunk_atoms > 0 && (n_local + chunk_atoms - 1) / chunk_atoms > wanted_.chunks) {
    wanted_.chunks = (n_local + chunk_atoms - 1) / chunk_atoms;
    wanted_.centers.clear();   // chosen anew for the smaller chunks
    wanted_.edges.clear();
    wanted_.others = 0;
  }
  const int64_t K = wanted_.chunks;
  std::vector<int64_t> centers(static_cast<std::size_t>(K * ns), 0);
  double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  bool first = true;
  for (int64_t i = 0; i < n; ++i) {
    if (species[i] < -1 || species[i] >= ns)
      throw Error("device step: atom " + std::to_string(i) + " has species index " + std::to_string(species[i]) +
                  ", outside the model's " + std::to_string(ns));
    if (species[i] < 0) continue;
    if (i < n_local) ++centers[static_cast<std::size_t>(chunk_of_atom(i, K, n_local) * ns + species[i])];
    for (int d = 0; d < 3; ++d) {
      const double v = positions[3 * i + d] * scale;
      if (!std::isfinite(v)) throw Error("device step: atom " + std::to_string(i) + " has a non-finite position");
      lo[d] = first ? v : std::min(lo[d], v);
      hi[d] = first ? v : std::max(hi[d], v);
    }
    first = false;
  }
  if (n > wanted_.atoms) wanted_.atoms = grouped_capacity(n);
  wanted_.centers.resize(static_cast<std::size_t>(ns), 0);
  // A message-passing model's padding edges join padding centres: a free slot in every non-empty
  // group of every chunk (grouped_graph.h).
  const int64_t spare = rule_.message_passing ? 1 : 0;
  for (std::size_t c = 0; c < centers.size(); ++c) {
    const int64_t need = centers[c] + (centers[c] > 0 ? spare : 0);
    if (need > wanted_.centers[c % ns]) wanted_.centers[c % ns] = grouped_capacity(need);
  }
  choose_grid(lo, hi);
  return {lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]};
}

// The grid: kept while its cells are no more than about 25% wider than the cutoff would allow
// (a box that shrank keeps it too: its cells are then a cutoff wide, grid_frame, and the grid
// reaches past the atoms); chosen anew 10% wider than the cutoff, so that small changes keep it.
void DeviceStep::choose_grid(const double* lo, const double* hi) {
  const std::array<int64_t, 3> fit = detail::grid_dims(lo, hi, cutoff_);
  bool keep = wanted_.cells.size() == 3;
  for (int d = 0; d < 3 && keep; ++d) keep = wanted_.cells[d] >= (fit[d] * 4) / 5;
  if (!keep) {
    const std::array<int64_t, 3> dims = detail::grid_dims(lo, hi, 1.1 * cutoff_);
    wanted_.cells.assign(dims.begin(), dims.end());
  }
}

// The host buffers at the wanted capacity: positions and frame; species, slots, chunks, each
// centre node's atom and each chunk's first atom.
void DeviceStep::stage_inputs(const double* positions, double scale, const int64_t* species, int64_t n,
                              int64_t n_local, const double* lo, const double* hi) {
  Buffers& b = *b_;
  const int64_t N = wanted_.atoms, K = wanted_.chunks, ns = rule_.n_species;
  const std::vector<int64_t> center_at = offsets(wanted_.centers);
  const int64_t C = center_at.back();
  // Host buffers, pinned for a GPU (its copies then need no staging of their own): new ones each
  // step there, so that LibTorch's host allocator keeps the last step's until their copies ran (it
  // records them; a buffer rewritten in place would rely on a wait elsewhere); kept on the CPU,
  // whose copies are done when they return.
  const bool gpu = model_->device().is_cuda();
  const auto host = [&](torch::Tensor& t, int64_t size, torch::Dtype dtype) {
    if (gpu || !t.defined() || t.numel() != size)
      t = torch::empty({size}, torch::TensorOptions().dtype(dtype).pinned_memory(gpu));
  };
  host(b.host_real, 3 * N + 6, torch::kFloat64);
  double* real = b.host_real.data_ptr<double>();
  std::fill(real, real + 3 * N, 0.0);
  for (int64_t k = 0; k < 3 * n; ++k) real[k] = positions[k] * scale;
  detail::grid_frame(lo, hi, wanted_.cells.data(), cutoff_, real + 3 * N);
  const int64_t pads = rule_.message_passing ? K * C : 0;
  host(b.host_index, 3 * N + K * C + K + pads, torch::kInt64);
  int64_t* s = b.host_index.data_ptr<int64_t>();
  int64_t* slot = s + N;
  int64_t* chunk = s + 2 * N;
  int64_t* centre_atom = s + 3 * N;
  int64_t* chunk_start = centre_atom + K * C;
  std::fill(s, s + 2 * N, int64_t{-1});
  std::fill(chunk, chunk + N, int64_t{0});
  std::fill(centre_atom, centre_atom + K * C, N);
  std::vector<int64_t> next;   // per chunk and species: the next centre node
  for (int64_t k = 0; k < K; ++k) {
    next.insert(next.end(), center_at.begin(), center_at.end() - 1);
    chunk_start[k] = std::min(std::max<int64_t>(N - 1, 0), (k * n_local + K - 1) / K);
  }
  for (int64_t i = 0; i < n; ++i) {
    s[i] = species[i];
    if (i < n_local && species[i] >= 0) {
      chunk[i] = chunk_of_atom(i, K, n_local);
      slot[i] = next[static_cast<std::size_t>(chunk[i] * ns + species[i])]++;
      centre_atom[chunk[i] * C + slot[i]] = i;
    }
  }
  // pad_node: each chunk's padding centres in turn (grouped_graph.h: padding_edge_ends), C of them,
  // so that the chunk's padding edge e joins pad_node[k][e mod C] to itself.
  for (int64_t k = 0; k < K && pads > 0; ++k) {
    std::vector<int64_t> count(static_cast<std::size_t>(ns));
    for (int64_t t = 0; t < ns; ++t)
      count[static_cast<std::size_t>(t)] = next[static_cast<std::size_t>(k * ns + t)] - center_at[static_cast<std::size_t>(t)];
    const std::vector<int64_t> ends = padding_edge_ends(count, wanted_.centers, {0}, {C});
    std::copy(ends.begin(), ends.end(), chunk_start + K + k * C);
  }
}


// The device buffers of capacity_ (the recording's inputs and constants).
void DeviceStep::resize() {
  Buffers& b = *b_;
  b.recorded = {};
  if (recorder_) recorder_->drop();   // the old recording's memory free before the new buffers
  const torch::Device device = model_->device();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  b.atoms = capacity_.atoms;
  b.chunks = capacity_.chunks;
  b.nets = rule_.message_passing ? 2 : rule_.pair_nets ? rule_.n_species * rule_.n_species : rule_.n_species;
  b.columns = b.nets + (rule_.message_passing ? 1 : 0);
  b.others = capacity_.others;
  capacity_.edges.resize(static_cast<std::size_t>(b.nets), 0);
  b.centers = std::accumulate(capacity_.centers.begin(), capacity_.centers.end(), int64_t{0});
  b.edges = std::accumulate(capacity_.edges.begin(), capacity_.edges.end(), int64_t{0});
  b.real = torch::empty({3 * b.atoms + 6}, i64.dtype(torch::kFloat64));
  const int64_t pads = rule_.message_passing ? b.chunks * b.centers : 0;
  b.index = torch::empty({3 * b.atoms + b.chunks * (b.centers + 1) + pads}, i64);
  b.x = b.real.narrow(0, 0, 3 * b.atoms).view({b.atoms, 3});
  b.frame = b.real.narrow(0, 3 * b.atoms, 6);
  b.species = b.index.narrow(0, 0, b.atoms);
  b.slot = b.index.narrow(0, b.atoms, b.atoms);
  b.chunk_of = b.index.narrow(0, 2 * b.atoms, b.atoms);
  b.centre_atom = b.index.narrow(0, 3 * b.atoms, b.chunks * b.centers).view({b.chunks, b.centers});
  b.chunk_start = b.index.narrow(0, 3 * b.atoms + b.chunks * b.centers, b.chunks);
  if (pads > 0) b.pad_node = b.index.narrow(0, 3 * b.atoms + b.chunks * (b.centers + 1), pads).view({b.chunks, b.centers});
  std::vector<int64_t> head;
  for (std::size_t t = 0; t < capacity_.centers.size(); ++t) head.insert(head.end(), capacity_.centers[t], int64_t(t));
  b.head_species = torch::tensor(head, torch::kInt64).to(device);
  b.net_first = torch::tensor(offsets(capacity_.edges), torch::kInt64).to(device);
  CellGrid<double>& g = b.grid;
  g.x = b.x.data_ptr<double>();
  g.species = b.species.data_ptr<int64_t>();
  g.frame = b.frame.data_ptr<double>();
  std::copy(capacity_.cells.begin(), capacity_.cells.end(), g.dims);
  g.buckets = detail::grid_buckets(g.dims, capacity_.atoms);
  g.cut2 = cutoff_ * cutoff_;
}

namespace {

// The atoms binned into the grid's cells: `cell` each atom's cell (kernels::GraphCellOf), by_cell
// and cell_first the grid's lists (its pointers set to them: kept while kernels that read them are
// queued).
struct Cells {
  torch::Tensor cell, by_cell, cell_first;
};

Cells bin_atoms(DeviceStep::Buffers& b) {
  Cells c;
  c.cell = torch::empty({b.atoms}, b.species.options());
  detail::run_elements(kernels::GraphCellOf<double>{b.grid, c.cell.data_ptr<int64_t>()}, b.atoms, b.x.device());
  std::tie(c.by_cell, c.cell_first) = detail::grouped_by(c.cell, b.grid.cells() + 1);   // + 1: skipped atoms
  b.grid.by_cell = c.by_cell.data_ptr<int64_t>();
  b.grid.cell_first = c.cell_first.data_ptr<int64_t>();
  return c;
}

// A local model's edges per net: `cursor` (atoms, species) each centre's first place, in its chunk,
// in the net of each neighbour species, `cursor_end` its places' end (cursor plus the count),
// `totals` (chunks, nets) the edges of each chunk's nets; the cell list kept with them.
struct EdgeCounts {
  Cells cells;
  torch::Tensor cursor, cursor_end, totals;
};

// The running sums down each column of (atoms, ns): the columns laid end to end as one vector,
// which LibTorch scans on a GPU with all its threads, less the sums of the columns before each.
// Along dim 0 of (atoms, ns) a GPU scans each column in one thread over all atoms (the GPU check
// of 2026-12-04: 27-36% of the GPU time of compressed se_e2_a's whole step at 98304 atoms); along
// the rows of (ns, atoms), each row in one block.
torch::Tensor column_sums(const torch::Tensor& counts) {
  const int64_t atoms = counts.size(0), ns = counts.size(1);
  if (atoms == 0 || ns == 0) return counts.clone();
  const torch::Tensor ends = counts.t().contiguous().view(-1).cumsum(0).view({ns, atoms});
  const torch::Tensor totals = ends.select(1, atoms - 1);   // the sums up to each column's end
  const torch::Tensor before = torch::cat({torch::zeros({1}, totals.options()), totals.narrow(0, 0, ns - 1)});
  return (ends - before.unsqueeze(1)).t().contiguous();
}

EdgeCounts count_edges(DeviceStep::Buffers& b, const GroupingRule& rule) {
  const torch::Device device = b.x.device();
  const int64_t ns = rule.n_species;
  EdgeCounts c;
  c.cells = bin_atoms(b);
  torch::Tensor count = torch::empty({b.atoms, ns}, b.species.options());
  detail::run_elements(kernels::GraphCountBySpecies<double>{b.grid, b.slot.data_ptr<int64_t>(), ns,
                                                            count.data_ptr<int64_t>()},
                       b.atoms, device);
  // Places from each chunk's first atom on (atoms of other chunks lie between a chunk's and its
  // start only when they have no edges: chunks are ranges of atoms).
  const auto in_chunk = [&](const torch::Tensor& counts) {
    const torch::Tensor before = column_sums(counts) - counts;
    return before - before.index_select(0, b.chunk_start).index_select(0, b.chunk_of);
  };
  if (!rule.pair_nets) {
    c.cursor = in_chunk(count);
    c.cursor_end = c.cursor + count;
    c.totals = torch::zeros({b.chunks, ns}, count.options()).index_add_(0, b.chunk_of, count);
    return c;
  }
  // One net per species pair: centre i's column s is the net of its species' row, counted among
  // the centres of i's species (kept (atoms, ns): not (atoms, ns^2), which a recording would hold).
  c.cursor = torch::zeros_like(count);
  for (int64_t t = 0; t < ns; ++t) {
    const torch::Tensor mine = b.species.eq(t).unsqueeze(1).to(count.scalar_type());
    const torch::Tensor of_t = count * mine;
    c.cursor.add_(in_chunk(of_t) * mine);
  }
  c.cursor_end = c.cursor + count;
  const torch::Tensor net = (b.chunk_of * ns + b.species.clamp_min(0)).mul(ns).unsqueeze(1) +
                            torch::arange(ns, count.options()).unsqueeze(0);   // (atoms, ns): each count's net
  c.totals = torch::zeros({b.chunks * ns * ns}, count.options())
                 .index_add_(0, net.flatten(), count.flatten())
                 .view({b.chunks, ns * ns});
  return c;
}

// A message-passing model's chunk k (grouped_graph.h's layout): `from` its receivers, the centres
// and the atoms within hops - 1 of them (the halo that sends along all its edges); its nodes, the
// centres' slots [0, C), then the other atoms within `hops` of them in atom order, C + h for the
// h-th (`halo_atom` (H + 1): each one's atom, H the capacity; those past it, which the counts
// report and a larger capacity evaluates again, and the last node go to atom `atoms`, the sums'
// spare row), `node_of` each atom's node (-1: none); [first, end) each receiver's places in the two
// groups of edges (into the chunk's centres, into the others), clipped to the groups'
// capacities; `totals` (3) the chunk's edges per group and its halo's atoms.
struct MessageEdges {
  torch::Tensor from, node_of, halo_atom, first, end, totals;
};

MessageEdges message_edges(const DeviceStep::Buffers& b, const torch::Tensor& cell, int64_t k, int hops) {
  const torch::Tensor centre = b.slot.ge(0) & b.chunk_of.eq(k);
  const std::vector<torch::Tensor> reached = detail::reach(b.grid, cell, centre, hops);
  MessageEdges m;
  m.from = reached[static_cast<std::size_t>(hops - 1)];
  torch::Tensor count = torch::empty({b.atoms}, b.species.options());
  detail::run_elements(kernels::GraphCountEdges<double>{b.grid, m.from.data_ptr<bool>(), count.data_ptr<int64_t>()},
                       b.atoms, b.x.device());
  const torch::Tensor into_centre = count * centre, into_other = count - into_centre;
  const torch::Tensor& at = b.net_first;   // (3): the groups' places
  const torch::Tensor first =
      torch::where(centre, into_centre.cumsum(0) - into_centre + at[0], into_other.cumsum(0) - into_other + at[1]);
  const torch::Tensor stop = torch::where(centre, at[1], at[2]);
  m.first = torch::minimum(first, stop);
  m.end = torch::minimum(first + count, stop);
  const torch::Tensor halo = reached.back() & ~centre;
  const torch::Tensor place = torch::where(halo, (halo.cumsum(0) - 1).clamp_max(b.others), b.others);   // H: none
  m.node_of = torch::where(centre, b.slot, torch::where(halo, place + b.centers, -1));
  const torch::Tensor atom = torch::arange(b.atoms, b.species.options());
  m.halo_atom = torch::full({b.others + 1}, b.atoms, atom.options()).index_put_({place}, atom);
  m.halo_atom.narrow(0, b.others, 1).fill_(b.atoms);   // the place of every other atom
  m.totals = torch::stack({into_centre.sum(), into_other.sum(), halo.sum()});
  return m;
}

}  // namespace

// The device's part (what a CUDA graph records): cells, edges, the model chunk by chunk, forces
// onto the atoms.
std::pair<torch::Tensor, torch::Tensor> DeviceStep::run(bool atom_virial) {
  RecordableScope recordable("graph device cuda_graph: the whole MD step");
  // The operators' device reads (index bounds, the compressed tables' range) off, recorded or not,
  // so that eager steps run the operators a recording runs: the indices are made in range here,
  // positions were checked finite on the host, and the shortest edge comes back with the results
  // (checked against the tables in evaluate(); beyond a table the kernels clamp to its last bin).
  const DeviceValueChecksPaused paused;
  // On a GPU the operators' device kernels (compressed se_e2_a's fused tables: no (edges, M)
  // tensors), recorded too, unless MLIP_KERNELS chose a path: inside a recording the usual
  // choice would take the ATen formulations (GraphCapture records those).
  std::optional<KernelChoiceScope> kernels;
  if (model_->device().is_cuda() && kernel_choice() == KernelChoice::usual) kernels.emplace(KernelChoice::device_kernels);
  const Buffers& b = *b_;
  // Sums onto the atoms, a row more: where padding centres go.
  torch::Tensor forces = torch::zeros({b.atoms + 1, 3}, b.x.options()), energy = torch::zeros({b.atoms + 1}, b.x.options());
  torch::Tensor virial = torch::zeros({9}, b.x.options());
  torch::Tensor node_virial = atom_virial ? torch::zeros({b.atoms + 1, 9}, b.x.options()) : torch::Tensor();
  const Sums sums{forces, energy, virial, node_virial};
  const auto [shortest2, totals] = rule_.message_passing ? run_message_passing(sums) : run_local(sums);
  std::pair<torch::Tensor, torch::Tensor> out{
      torch::cat({forces.narrow(0, 0, b.atoms).flatten(), energy.narrow(0, 0, b.atoms), virial, shortest2,
                  totals.flatten().to(torch::kFloat64)}),
      atom_virial ? node_virial.narrow(0, 0, b.atoms) : torch::Tensor()};
  recordable.done();
  return out;
}

namespace {

// The shortest edge squared (1) of `vectors`, infinite where there are none.
torch::Tensor shortest_squared(const torch::Tensor& vectors) {
  return vectors.size(0) > 0 ? vectors.square().sum(1).amin().view({1}) : torch::full({1}, INFINITY, vectors.options());
}

}  // namespace

// A local model's step: the edges of all chunks listed at once, then the chunks' model calls;
// returns the shortest edge squared (1) and the edges per chunk and net (chunks, nets).
std::pair<torch::Tensor, torch::Tensor> DeviceStep::run_local(const Sums& sums) {
  Buffers& b = *b_;
  const torch::Tensor species = torch::cat({b.head_species, b.species.clamp_min(0)});   // C + atom: the atom's node
  const EdgeCounts counts = count_edges(b, rule_);
  const int64_t all = b.chunks * b.edges;
  // Padding edges: each slot's centre (slot k: centre k mod centres) to itself, beyond the cutoff,
  // where every term is zero; spread over the centres, not all on one (whose sums, one thread's
  // in the tables' kernel or atomics in an index_add, would take a tenth of the edges in a row).
  torch::Tensor edge_index =
      torch::arange(all, b.species.options()).remainder_(std::max<int64_t>(b.centers, 1)).expand({2, all}).contiguous();
  torch::Tensor vectors = torch::zeros({all, 3}, b.x.options());
  vectors.select(1, 0).fill_(rule_.pad_length);
  int64_t* ends = edge_index.data_ptr<int64_t>();
  detail::run_elements(
      kernels::GraphListGrouped<double>{b.grid, b.slot.data_ptr<int64_t>(), rule_.n_species, b.nets, b.centers,
                                        rule_.pair_nets, b.net_first.data_ptr<int64_t>(), b.chunk_of.data_ptr<int64_t>(),
                                        b.edges, counts.cursor.data_ptr<int64_t>(),
                                        counts.cursor_end.data_ptr<int64_t>(), ends, ends + all,
                                        vectors.data_ptr<double>()},
      b.atoms, b.x.device());
  for (int64_t k = 0; k < b.chunks; ++k)
    run_chunk(edge_index.narrow(1, k * b.edges, b.edges).contiguous(), vectors.narrow(0, k * b.edges, b.edges), species,
              b.centre_atom[k], torch::Tensor(), sums);
  return {shortest_squared(vectors), counts.totals};
}

// A message-passing model's step: chunk after chunk, each with its halo (message_edges), its
// edges listed, its model call and forces; padding edges join the chunk's padding centres to
// themselves at the cutoff (pad_node), where nothing reaches a real node. Returns the shortest
// edge squared (1) and, per chunk, the edges of each group and the halo's atoms (chunks, 3).
std::pair<torch::Tensor, torch::Tensor> DeviceStep::run_message_passing(const Sums& sums) {
  Buffers& b = *b_;
  const Cells cells = bin_atoms(b);
  const torch::Tensor atom_species = torch::cat({b.species.clamp_min(0), torch::zeros({1}, b.species.options())});
  const torch::Tensor slots = torch::arange(b.edges, b.species.options()).remainder_(std::max<int64_t>(b.centers, 1));
  torch::Tensor shortest2 = torch::full({1}, INFINITY, b.x.options());
  std::vector<torch::Tensor> totals;
  for (int64_t k = 0; k < b.chunks; ++k) {
    const MessageEdges m = message_edges(b, cells.cell, k, hops_);
    torch::Tensor edge_index = b.pad_node[k].index_select(0, slots).expand({2, b.edges}).contiguous();
    torch::Tensor vectors = torch::zeros({b.edges, 3}, b.x.options());
    vectors.select(1, 0).fill_(rule_.pad_length);
    int64_t* ends = edge_index.data_ptr<int64_t>();
    detail::run_elements(kernels::GraphListEdges<double>{b.grid, m.from.data_ptr<bool>(), m.first.data_ptr<int64_t>(),
                                                         m.end.data_ptr<int64_t>(), m.node_of.data_ptr<int64_t>(), ends,
                                                         ends + b.edges, vectors.data_ptr<double>()},
                         b.atoms, b.x.device());
    const torch::Tensor species = torch::cat({b.head_species, atom_species.index_select(0, m.halo_atom)});
    run_chunk(edge_index, vectors, species, b.centre_atom[k], m.halo_atom, sums);
    shortest2 = torch::minimum(shortest2, shortest_squared(vectors));
    totals.push_back(m.totals);
  }
  return {shortest2, torch::stack(totals)};
}

// One chunk's model call and forces, added to the step's sums (their memory free for the next):
// nodes [0, C) are the centres (centre_atom), the others other_atom's (undefined: every atom in order).
void DeviceStep::run_chunk(const torch::Tensor& edge_index, const torch::Tensor& vectors, const torch::Tensor& species,
                           const torch::Tensor& centre_atom, const torch::Tensor& other_atom, const Sums& sums) {
  const Buffers& b = *b_;
  ModelInput in;
  in.species = species;
  in.edge_index = edge_index;
  in.edge_vectors = vectors.to(model_->info().torch_dtype());
  in.n_centers = b.centers;
  in.center_groups = capacity_.centers;
  in.edge_groups = capacity_.edges;
  const ModelOutput out = model_->evaluate(in, true);
  EdgeForceRequest request;
  request.virial = true;
  request.node_virial = sums.node_virial.defined();
  const int64_t others = species.size(0) - b.centers;
  torch::Tensor grad = out.edge_grad.to(torch::kFloat64);
  if (rule_.message_passing) {
    // A message-passing model's padding edges (into padding centres, at the cutoff) move the
    // padding centres' energies, which are dropped: their gradients too (grouped_graph.h's
    // ungroup_output drops them), so that the virial is the real edges' alone.
    const torch::Tensor padding = torch::cat({centre_atom.eq(b.atoms), torch::zeros({others}, centre_atom.options().dtype(torch::kBool))});
    grad = grad * padding.index_select(0, edge_index[0]).logical_not().unsqueeze(1);
  }
  const EdgeForces ef = edge_forces(edge_index, vectors, grad, species.size(0), request);
  const auto onto_atoms = [&](const torch::Tensor& to, const torch::Tensor& nodes) {
    if (other_atom.defined()) to.index_add_(0, other_atom, nodes.narrow(0, b.centers, others));
    else to.narrow(0, 0, b.atoms).add_(nodes.narrow(0, b.centers, b.atoms));
    to.index_add_(0, centre_atom, nodes.narrow(0, 0, b.centers));
  };
  onto_atoms(sums.forces, ef.forces);
  if (request.node_virial) onto_atoms(sums.node_virial, ef.node_virial);
  sums.energy.index_add_(0, centre_atom, out.atom_energy.to(torch::kFloat64));
  sums.virial.add_(ef.virial.flatten());
}

// The counts of a step (chunks, columns) on the device, without listing the edges: per chunk the
// edges of each net (a message-passing model's: of each group, then its halo's atoms).
torch::Tensor DeviceStep::edge_totals() {
  Buffers& b = *b_;
  if (!rule_.message_passing) return count_edges(b, rule_).totals;
  const Cells cells = bin_atoms(b);
  std::vector<torch::Tensor> totals;
  for (int64_t k = 0; k < b.chunks; ++k) totals.push_back(message_edges(b, cells.cell, k, hops_).totals);
  return torch::stack(totals);
}

// Grows the wanted capacities where the counts (per column: the most of any chunk) exceed them: the
// edges of each net, and a message-passing model's halo atoms (the last column).
bool DeviceStep::fit(std::vector<int64_t> most) {
  bool grown = false;
  if (rule_.message_passing) {
    if (most.back() > wanted_.others) {
      wanted_.others = grouped_capacity(most.back());
      grown = true;
    }
    most.pop_back();
  }
  return grow_capacities(most, wanted_.edges) || grown;
}

StepOutput DeviceStep::results(const std::pair<torch::Tensor, torch::Tensor>& run, int64_t n, int64_t n_local,
                               double* host_seconds) const {
  const Buffers& b = *b_;
  const torch::Tensor p = run.first.cpu();   // the wait for the device, and the copy back
  const auto t0 = std::chrono::steady_clock::now();   // from here the host's
  const int64_t N = b.atoms;
  StepOutput out;
  out.forces = p.narrow(0, 0, 3 * n).view({n, 3}).clone();
  out.atom_energy = p.narrow(0, 3 * N, n_local).clone();
  out.virial = p.narrow(0, 4 * N, 9).clone();
  out.shortest = std::sqrt(p[4 * N + 9].item<double>());
  const double* counts = p.data_ptr<double>() + 4 * N + 10;
  out.counts = most_per_net(counts, b.chunks, b.columns);
  for (int64_t k = 0; k < b.chunks; ++k)
    out.n_edges += static_cast<int64_t>(std::accumulate(counts + k * b.columns, counts + k * b.columns + b.nets, 0.0));
  if (run.second.defined()) out.atom_virial = run.second.narrow(0, 0, n).cpu();
  *host_seconds += seconds_since(t0);
  return out;
}

namespace {

StepOutput nothing_to_evaluate(int64_t n, int64_t n_local, bool atom_virial) {
  StepOutput out;
  out.forces = torch::zeros({n, 3}, torch::kFloat64);
  out.atom_energy = torch::zeros({n_local}, torch::kFloat64);
  out.virial = torch::zeros({9}, torch::kFloat64);
  if (atom_virial) out.atom_virial = torch::zeros({n, 9}, torch::kFloat64);
  return out;
}

}  // namespace

StepOutput DeviceStep::evaluate(const double* positions, double scale, const int64_t* species, int64_t n,
                                int64_t n_local, bool atom_virial, int64_t chunk_atoms) {
  try {
    return attempt(positions, scale, species, n, n_local, atom_virial, chunk_atoms);
  } catch (...) {
    // Nothing half-made is kept (a recording or buffers that ran out of GPU memory): the next step
    // starts from no capacity.
    b_->recorded = {};
    recorded_ = false;
    measured_ = false;
    capacity_ = StepCapacity{};
    memory_ = StepMemory{};
    if (recorder_) recorder_->drop_quietly();
    throw;
  }
}

StepOutput DeviceStep::attempt(const double* positions, double scale, const int64_t* species, int64_t n,
                               int64_t n_local, bool atom_virial, int64_t chunk_atoms) {
  auto t0 = std::chrono::steady_clock::now();
  const std::array<double, 6> box = stage(positions, scale, species, n, n_local, chunk_atoms);
  double host = seconds_since(t0);
  const bool eager = !recorder_ || atom_virial;
  bool staged = false;
  for (;;) {
    if (!(wanted_ == capacity_)) {
      capacity_ = wanted_;
      resize();
      recorded_ = false;
      measured_ = false;
      staged = false;
    }
    Buffers& b = *b_;
    if (b.centers == 0) {
      StepOutput none = nothing_to_evaluate(n, n_local, atom_virial);
      none.host_seconds = host;
      return none;
    }
    if (!staged) {   // the slots of this capacity
      t0 = std::chrono::steady_clock::now();
      stage_inputs(positions, scale, species, n, n_local, box.data(), box.data() + 3);
      host += seconds_since(t0);
      b.real.copy_(b.host_real, /*non_blocking=*/true);
      b.index.copy_(b.host_index, /*non_blocking=*/true);
      staged = true;
    }
    if (!recorded_ && (!eager || b.edges == 0)) {
      // Before a recording (and an eager step's first): the counts first, so that the model is not
      // evaluated, nor the step recorded, twice. Eager steps otherwise find an overflow afterwards.
      const torch::Tensor counts = edge_totals().cpu();
      if (fit(most_per_net(counts.data_ptr<int64_t>(), b.chunks, b.columns))) continue;
    }
    std::pair<torch::Tensor, torch::Tensor> done;
    if (eager) {
      done = measured_ || atom_virial ? run(atom_virial) : measured_run();
    } else {
      if (!recorded_) record();
      recorder_->replay_now();
      done = b.recorded;
    }
    StepOutput out = results(done, n, n_local, &host);
    if (fit(out.counts)) {
      ++repeats_;   // edges were dropped: the step again at the new capacity
      continue;
    }
    check_tables(out.shortest);
    out.host_seconds = host;
    return out;
  }
}

void DeviceStep::before_recording(std::function<void()> f) {
  if (recorder_) recorder_->before_recording = std::move(f);
}

// The step recorded (the inputs staged), with the memory it took where that can be known.
void DeviceStep::record() {
  measured([&] { recorder_->record([&] { b_->recorded = run(false); }); });
  ++recordings_;
  recorded_ = true;
}

std::pair<torch::Tensor, torch::Tensor> DeviceStep::measured_run() {
  std::pair<torch::Tensor, torch::Tensor> done;
  measured([&] { done = run(false); });
  measured_ = true;
  return done;
}

// `call`, its peak memory beyond what was in use before it kept as memory_ with the capacity it
// ran at, where the memory can be known.
void DeviceStep::measured(const std::function<void()>& call) {
  const torch::Device device = model_->device();
  reset_peak_memory(device);
  const std::optional<DeviceMemory> before = device_memory(device);
  call();
  if (!before) return;
  if (const std::optional<DeviceMemory> after = device_memory(device)) {
    memory_ = StepMemory{b_->centers, b_->edges, after->peak - before->allocated};
    ++measurements_;
  }
}

// A compressed model's tables reach down to rule_.shortest; closer pairs than min_distance_ are
// the caller's error (the atoms named).
void DeviceStep::check_tables(double shortest) const {
  if (shortest >= rule_.shortest || shortest < min_distance_) return;
  throw Error("compressed model: a neighbour is closer than its embedding table covers (made for distances >= " +
              std::to_string(rule_.shortest) + " A; the shortest edge has " + std::to_string(shortest) +
              "): recompress with a smaller --min-distance, or use the uncompressed model");
}

}  // namespace mlip
