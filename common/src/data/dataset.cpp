#include "mlip/data/dataset.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <unistd.h>

#include "mlip/data/elements.h"
#include "mlip/error.h"

namespace mlip {
namespace fs = std::filesystem;

Frame make_frame(Structure s, double cutoff) {
  s.validate();
  NeighborOptions opts;
  opts.sort = false;
  opts.vectors = false;   // a Frame recomputes them (Frame::edge_vector)
  NeighborList nl = build_neighbor_list(s, cutoff, opts);
  Frame f;
  f.structure = std::move(s);
  f.centers.assign(nl.centers.begin(), nl.centers.end());
  f.neighbors.assign(nl.neighbors.begin(), nl.neighbors.end());
  f.shifts = std::move(nl.shifts);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Cache: one binary file per (inputs, format, units, cutoff), written atomically.
// ---------------------------------------------------------------------------------------------
namespace {

// Also part of every cache key: a new version leaves older caches unused. 02: the neighbour lists
// of small cells in (centre, neighbour) order, as build_neighbor_list now gives them, so that
// frames from a cache and frames streamed from a pack hold their edges in one order.
constexpr char kMagic[8] = {'M', 'L', 'I', 'P', 'G', 'C', '0', '2'};

// FNV-1a, 64 bit: a content fingerprint, not a security measure.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  void text(const std::string& s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  void file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      bytes(buf.data(), static_cast<std::size_t>(in.gcount()));
    }
  }
};

uint64_t cache_key(const std::string& source, const DatasetOptions& o) {
  Hasher h;
  h.bytes(kMagic, sizeof kMagic);
  h.text(o.format);
  h.text(o.read.units.length + "|" + o.read.units.energy + "|" + o.read.units.stress);
  for (const auto& el : o.read.type_elements) h.text("|type:" + el);
  h.bytes(&o.cutoff, sizeof o.cutoff);
  std::vector<fs::path> files;
  if (fs::is_directory(source)) {
    for (const auto& e : fs::recursive_directory_iterator(source))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(source);
  }
  for (const auto& f : files) {
    h.text(fs::relative(f, fs::is_directory(source) ? fs::path(source) : fs::path(source).parent_path()).string());
    h.file(f);
  }
  return h.h;
}

class Writer {
 public:
  explicit Writer(std::ofstream& out) : out_(out) {}
  template <typename T> void pod(const T& v) { out_.write(reinterpret_cast<const char*>(&v), sizeof(T)); }
  template <typename T> void vec(const std::vector<T>& v) {
    pod<uint64_t>(v.size());
    out_.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  }
  void str(const std::string& s) { vec(std::vector<char>(s.begin(), s.end())); }

 private:
  std::ofstream& out_;
};

class Reader {
 public:
  Reader(std::ifstream& in, std::string path) : in_(in), path_(std::move(path)) {}
  template <typename T> T pod() {
    T v{};
    read(&v, sizeof(T));
    return v;
  }
  template <typename T> std::vector<T> vec(uint64_t limit = uint64_t(1) << 34) {
    const auto n = pod<uint64_t>();
    if (n > limit) throw Error(path_ + ": corrupted cache (array of " + std::to_string(n) + " elements)");
    std::vector<T> v(n);
    read(v.data(), n * sizeof(T));
    return v;
  }
  std::string str() {
    const auto v = vec<char>(1 << 20);
    return {v.begin(), v.end()};
  }

 private:
  void read(void* p, std::size_t n) {
    in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (static_cast<std::size_t>(in_.gcount()) != n) throw Error(path_ + ": truncated cache");
  }
  std::ifstream& in_;
  std::string path_;
};

// Written to a file of this process's own, then renamed: several processes (MPI ranks, parallel
// jobs) may build the same cache at once, and each rename installs a complete file.
void write_cache(const fs::path& path, uint64_t key, const std::vector<Frame>& frames) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp.string() + ": cannot write the data cache");
    Writer w(out);
    out.write(kMagic, sizeof kMagic);
    w.pod(key);
    w.pod<uint64_t>(frames.size());
    for (const Frame& f : frames) {
      const Structure& s = f.structure;
      w.vec(s.positions);
      w.vec(s.numbers);
      w.pod(s.cell.lattice);
      w.pod<std::array<uint8_t, 3>>({s.cell.pbc[0], s.cell.pbc[1], s.cell.pbc[2]});
      w.pod<uint8_t>(s.energy.has_value());
      w.pod(s.energy.value_or(0.0));
      w.vec(s.forces);
      w.pod<uint8_t>(s.virial.has_value());
      w.pod(s.virial.value_or(Mat3{}));
      w.pod(s.weight);
      w.str(s.origin);
      w.vec(f.centers);
      w.vec(f.neighbors);
      w.vec(f.shifts);
    }
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw Error(tmp.string() + ": error while writing the data cache");
    }
  }
  fs::rename(tmp, path);
}

std::vector<Frame> read_cache(const fs::path& path, uint64_t key) {
  std::ifstream in(path, std::ios::binary);
  Reader r(in, path.string());
  char magic[sizeof kMagic];
  in.read(magic, sizeof magic);
  if (in.gcount() != sizeof magic || std::memcmp(magic, kMagic, sizeof magic) != 0) {
    throw Error(path.string() + ": not an mlip data cache");
  }
  if (r.pod<uint64_t>() != key) throw Error(path.string() + ": cache key mismatch");
  const auto n = r.pod<uint64_t>();
  std::vector<Frame> frames(n);
  for (Frame& f : frames) {
    Structure& s = f.structure;
    s.positions = r.vec<Vec3>();
    s.numbers = r.vec<int>();
    s.cell.lattice = r.pod<Mat3>();
    const auto pbc = r.pod<std::array<uint8_t, 3>>();
    s.cell.pbc = {pbc[0] != 0, pbc[1] != 0, pbc[2] != 0};
    const bool has_energy = r.pod<uint8_t>() != 0;
    const double energy = r.pod<double>();
    if (has_energy) s.energy = energy;
    s.forces = r.vec<Vec3>();
    const bool has_virial = r.pod<uint8_t>() != 0;
    const Mat3 virial = r.pod<Mat3>();
    if (has_virial) s.virial = virial;
    s.weight = r.pod<double>();
    s.origin = r.str();
    f.centers = r.vec<int32_t>();
    f.neighbors = r.vec<int32_t>();
    f.shifts = r.vec<std::array<int32_t, 3>>();
    const auto na = static_cast<int32_t>(s.size());
    const bool consistent = s.numbers.size() == s.size() && f.neighbors.size() == f.centers.size() &&
                            f.shifts.size() == f.centers.size() &&
                            std::all_of(f.centers.begin(), f.centers.end(), [&](int32_t i) { return i >= 0 && i < na; }) &&
                            std::all_of(f.neighbors.begin(), f.neighbors.end(), [&](int32_t j) { return j >= 0 && j < na; });
    if (!consistent) throw Error(path.string() + ": corrupted cache");
  }
  return frames;
}

}  // namespace

std::vector<Frame> load_frames(const std::string& source, const DatasetOptions& options, std::string* note) {
  if (!(options.cutoff > 0.0)) throw Error(source + ": dataset cutoff must be positive");
  if (!fs::exists(source)) throw Error(source + ": no such file or directory");
  fs::path cache;
  uint64_t key = 0;
  if (!options.cache_dir.empty()) {
    key = cache_key(source, options);
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.mlipcache", static_cast<unsigned long long>(key));
    cache = fs::path(options.cache_dir) / name;
    if (fs::exists(cache)) {
      try {
        auto frames = read_cache(cache, key);
        if (note) *note = source + ": " + std::to_string(frames.size()) + " frames from cache " + cache.string();
        return frames;
      } catch (const Error& e) {
        if (note) *note = std::string(e.what()) + "; rebuilding";  // a bad cache is rebuilt, never trusted
      }
    }
  }
  std::vector<Structure> structures = read_structures(source, options.format, options.read);
  std::vector<Frame> frames;
  frames.reserve(structures.size());
  for (Structure& s : structures) frames.push_back(make_frame(std::move(s), options.cutoff));
  if (!cache.empty()) {
    std::string outcome = "cache written to " + cache.string();
    try {
      write_cache(cache, key, frames);
    } catch (const std::exception& e) {  // a cache is an optimisation: failing to write one is not fatal
      outcome = std::string("no cache (") + e.what() + ")";
    }
    if (note) *note += (note->empty() ? "" : "; ") + source + ": " + std::to_string(frames.size()) +
                       " frames read, " + outcome;
  } else if (note) {
    *note = source + ": " + std::to_string(frames.size()) + " frames read (no cache)";
  }
  return frames;
}

// ---------------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------------

SpeciesMap::SpeciesMap(const std::vector<std::string>& species)
    : by_z_(kMaxAtomicNumber + 1, -1), species_(species) {
  for (std::size_t k = 0; k < species.size(); ++k) {
    const int z = atomic_number(species[k]);
    if (z == 0) throw Error("species '" + species[k] + "' is not an element");
    if (by_z_[z] >= 0) throw Error("species '" + species[k] + "' is listed twice");
    by_z_[z] = static_cast<int64_t>(k);
  }
}

int64_t SpeciesMap::index(int z, const std::string& origin) const {
  const int64_t k = (z >= 1 && z <= kMaxAtomicNumber) ? by_z_[z] : -1;
  if (k < 0) {
    std::string list;
    for (const auto& s : species_) list += (list.empty() ? "" : " ") + s;
    throw Error(origin + ": element " + (z >= 1 && z <= kMaxAtomicNumber ? element_symbol(z) : std::to_string(z)) +
                " is not among the model's species (" + list + ")");
  }
  return k;
}

GraphBatch make_batch(const std::vector<const Frame*>& frames, const SpeciesMap& species) {
  GraphBatch b;
  b.num_frames = static_cast<int64_t>(frames.size());
  for (const Frame* f : frames) {
    b.num_atoms += static_cast<int64_t>(f->structure.size());
    b.num_edges += static_cast<int64_t>(f->num_edges());
  }
  b.species.reserve(b.num_atoms);
  b.frame_of_atom.reserve(b.num_atoms);
  b.positions.reserve(3 * b.num_atoms);
  b.forces.assign(3 * b.num_atoms, 0.0);
  b.edge_index.resize(2 * b.num_edges);
  b.edge_vectors.resize(3 * b.num_edges);
  b.atom_offset.push_back(0);
  b.energy.assign(b.num_frames, 0.0);
  b.has_energy.assign(b.num_frames, 0);
  b.has_forces.assign(b.num_frames, 0);
  b.virial.assign(9 * b.num_frames, 0.0);
  b.has_virial.assign(b.num_frames, 0);
  b.weight.assign(b.num_frames, 1.0);
  b.head.assign(b.num_frames, -1);

  int64_t atom0 = 0, edge0 = 0;
  for (int64_t k = 0; k < b.num_frames; ++k) {
    const Structure& s = frames[k]->structure;
    const Frame& f = *frames[k];
    for (std::size_t i = 0; i < s.size(); ++i) {
      b.species.push_back(species.index(s.numbers[i], s.origin));
      b.frame_of_atom.push_back(k);
      b.positions.insert(b.positions.end(), s.positions[i].begin(), s.positions[i].end());
    }
    for (std::size_t e = 0; e < f.num_edges(); ++e) {
      b.edge_index[edge0 + e] = atom0 + f.centers[e];
      b.edge_index[b.num_edges + edge0 + e] = atom0 + f.neighbors[e];
      const Vec3 r = f.edge_vector(e);
      std::copy(r.begin(), r.end(), b.edge_vectors.begin() + 3 * (edge0 + e));
    }
    if (s.energy) {
      b.energy[k] = *s.energy;
      b.has_energy[k] = 1;
    }
    if (s.has_forces()) {
      b.has_forces[k] = 1;
      for (std::size_t i = 0; i < s.size(); ++i)
        for (int d = 0; d < 3; ++d) b.forces[3 * (atom0 + i) + d] = s.forces[i][d];
    }
    if (s.virial) {
      b.has_virial[k] = 1;
      for (int a = 0; a < 3; ++a)
        for (int c = 0; c < 3; ++c) b.virial[9 * k + 3 * a + c] = (*s.virial)[a][c];
    }
    b.weight[k] = s.weight;
    b.head[k] = f.head;
    atom0 += static_cast<int64_t>(s.size());
    edge0 += static_cast<int64_t>(f.num_edges());
    b.atom_offset.push_back(atom0);
  }
  return b;
}

}  // namespace mlip
