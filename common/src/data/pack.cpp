// Packed data sets (mlip/data/pack.h; byte layout in docs/data-format.md).
#include "mlip/data/pack.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <cstdio>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <nlohmann/json.hpp>

#include "mlip/data/elements.h"
#include "mlip/data/file_io.h"
#include "mlip/error.h"
#include "mlip/system/cpu_affinity.h"
#include "mlip/graph/neighbor_list.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the pack format is little-endian, as this code");

namespace mlip {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kFormat[] = "mlip-pack";
constexpr char kRecordMagic[4] = {'M', 'L', 'F', 'R'};
constexpr uint32_t kEnergy = 1, kForces = 2, kVirial = 4, kPbcX = 8, kPbcY = 16, kPbcZ = 32;  // record flags

// A record's fixed part (192 bytes); then int32 numbers (padded to 8 bytes), float64 positions
// and, with kForces, float64 forces.
struct RecordHeader {
  char magic[4];
  uint32_t atoms;
  uint32_t flags;
  uint32_t source;
  uint64_t source_frame;
  uint64_t frame;
  double energy;
  double weight;
  double cell[9];
  double virial[9];
};
static_assert(sizeof(RecordHeader) == 192, "the record header is 192 bytes");

uint64_t padded(uint64_t n) { return (n + 7) / 8 * 8; }

// A shard's index file of `frames` frames: n + 1 offsets, then (from version 2) n atom counts.
uint64_t index_bytes(int version, uint64_t frames) { return 8 * (frames + 1) + (version >= 2 ? 4 * frames : 0); }

uint64_t record_bytes(uint32_t atoms, uint32_t flags) {
  return sizeof(RecordHeader) + padded(4ull * atoms) + 24ull * atoms * ((flags & kForces) ? 2 : 1);
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Its arguments streamed into one string.
template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream out;
  (out << ... << a);
  return out.str();
}

std::string shard_name(std::size_t k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05zu", k);
  return buf;
}

std::string encode(const Structure& s, uint32_t source, uint64_t source_frame, uint64_t frame) {
  RecordHeader h{};
  std::memcpy(h.magic, kRecordMagic, 4);
  h.atoms = static_cast<uint32_t>(s.size());
  h.flags = (s.energy ? kEnergy : 0) | (s.has_forces() ? kForces : 0) | (s.virial ? kVirial : 0) |
            (s.cell.pbc[0] ? kPbcX : 0) | (s.cell.pbc[1] ? kPbcY : 0) | (s.cell.pbc[2] ? kPbcZ : 0);
  h.source = source;
  h.source_frame = source_frame;
  h.frame = frame;
  h.energy = s.energy.value_or(0.0);
  h.weight = s.weight;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      h.cell[3 * a + b] = s.cell.lattice[a][b];
      h.virial[3 * a + b] = s.virial ? (*s.virial)[a][b] : 0.0;
    }
  std::string out(record_bytes(h.atoms, h.flags), '\0');
  char* p = out.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const int32_t z = s.numbers[i];
    std::memcpy(p + 4 * i, &z, 4);
  }
  p += padded(4ull * h.atoms);
  std::memcpy(p, s.positions.data(), 24ull * h.atoms);
  if (s.has_forces()) std::memcpy(p + 24ull * h.atoms, s.forces.data(), 24ull * h.atoms);
  return out;
}

// ---- statistics --------------------------------------------------------------------------------

std::size_t e0_row(PackStats& st, int z) {
  const auto it = std::find(st.e0_numbers.begin(), st.e0_numbers.end(), z);
  if (it != st.e0_numbers.end()) return static_cast<std::size_t>(it - st.e0_numbers.begin());
  st.e0_numbers.push_back(z);
  for (auto& row : st.counts_counts) row.push_back(0.0);
  st.counts_counts.emplace_back(st.e0_numbers.size(), 0.0);
  st.counts_energy.push_back(0.0);
  return st.e0_numbers.size() - 1;
}

// {"radius": 6, "pairs": {"H-O": 0.95, ...}}: pairs by element symbols, lighter first
json shortest_json(const PackStats& st) {
  json pairs = json::object();
  for (const auto& [zz, r] : st.shortest) pairs[element_symbol(zz.first) + "-" + element_symbol(zz.second)] = r;
  return {{"radius", kPackShortestRadius}, {"pairs", pairs}};
}

json stats_json(const PackStats& st) {
  json by_element = json::object();
  for (int z = 1; z <= kMaxAtomicNumber; ++z)
    if (st.atoms_by_z[z] > 0) by_element[element_symbol(z)] = st.atoms_by_z[z];
  json elements = json::array();
  for (const int z : st.e0_numbers) elements.push_back(element_symbol(z));
  return {{"atoms", st.atoms},
          {"atoms_by_element", by_element},
          {"energy_frames", st.energy_frames},
          {"force_frames", st.force_frames},
          {"virial_frames", st.virial_frames},
          {"e0_least_squares",
           {{"elements", elements},
            {"counts_counts", st.counts_counts},
            {"counts_energy", st.counts_energy},
            {"energy_squares", st.energy_squares}}},
          {"force_squares", st.force_squares},
          {"force_components", st.force_components},
          {"force_rms", st.force_components ? std::sqrt(st.force_squares / double(st.force_components)) : 0.0},
          {"shortest_distances", shortest_json(st)}};
}

PackStats stats_of(const json& j) {
  PackStats st;
  st.atoms = j.at("atoms").get<uint64_t>();
  for (const auto& [el, n] : j.at("atoms_by_element").items()) st.atoms_by_z[atomic_number(el)] = n.get<uint64_t>();
  st.energy_frames = j.at("energy_frames").get<uint64_t>();
  st.force_frames = j.at("force_frames").get<uint64_t>();
  st.virial_frames = j.at("virial_frames").get<uint64_t>();
  const json& e0 = j.at("e0_least_squares");
  for (const auto& el : e0.at("elements")) st.e0_numbers.push_back(atomic_number(el.get<std::string>()));
  st.counts_counts = e0.at("counts_counts").get<std::vector<std::vector<double>>>();
  st.counts_energy = e0.at("counts_energy").get<std::vector<double>>();
  st.energy_squares = e0.at("energy_squares").get<double>();
  st.force_squares = j.at("force_squares").get<double>();
  st.force_components = j.at("force_components").get<uint64_t>();
  st.has_shortest = j.contains("shortest_distances");   // absent in packs of 2026-11-26 before 'shortest'
  if (st.has_shortest) {
    const json& sd = j.at("shortest_distances");
    if (sd.at("radius").get<double>() != kPackShortestRadius)
      throw Error("shortest_distances: radius " + sd.at("radius").dump() + " is not this mlip's " + std::to_string(kPackShortestRadius));
    for (const auto& [pair, r] : sd.at("pairs").items()) {
      const auto dash = pair.find('-');
      if (dash == std::string::npos) throw Error("shortest_distances: '" + pair + "' is not ELEMENT-ELEMENT");
      const int a = atomic_number(pair.substr(0, dash)), b = atomic_number(pair.substr(dash + 1));
      st.shortest[{std::min(a, b), std::max(a, b)}] = r.get<double>();
    }
  }
  const std::size_t n = st.e0_numbers.size();
  if (st.counts_energy.size() != n || st.counts_counts.size() != n)
    throw Error("e0_least_squares: sizes differ from its elements");
  for (const auto& row : st.counts_counts)
    if (row.size() != n) throw Error("e0_least_squares: counts_counts is not square");
  return st;
}

// ---- manifest ----------------------------------------------------------------------------------

json manifest_json(const PackManifest& m) {
  json shards = json::array();
  for (const PackShard& s : m.shards)
    shards.push_back({{"data", s.data},
                      {"index", s.index},
                      {"first_frame", s.first_frame},
                      {"frames", s.frames},
                      {"bytes", s.bytes},
                      {"data_xxh3", s.data_xxh3},
                      {"index_xxh3", s.index_xxh3}});
  return {{"format", kFormat},
          {"version", m.version},
          {"units", {{"length", "angstrom"}, {"energy", "eV"}, {"forces", "eV/angstrom"}, {"virial", "eV"}}},
          {"frames", m.frames},
          {"species", m.species()},
          {"sources", m.sources},
          {"shards", shards},
          {"stats", stats_json(m.stats)}};
}

fs::path manifest_path(const std::string& dir) { return fs::path(dir) / "manifest.json"; }

// Writes the manifest under a temporary name, then renames it over the old one (atomic), and
// syncs the folder so that the rename itself survives a crash.
void write_manifest(const std::string& dir, const PackManifest& m) {
  const fs::path path = manifest_path(dir), tmp = path.string() + ".tmp";
  write_file(tmp, manifest_json(m).dump(1) + "\n");
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot write: " + ec.message());
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// A checked file descriptor: every failure names the file and the cause.
class File {
 public:
  File(const fs::path& path, int flags) : path_(path.string()) {
    fd_ = ::open(path_.c_str(), flags | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int error = errno;
      throw Error(path_ + ": cannot open: " + std::strerror(error) + open_files_hint(error));
    }
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const std::string& path() const { return path_; }

  void write(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(path_ + ": cannot write: " + std::strerror(n < 0 ? errno : ENOSPC));
      done += static_cast<std::size_t>(n);
    }
  }
  void sync_and_close() {
    int error = ::fsync(fd_) != 0 ? errno : 0;
    if (::close(fd_) != 0 && error == 0) error = errno;
    fd_ = -1;
    if (error != 0) throw Error(path_ + ": cannot write: " + std::strerror(error));
  }
  // Reads up to `n` bytes at `offset`; fewer only where the file ends.
  std::size_t read_at(void* out, std::size_t n, uint64_t offset) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw Error(path_ + ": cannot read: " + std::strerror(errno));
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

uint64_t file_xxh3(const fs::path& path) {
  const File f(path, O_RDONLY);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buf(1 << 22);
  for (uint64_t offset = 0;;) {
    const std::size_t n = f.read_at(buf.data(), buf.size(), offset);
    XXH3_64bits_update(state.get(), buf.data(), n);
    offset += n;
    if (n < buf.size()) break;
  }
  return XXH3_64bits_digest(state.get());
}

// "DIR/shard-00003.bin, frame 17" for messages.
std::string where(const std::string& dir, const PackShard& shard, uint64_t frame) {
  return cat("pack ", dir, ": ", shard.data, ", frame ", frame);
}

// A record's header against what the index says of it: frame `frame`, `size` bytes.
void check_header(const RecordHeader& h, uint64_t frame, uint64_t size, const std::string& context,
                  std::size_t n_sources) {
  if (std::memcmp(h.magic, kRecordMagic, 4) != 0)
    throw Error(context + ": no record starts here (the index disagrees with its shard, or the shard is corrupt)");
  if (h.frame != frame) throw Error(cat(context, ": the record is frame ", h.frame, " (the index disagrees with its shard)"));
  if (h.flags >= 64) throw Error(cat(context, ": unknown flags ", h.flags, " (a newer pack format, or corrupt)"));
  if (record_bytes(h.atoms, h.flags) != size)
    throw Error(cat(context, ": the record of ", h.atoms, " atoms takes ", record_bytes(h.atoms, h.flags),
                    " bytes, the index gives it ", size));
  if (h.source >= n_sources) throw Error(cat(context, ": source ", h.source, " does not exist (", n_sources, " sources)"));
}

// A record's frame from its bytes (their size is the record's by the index).
Structure decode(const std::vector<char>& bytes, uint64_t frame, const std::string& context,
                 const std::vector<std::string>& sources, const std::string& dir) {
  RecordHeader h;
  if (bytes.size() < sizeof h) throw Error(context + ": the record is shorter than its header (truncated shard?)");
  std::memcpy(&h, bytes.data(), sizeof h);
  check_header(h, frame, bytes.size(), context, sources.size());
  Structure s;
  s.numbers.resize(h.atoms);
  s.positions.resize(h.atoms);
  const char* p = bytes.data() + sizeof h;
  for (uint32_t i = 0; i < h.atoms; ++i) {
    int32_t z;
    std::memcpy(&z, p + 4ull * i, 4);
    s.numbers[i] = z;
  }
  p += padded(4ull * h.atoms);
  std::memcpy(s.positions.data(), p, 24ull * h.atoms);
  if (h.flags & kForces) {
    s.forces.resize(h.atoms);
    std::memcpy(s.forces.data(), p + 24ull * h.atoms, 24ull * h.atoms);
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) s.cell.lattice[a][b] = h.cell[3 * a + b];
  s.cell.pbc = {(h.flags & kPbcX) != 0, (h.flags & kPbcY) != 0, (h.flags & kPbcZ) != 0};
  if (h.flags & kEnergy) s.energy = h.energy;
  if (h.flags & kVirial) {
    Mat3 w;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) w[a][b] = h.virial[3 * a + b];
    s.virial = w;
  }
  s.weight = h.weight;
  s.origin = cat(sources[h.source], ":frame ", h.source_frame, " (pack ", dir, ", frame ", frame, ")");
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
  return s;
}

bool close_enough(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }

// The first difference between two statistics, or "".
std::string stats_difference(const PackStats& a, const PackStats& b) {
  if (a.atoms != b.atoms || a.atoms_by_z != b.atoms_by_z) return "atom counts";
  if (a.energy_frames != b.energy_frames || a.force_frames != b.force_frames || a.virial_frames != b.virial_frames)
    return "labelled frame counts";
  if (a.force_components != b.force_components || !close_enough(a.force_squares, b.force_squares)) return "force sums";
  if (!close_enough(a.energy_squares, b.energy_squares)) return "energy sums";
  PackStats c = b;   // b's rows in a's order
  for (std::size_t i = 0; i < a.e0_numbers.size(); ++i)
    for (std::size_t j = 0; j < a.e0_numbers.size(); ++j) {
      const std::size_t ci = e0_row(c, a.e0_numbers[i]), cj = e0_row(c, a.e0_numbers[j]);
      if (!close_enough(a.counts_counts[i][j], c.counts_counts[ci][cj])) return "species-count sums";
      if (j == 0 && !close_enough(a.counts_energy[i], c.counts_energy[ci])) return "species-energy sums";
    }
  if (c.e0_numbers.size() != a.e0_numbers.size()) return "elements with energies";
  if (a.has_shortest && a.shortest != b.shortest) return "shortest distances";
  return "";
}

}  // namespace

// ---- statistics ---------------------------------------------------------------------------------

namespace {
// The shortest distance of each pair of elements in `s` closer than kPackShortestRadius, into `out`.
void shortest_pairs(const Structure& s, std::map<std::pair<int, int>, double>& out) {
  NeighborOptions options;
  options.min_distance = 0;   // overlapping atoms: Structure::validate's and the trainer's concern
  options.sort = false;
  const NeighborList nl = build_neighbor_list(s, kPackShortestRadius, options);
  for (std::size_t e = 0; e < nl.size(); ++e) {
    const int a = s.numbers[static_cast<std::size_t>(nl.centers[e])], b = s.numbers[static_cast<std::size_t>(nl.neighbors[e])];
    if (a > b) continue;   // each pair once (the list is full)
    const Vec3& v = nl.vectors[e];
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    const auto [it, added] = out.try_emplace({a, b}, r);
    if (!added) it->second = std::min(it->second, r);
  }
}
}  // namespace

void PackStats::add(const Structure& s) { add_all({&s}); }

void PackStats::add_all(const std::vector<const Structure*>& frames) {
  for (const Structure* s : frames) add_counts(*s);
  // Shortest distances: each thread its share of the frames, then the smallest of each pair.
  // As many as the CPUs this process may run on (a batch job's, not the node's), read once.
  static const std::size_t cpus = [] {
    const std::size_t affinity = cpu_affinity().cpus.size();
    return affinity > 0 ? affinity : std::max<std::size_t>(1, std::thread::hardware_concurrency());
  }();
  const std::size_t n_threads = std::clamp<std::size_t>(frames.size() / 8, 1, cpus);
  std::vector<std::map<std::pair<int, int>, double>> found(n_threads);
  std::vector<std::exception_ptr> failed(n_threads);
  auto work = [&](std::size_t t) {
    try {
      for (std::size_t k = t; k < frames.size(); k += n_threads) shortest_pairs(*frames[k], found[t]);
    } catch (...) {
      failed[t] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < n_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (auto& th : threads) th.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  for (const auto& m : found)
    for (const auto& [zz, r] : m) {
      const auto [it, added] = shortest.try_emplace(zz, r);
      if (!added) it->second = std::min(it->second, r);
    }
}

void PackStats::add_each(std::size_t first, std::size_t count, const std::function<Structure(std::size_t)>& frame) {
  constexpr std::size_t kBlock = 1024;
  for (std::size_t b = first; b < first + count; b += kBlock) {
    std::vector<Structure> block;
    for (std::size_t i = b; i < std::min(b + kBlock, first + count); ++i) block.push_back(frame(i));
    std::vector<const Structure*> ptrs;
    for (const Structure& st : block) ptrs.push_back(&st);
    add_all(ptrs);
  }
}

void check_pack_units(const Units& u, const std::string& path) {
  if (u.length != "angstrom" || u.energy != "eV" || !u.stress.empty())
    throw Error(path + ": a pack holds frames in eV and angstrom already: give it no units");
}

void PackStats::add_counts(const Structure& s) {
  atoms += s.size();
  for (const int z : s.numbers) ++atoms_by_z.at(static_cast<std::size_t>(z));
  if (s.energy) {
    ++energy_frames;
    add_energy(s, *s.energy);
  }
  if (s.has_forces()) {
    ++force_frames;
    for (const auto& f : s.forces) force_squares += f[0] * f[0] + f[1] * f[1] + f[2] * f[2];
    force_components += 3 * s.size();
  }
  if (s.virial) ++virial_frames;
}

void PackStats::add_energy(const Structure& s, double e) {
  std::map<int, double> count;
  for (const int z : s.numbers) count[z] += 1.0;
  std::vector<std::pair<std::size_t, double>> rows;   // every row first: e0_row may add one
  for (const auto& [z, n] : count) rows.emplace_back(e0_row(*this, z), n);
  for (const auto& [a, na] : rows) {
    counts_energy[a] += na * e;
    for (const auto& [b, nb] : rows) counts_counts[a][b] += na * nb;
  }
  energy_squares += e * e;
}


void PackStats::merge(const PackStats& o) {
  atoms += o.atoms;
  for (std::size_t z = 0; z < atoms_by_z.size(); ++z) atoms_by_z[z] += o.atoms_by_z[z];
  energy_frames += o.energy_frames;
  force_frames += o.force_frames;
  virial_frames += o.virial_frames;
  std::vector<std::size_t> row;   // other's rows in this one (added first: e0_row may add one)
  for (const int z : o.e0_numbers) row.push_back(e0_row(*this, z));
  for (std::size_t i = 0; i < row.size(); ++i) {
    counts_energy[row[i]] += o.counts_energy[i];
    for (std::size_t j = 0; j < row.size(); ++j) counts_counts[row[i]][row[j]] += o.counts_counts[i][j];
  }
  energy_squares += o.energy_squares;
  force_squares += o.force_squares;
  force_components += o.force_components;
  has_shortest = has_shortest && o.has_shortest;
  for (const auto& [zz, r] : o.shortest) {
    const auto [it, added] = shortest.try_emplace(zz, r);
    if (!added) it->second = std::min(it->second, r);
  }
}

std::vector<std::string> PackManifest::species() const {
  std::vector<std::string> out;
  for (int z = 1; z <= kMaxAtomicNumber; ++z)
    if (stats.atoms_by_z[z] > 0) out.push_back(element_symbol(z));
  return out;
}

// ---- manifest -----------------------------------------------------------------------------------

bool is_pack(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(manifest_path(dir), ec)) return false;
  try {
    return json::parse(read_file(manifest_path(dir))).value("format", "") == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

PackManifest read_pack_manifest(const std::string& dir) {
  const fs::path path = manifest_path(dir);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error("pack " + dir + ": no manifest.json (not a pack, or a pack whose writing never finished)");
  try {
    const json j = json::parse(read_file(path));
    if (j.value("format", "") != kFormat) throw Error("its format is not " + std::string(kFormat));
    PackManifest m;
    m.version = j.at("version").get<int>();
    if (m.version < kPackOldestVersion || m.version > kPackVersion)
      throw Error(cat("pack format version ", m.version, "; this mlip reads versions ", kPackOldestVersion, " to ",
                      kPackVersion));
    m.sources = j.at("sources").get<std::vector<std::string>>();
    m.frames = j.at("frames").get<uint64_t>();
    uint64_t next = 0;
    for (const json& s : j.at("shards")) {
      PackShard sh;
      sh.data = s.at("data").get<std::string>();
      sh.index = s.at("index").get<std::string>();
      sh.first_frame = s.at("first_frame").get<uint64_t>();
      sh.frames = s.at("frames").get<uint64_t>();
      sh.bytes = s.at("bytes").get<uint64_t>();
      sh.data_xxh3 = s.at("data_xxh3").get<std::string>();
      sh.index_xxh3 = s.at("index_xxh3").get<std::string>();
      if (sh.first_frame != next || sh.data.find('/') != std::string::npos || sh.index.find('/') != std::string::npos)
        throw Error("shard " + sh.data + ": its first frame or file names are inconsistent");
      if (sh.frames > sh.bytes / sizeof(RecordHeader))
        throw Error(cat("shard ", sh.data, ": ", sh.frames, " frames cannot fit in its ", sh.bytes, " bytes"));
      next += sh.frames;
      m.shards.push_back(sh);
    }
    if (next != m.frames) throw Error(cat("its shards hold ", next, " frames, it says ", m.frames));
    m.stats = stats_of(j.at("stats"));
    return m;
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(what.rfind(path.string(), 0) == 0 ? what : path.string() + ": " + what);  // named once
  } catch (const std::exception& e) {
    throw Error(path.string() + ": not a valid pack manifest (" + std::string(e.what()) + ")");
  }
}

// ---- writer -------------------------------------------------------------------------------------

struct PackWriter::Impl {
  std::string dir;
  PackWriteOptions options;
  PackManifest manifest;
  std::unique_ptr<File> data;             // the open shard, if any
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> atoms;            // of the open shard's frames (written from version 2)
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash{XXH3_createState(), XXH3_freeState};

  void open_shard() {
    const std::string name = shard_name(manifest.shards.size());
    data = std::make_unique<File>(fs::path(dir) / (name + ".bin"), O_WRONLY | O_CREAT | O_TRUNC);
    offsets.assign(1, 0);
    atoms.clear();
    XXH3_64bits_reset(hash.get());
  }

  void close_shard() {
    if (!data) return;
    data->sync_and_close();
    const std::string name = shard_name(manifest.shards.size());
    // An appended pack keeps its version (a version 1 pack gets version 1 shards).
    std::string index(index_bytes(manifest.version, atoms.size()), '\0');
    std::memcpy(index.data(), offsets.data(), offsets.size() * 8);
    if (manifest.version >= 2) std::memcpy(index.data() + offsets.size() * 8, atoms.data(), atoms.size() * 4);
    write_file(fs::path(dir) / (name + ".idx"), index);
    PackShard s;
    s.data = name + ".bin";
    s.index = name + ".idx";
    s.frames = offsets.size() - 1;
    s.first_frame = manifest.frames - s.frames;
    s.bytes = offsets.back();
    s.data_xxh3 = hex(XXH3_64bits_digest(hash.get()));
    s.index_xxh3 = hex(XXH3_64bits(index.data(), index.size()));
    manifest.shards.push_back(s);
    data.reset();
  }
};

PackWriter::PackWriter(const std::string& dir, const PackWriteOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->dir = dir;
  impl_->options = options;
  std::error_code ec;
  const bool exists = fs::exists(manifest_path(dir), ec);
  if (options.append) {
    impl_->manifest = read_pack_manifest(dir);
  } else if (exists) {
    throw Error("pack " + dir + ": this folder already holds a pack: add to it with --append, or pack into another folder");
  }
  fs::create_directories(dir, ec);
  if (ec) throw Error("pack " + dir + ": cannot create the folder: " + ec.message());
}

PackWriter::~PackWriter() = default;

void PackWriter::add_all(const std::vector<Structure>& frames, uint32_t source, uint64_t first_frame) {
  // In blocks, so that the statistics of a block are found by several threads.
  for (std::size_t b = 0; b < frames.size(); b += kBlock) {
    std::vector<const Structure*> block;
    for (std::size_t k = b; k < std::min(frames.size(), b + kBlock); ++k) {
      write(frames[k], source, first_frame + k);
      block.push_back(&frames[k]);
    }
    impl_->manifest.stats.add_all(block);
  }
}

uint64_t PackWriter::add_reader(const FrameReader& reader, uint32_t source) {
  std::vector<Structure> block;
  for (std::size_t first = 0; first < reader.size(); first += kBlock) {
    block.clear();
    for (std::size_t i = first; i < std::min(reader.size(), first + kBlock); ++i) block.push_back(reader.frame(i));
    add_all(block, source, first);
  }
  return reader.size();
}

uint32_t PackWriter::add_source(const std::string& name) {
  impl_->manifest.sources.push_back(name);
  return static_cast<uint32_t>(impl_->manifest.sources.size() - 1);
}

void PackWriter::add(const Structure& s, uint32_t source, uint64_t source_frame) {
  write(s, source, source_frame);
  impl_->manifest.stats.add(s);
}

void PackWriter::write(const Structure& s, uint32_t source, uint64_t source_frame) {
  Impl& w = *impl_;
  s.validate();
  if (source >= w.manifest.sources.size()) throw Error("pack: add() of an unknown source");
  if (!w.data) w.open_shard();
  const std::string record = encode(s, source, source_frame, w.manifest.frames);
  w.data->write(record);
  XXH3_64bits_update(w.hash.get(), record.data(), record.size());
  w.offsets.push_back(w.offsets.back() + record.size());
  w.atoms.push_back(static_cast<uint32_t>(s.size()));
  ++w.manifest.frames;
  if (w.offsets.back() >= w.options.shard_bytes) w.close_shard();
}

const PackManifest& PackWriter::finish() {
  impl_->close_shard();
  write_manifest(impl_->dir, impl_->manifest);
  return impl_->manifest;
}

// ---- reader -------------------------------------------------------------------------------------

struct PackReader::Impl {
  std::string dir;
  PackManifest manifest;

  // A shard's data and index files, open.
  struct Files {
    Files(const fs::path& data_path, const fs::path& index_path) : data(data_path, O_RDONLY), index(index_path, O_RDONLY) {}
    File data, index;
  };

  // Shard k's files, open: the kOpenShards used last stay open (a pack may have more shards than
  // a process may hold open files), so that reading a frame takes two system calls (three from
  // version 2: its atom count from the index too).
  std::shared_ptr<const Files> shard(std::size_t k) const {
    static constexpr std::size_t kOpenShards = 16;
    std::lock_guard<std::mutex> lock(open_mutex);
    const auto it = std::find_if(open.begin(), open.end(), [k](const auto& e) { return e.first == k; });
    if (it != open.end()) {
      std::rotate(open.begin(), it, it + 1);  // most recently used first
      return open.front().second;
    }
    const PackShard& s = manifest.shards[k];
    auto f = std::make_shared<const Files>(fs::path(dir) / s.data, fs::path(dir) / s.index);
    if (open.size() == kOpenShards) open.pop_back();
    open.insert(open.begin(), {k, f});
    return f;
  }
  mutable std::mutex open_mutex;
  mutable std::vector<std::pair<std::size_t, std::shared_ptr<const Files>>> open;

  // Where frame i is: its shard, and its record's bytes [begin, end) there, from the shard's
  // index (two offsets in one positioned read: the index is not held in memory).
  struct Location {
    std::size_t shard;
    uint64_t begin, end;
    std::shared_ptr<const Files> files;
  };
  Location locate(uint64_t i) const {
    if (i >= manifest.frames) throw Error(cat("pack ", dir, ": frame ", i, " does not exist (", manifest.frames, " frames)"));
    const std::size_t k = shard_of(i);
    const PackShard& s = manifest.shards[k];
    Location at{k, 0, 0, shard(k)};
    uint64_t off[2];
    if (at.files->index.read_at(off, sizeof off, 8 * (i - s.first_frame)) != sizeof off)
      throw Error(cat("pack ", dir, ": ", s.index, " ends before frame ", i, "'s entry (truncated after opening)"));
    if (off[0] > s.bytes || off[1] > s.bytes || off[1] < off[0] || off[1] - off[0] < sizeof(RecordHeader))
      throw Error(cat("pack ", dir, ": ", s.index, " disagrees with its shard at frame ", i));
    at.begin = off[0];
    at.end = off[1];
    return at;
  }

  // Shard k's frames' atom counts (from version 2), `count` of them from its frame `first`.
  std::vector<uint32_t> index_atoms(std::size_t k, uint64_t first, uint64_t count) const {
    return index_atoms(*shard(k), manifest.shards[k], first, count);
  }
  std::vector<uint32_t> index_atoms(const Files& files, const PackShard& s, uint64_t first, uint64_t count) const {
    std::vector<uint32_t> out(count);
    const uint64_t at = 8 * (s.frames + 1) + 4 * first;
    if (files.index.read_at(out.data(), 4 * count, at) != 4 * count)
      throw Error(cat("pack ", dir, ": ", s.index, " ends inside its atom counts (truncated after opening)"));
    return out;
  }
  std::size_t shard_of(uint64_t i) const {
    const auto it = std::upper_bound(manifest.shards.begin(), manifest.shards.end(), i,
                                     [](uint64_t f, const PackShard& s) { return f < s.first_frame; });
    return static_cast<std::size_t>(it - manifest.shards.begin()) - 1;
  }
};

PackReader::PackReader(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  Impl& r = *impl_;
  r.dir = dir;
  r.manifest = read_pack_manifest(dir);
  // Each shard's files are checked by size, and the index's first and last offsets against the
  // shard; the entries in between are checked as frames are read (verify_pack checks them all).
  // So opening reads no per-frame data, whatever the size of the pack.
  for (const PackShard& s : r.manifest.shards) {
    const fs::path data = fs::path(dir) / s.data, index = fs::path(dir) / s.index;
    std::error_code ec;
    if (!fs::is_regular_file(data, ec) || !fs::is_regular_file(index, ec))
      throw Error("pack " + dir + ": " + (fs::is_regular_file(data, ec) ? s.index : s.data) +
                  ", listed in manifest.json, is missing");
    const uint64_t size = fs::file_size(data);
    if (size != s.bytes)
      throw Error(cat("pack ", dir, ": ", s.data, " has ", size, " bytes, the manifest says ", s.bytes, " (", size < s.bytes ? "truncated" : "changed after packing", ")"));
    const uint64_t want = index_bytes(r.manifest.version, s.frames);
    if (fs::file_size(index) != want)
      throw Error(cat("pack ", dir, ": ", s.index, " has ", fs::file_size(index), " bytes, ", s.frames, " frames need ",
                      want));
    const File f(index, O_RDONLY);
    uint64_t first = 1, last = 0;
    if (f.read_at(&first, 8, 0) != 8 || f.read_at(&last, 8, 8 * s.frames) != 8)
      throw Error(cat("pack ", dir, ": ", s.index, " has fewer than the ", 8 * (s.frames + 1), " bytes it had when opened"));
    if (first != 0 || last != s.bytes)
      throw Error(cat("pack ", dir, ": ", s.index, " disagrees with its shard: it covers bytes ", first, " to ", last, " of ", s.bytes));
  }
}

PackReader::~PackReader() = default;
PackReader::PackReader(PackReader&&) noexcept = default;

const PackManifest& PackReader::manifest() const { return impl_->manifest; }
std::size_t PackReader::size() const { return impl_->manifest.frames; }

Structure PackReader::frame(std::size_t i) const {
  const Impl& r = *impl_;
  const Impl::Location at = r.locate(i);
  const uint64_t size = at.end - at.begin;
  std::vector<char> bytes(size);
  const std::string context = where(r.dir, r.manifest.shards[at.shard], i);
  if (at.files->data.read_at(bytes.data(), size, at.begin) != size) throw Error(context + ": the shard ends inside the record");
  Structure s = decode(bytes, i, context, r.manifest.sources, r.dir);
  if (r.manifest.version >= 2) {
    const PackShard& shard = r.manifest.shards[at.shard];
    const uint32_t listed = r.index_atoms(*at.files, shard, i - shard.first_frame, 1)[0];
    if (listed != s.size())
      throw Error(cat(context, ": the record has ", s.size(), " atoms, ", shard.index, " says ", listed,
                      " (the index disagrees with its shard)"));
  }
  return s;
}

std::size_t PackReader::atoms(std::size_t i) const {
  const Impl& r = *impl_;
  if (r.manifest.version >= 2) {
    if (i >= r.manifest.frames) throw Error(cat("pack ", r.dir, ": frame ", i, " does not exist (", r.manifest.frames, " frames)"));
    const std::size_t k = r.shard_of(i);
    return r.index_atoms(k, i - r.manifest.shards[k].first_frame, 1)[0];
  }
  const Impl::Location at = r.locate(i);
  const std::string context = where(r.dir, r.manifest.shards[at.shard], i);
  RecordHeader h;
  if (at.files->data.read_at(&h, sizeof h, at.begin) != sizeof h) throw Error(context + ": the shard ends inside the record");
  check_header(h, i, at.end - at.begin, context, r.manifest.sources.size());
  return h.atoms;
}

std::vector<uint32_t> PackReader::atom_counts() const {
  const Impl& r = *impl_;
  if (r.manifest.version < 2) return FrameReader::atom_counts();  // one record header a frame
  std::vector<uint32_t> out;
  out.reserve(r.manifest.frames);
  for (std::size_t k = 0; k < r.manifest.shards.size(); ++k) {
    const std::vector<uint32_t> part = r.index_atoms(k, 0, r.manifest.shards[k].frames);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<Structure> read_pack(const std::string& dir) {
  const PackReader r(dir);
  std::vector<Structure> out;
  out.reserve(r.size());
  for (uint64_t i = 0; i < r.size(); ++i) out.push_back(r.frame(i));
  return out;
}

void verify_pack(const std::string& dir, const std::function<void(const std::string&)>& log) {
  const PackReader r(dir);
  const PackManifest& m = r.manifest();
  PackStats stats;
  for (const PackShard& s : m.shards) {
    for (const auto& [file, expected] : {std::pair{s.data, s.data_xxh3}, {s.index, s.index_xxh3}}) {
      const std::string got = hex(file_xxh3(fs::path(dir) / file));
      if (got != expected)
        throw Error(cat("pack ", dir, ": ", file, ": checksum ", got, " differs from the manifest's ", expected, ": the file changed after packing (corrupt)"));
    }
    stats.add_each(s.first_frame, s.frames, [&r](std::size_t i) { return r.frame(i); });
    log(cat(s.data, ": ", s.frames, " frames, ", std::round(s.bytes / 1e5) / 10, " MB, checksums and records good"));
  }
  const std::string diff = stats_difference(m.stats, stats);
  if (!diff.empty()) throw Error("pack " + dir + ": manifest.json's statistics (" + diff + ") differ from the frames'");
}

}  // namespace mlip
