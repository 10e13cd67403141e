// Units, shared parsing helpers, format detection and read_structures.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>

#include "io_detail.h"
#include "mlip/data/elements.h"
#include "mlip/data/pack.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
namespace fs = std::filesystem;

namespace {

// Exact SI values (CODATA 2018): elementary charge and the Faraday constant e * N_A.
constexpr double kElementaryCharge = 1.602176634e-19;         // C, so 1 eV = this many J
constexpr double kFaraday = 96485.33212331001;                // C/mol, so 1 eV per particle = this J/mol
constexpr double kHartree = 27.211386245988;                  // eV
constexpr double kBohr = 0.529177210903;                      // Å
constexpr double kPascal = 1.0 / (kElementaryCharge * 1e30);  // eV/Å^3

struct NamedFactor {
  const char* name;
  double factor;
};

constexpr NamedFactor kLengths[] = {
    {"angstrom", 1.0}, {"A", 1.0}, {"Ang", 1.0}, {"bohr", kBohr}, {"nm", 10.0}};
constexpr NamedFactor kEnergies[] = {{"eV", 1.0},
                                     {"meV", 1e-3},
                                     {"kcal/mol", 4184.0 / kFaraday},
                                     {"kJ/mol", 1000.0 / kFaraday},
                                     {"hartree", kHartree},
                                     {"Ha", kHartree},
                                     {"Ry", kHartree / 2}};
constexpr NamedFactor kStresses[] = {{"bar", 1e5 * kPascal},
                                     {"kbar", 1e8 * kPascal},
                                     {"GPa", 1e9 * kPascal},
                                     {"eV/A^3", 1.0},
                                     {"eV/Ang^3", 1.0}};

template <std::size_t N>
double lookup(const NamedFactor (&table)[N], const std::string& name, const char* kind) {
  for (const NamedFactor& u : table) {
    if (name == u.name) return u.factor;
  }
  std::string known;
  for (const NamedFactor& u : table) known += std::string(known.empty() ? "" : ", ") + u.name;
  throw Error("unknown " + std::string(kind) + " unit '" + name + "' (known: " + known + ")");
}

}  // namespace

double Units::length_factor() const { return lookup(kLengths, length, "length"); }
double Units::energy_factor() const { return lookup(kEnergies, energy, "energy"); }
double Units::force_factor() const { return energy_factor() / length_factor(); }

double Units::stress_factor(const std::string& format_default) const {
  const std::string& name = stress.empty() ? format_default : stress;
  if (name.empty()) return energy_factor() / std::pow(length_factor(), 3);
  return lookup(kStresses, name, "stress");
}

namespace io_detail {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return buffer.str();
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

std::vector<fs::path> list_dir(const std::string& dir, bool recursive,
                               const std::function<bool(const fs::directory_entry&)>& keep) {
  std::vector<fs::path> out;
  try {
    if (recursive) {
      for (const auto& entry : fs::recursive_directory_iterator(dir)) {
        if (keep(entry)) out.push_back(entry.path());
      }
    } else {
      for (const auto& entry : fs::directory_iterator(dir)) {
        if (keep(entry)) out.push_back(entry.path());
      }
    }
  } catch (const fs::filesystem_error& e) {
    throw Error(dir + ": cannot list the directory (" + e.what() + ")");
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string at_line(const std::string& path, std::size_t line_index) {
  return path + ":line " + std::to_string(line_index + 1);
}

double parse_number(std::string_view token, const std::string& where, const std::string& what) {
  std::string_view t = token;
  if (t.size() > 1 && t[0] == '+') t.remove_prefix(1);  // from_chars does not take a leading '+'
  double value = 0.0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || end != t.data() + t.size()) {
    throw Error(where + ": cannot parse '" + std::string(token) + "' as a number (" + what + ")");
  }
  if (!std::isfinite(value)) {
    throw Error(where + ": non-finite value '" + std::string(token) + "' (" + what + ")");
  }
  return value;
}

bool try_parse_integer(std::string_view token, long long& value) {
  std::string_view t = token;
  if (t.size() > 1 && t[0] == '+') t.remove_prefix(1);
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  return ec == std::errc() && end == t.data() + t.size();
}

long long parse_integer(std::string_view token, const std::string& where, const std::string& what) {
  long long value = 0;
  if (!try_parse_integer(token, value)) {
    throw Error(where + ": cannot parse '" + std::string(token) + "' as an integer (" + what + ")");
  }
  return value;
}

int element_number(std::string_view symbol, const std::string& where) {
  const int z = atomic_number(symbol);
  if (z == 0) throw Error(where + ": unknown element '" + std::string(symbol) + "'");
  return z;
}

void validate_frame(const Structure& s, const std::string& context) {
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + context);
  }
}

Mat3 scaled(const Mat3& m, double factor) {
  Mat3 out = m;
  for (Vec3& row : out) {
    for (double& x : row) x *= factor;
  }
  return out;
}

// The row as a frame: units, and the virial given (MACE) or from ASE's stress (Voigt xx yy zz yz
// xz xy or 3x3, positive under tension): virial = -stress * volume.
Structure to_structure(const RawFrame& r, const ReadOptions& o, const std::string& where) {
  const std::size_t n = r.numbers.size();
  if (r.positions.size() != 3 * n || r.cell.size() != 9 || (!r.forces.empty() && r.forces.size() != 3 * n))
    throw Error(where + ": its arrays' sizes do not match its " + std::to_string(n) + " atoms");
  const double length = o.units.length_factor(), energy = o.units.energy_factor(), force = o.units.force_factor();
  Structure s;
  s.origin = where;
  s.numbers = r.numbers;
  for (std::size_t i = 0; i < n; ++i)
    s.positions.push_back({r.positions[3 * i] * length, r.positions[3 * i + 1] * length, r.positions[3 * i + 2] * length});
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) s.cell.lattice[a][b] = r.cell[3 * a + b] * length;
  s.cell.pbc = r.pbc;
  if (r.energy) s.energy = *r.energy * energy;
  for (std::size_t i = 0; i < r.forces.size() / 3; ++i)
    s.forces.push_back({r.forces[3 * i] * force, r.forces[3 * i + 1] * force, r.forces[3 * i + 2] * force});
  if (!r.virial.empty()) {
    const auto& v = r.virial;   // 3x3, or 6 Voigt values xx yy zz yz xz xy as MACE takes them
    if (v.size() != 6 && v.size() != 9) throw Error(where + ": virials has " + std::to_string(v.size()) + " values, expected 6 or 9");
    const Mat3 w = v.size() == 9 ? Mat3{{{v[0], v[1], v[2]}, {v[3], v[4], v[5]}, {v[6], v[7], v[8]}}}
                                 : Mat3{{{v[0], v[5], v[4]}, {v[5], v[1], v[3]}, {v[4], v[3], v[2]}}};
    s.virial = scaled(w, energy);
  } else if (!r.stress.empty()) {
    const auto& v = r.stress;
    if (v.size() != 6 && v.size() != 9) throw Error(where + ": stress has " + std::to_string(v.size()) + " values, expected 6 or 9");
    const Mat3 sigma = v.size() == 9 ? Mat3{{{v[0], v[1], v[2]}, {v[3], v[4], v[5]}, {v[6], v[7], v[8]}}}
                                     : Mat3{{{v[0], v[5], v[4]}, {v[5], v[1], v[3]}, {v[4], v[3], v[2]}}};
    const double volume = s.cell.volume();
    if (!(volume > 0.0)) throw Error(where + ": stress is given but the cell has no volume");
    s.virial = scaled(sigma, -o.units.stress_factor() * volume);
  }
  s.weight = r.weight;
  validate_frame(s, "");
  return s;
}

namespace {

class ConcatReader final : public FrameReader {
 public:
  ConcatReader(std::vector<std::unique_ptr<FrameReader>> parts, std::string name)
      : parts_(std::move(parts)), name_(std::move(name)) {
    first_.push_back(0);
    for (const auto& p : parts_) first_.push_back(first_.back() + p->size());
  }
  std::size_t size() const override { return first_.back(); }
  Structure frame(std::size_t i) const override {
    const auto [k, local] = locate(i);
    return parts_[k]->frame(local);
  }
  std::size_t atoms(std::size_t i) const override {
    const auto [k, local] = locate(i);
    return parts_[k]->atoms(local);
  }

 private:
  std::pair<std::size_t, std::size_t> locate(std::size_t i) const {
    if (i >= size()) throw Error(name_ + ": no frame " + std::to_string(i) + " (" + std::to_string(size()) + " frames)");
    const auto k = static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) - 1;
    return {k, i - first_[k]};
  }
  std::vector<std::unique_ptr<FrameReader>> parts_;
  std::string name_;
  std::vector<std::size_t> first_;
};

}  // namespace

// Names in number order: train_2.h5 before train_10.h5 (runs of digits compare as numbers).
bool natural_less(const std::string& a, const std::string& b) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (!digit(a[i]) || !digit(b[j])) {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
      continue;
    }
    while (i + 1 < a.size() && a[i] == '0' && digit(a[i + 1])) ++i;   // leading zeros
    while (j + 1 < b.size() && b[j] == '0' && digit(b[j + 1])) ++j;
    std::size_t i2 = i, j2 = j;
    while (i2 < a.size() && digit(a[i2])) ++i2;
    while (j2 < b.size() && digit(b[j2])) ++j2;
    if (i2 - i != j2 - j) return i2 - i < j2 - j;
    const int c = a.compare(i, i2 - i, b, j, j2 - j);
    if (c != 0) return c < 0;
    i = i2, j = j2;
  }
  return a.size() - i < b.size() - j;
}

std::vector<std::string> data_files(const std::string& dir, std::initializer_list<std::string_view> extensions) {
  std::vector<std::string> out;
  for (const fs::path& p : list_dir(dir, false, [&](const fs::directory_entry& e) {
         std::string ext = e.path().extension().string();
         std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
         return e.is_regular_file() && std::find(extensions.begin(), extensions.end(), ext) != extensions.end();
       }))
    out.push_back(p.string());
  std::sort(out.begin(), out.end(), natural_less);
  return out;
}

std::unique_ptr<FrameReader> concat_readers(std::vector<std::unique_ptr<FrameReader>> parts, const std::string& name) {
  return std::make_unique<ConcatReader>(std::move(parts), name);
}

}  // namespace io_detail

namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// DeePMD systems (folders with type.raw) at or below `dir`, in sorted order.
std::vector<fs::path> deepmd_systems(const fs::path& dir) {
  if (fs::exists(dir / "type.raw")) return {dir};
  std::vector<fs::path> systems = io_detail::list_dir(dir.string(), true, [](const fs::directory_entry& e) {
    return e.is_regular_file() && e.path().filename() == "type.raw";
  });
  for (fs::path& p : systems) p = p.parent_path();
  return systems;
}

bool has_json_below(const fs::path& dir) {
  return !io_detail::list_dir(dir.string(), true, [](const fs::directory_entry& e) {
            return e.is_regular_file() && e.path().extension() == ".json";
          }).empty();
}

}  // namespace

std::string detect_format(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(status)) {
    if (is_pack(path)) return "pack";
    const bool deepmd = !deepmd_systems(path).empty();
    const bool json = has_json_below(path);
    if (deepmd && json) {
      throw Error(path + ": holds both DeePMD systems and *.json files; pass the format explicitly");
    }
    if (deepmd) return "deepmd";
    if (json) return "fitsnap";
    if (!io_detail::data_files(path, {".h5", ".hdf5"}).empty())
      return "mace-hdf5";   // MACE's HDF5 shards (preprocess_data.py writes a folder of them)
    if (!io_detail::data_files(path, {".aselmdb", ".lmdb"}).empty())
      return "aselmdb";     // fairchem's data sets: folders of *.aselmdb files
    throw Error(path + ": a directory with no DeePMD system (type.raw) and no *.json, *.h5 or *.aselmdb files");
  }
  const std::string name = fs::path(path).filename().string();
  const std::string lower = lowercase(name);
  if (has_suffix(lower, ".xyz") || has_suffix(lower, ".extxyz")) return "extxyz";
  if (has_suffix(lower, ".json")) return "fitsnap";
  if (name.rfind("input.data", 0) == 0) return "n2p2";
  if (has_suffix(lower, ".db")) return "ase-db";
  if (has_suffix(lower, ".aselmdb") || has_suffix(lower, ".lmdb")) return "aselmdb";
  if (has_suffix(lower, ".h5") || has_suffix(lower, ".hdf5")) return "mace-hdf5";
  if (has_suffix(lower, ".dump") || has_suffix(lower, ".lammpstrj")) return "lammps-dump";
  std::string first;
  std::getline(std::ifstream(path), first);
  if (first.rfind("ITEM: TIMESTEP", 0) == 0) return "lammps-dump";
  throw Error(path +
              ": cannot tell the format from the name (expected *.xyz, *.extxyz, *.json, input.data*, *.dump, "
              "*.lammpstrj, *.db, *.aselmdb, *.lmdb, *.h5, *.hdf5 or a directory); pass the format explicitly");
}

std::unique_ptr<FrameReader> open_frame_reader(const std::string& path, const std::string& format,
                                               const ReadOptions& options) {
  const std::string f = format == "auto" ? detect_format(path) : format;
  if (f == "extxyz") return std::make_unique<ExtxyzFile>(path, options);
  if (f == "pack") {
    check_pack_units(options.units, path);
    return std::make_unique<PackReader>(path);
  }
  if (f == "mace-hdf5") return io_detail::open_mace_hdf5(path, options);
  return io_detail::open_ase_reader(path, f, options);
}

std::vector<Structure> read_structures(const std::string& path, const std::string& format,
                                       const ReadOptions& options) {
  const std::string f = format == "auto" ? detect_format(path) : format;
  if (f == "extxyz") return read_extxyz(path, options);
  if (f == "n2p2") return read_n2p2(path, options);
  if (f == "fitsnap") return read_fitsnap_json(path, options);
  if (f == "lammps-dump") return read_lammps_dump(path, options);
  if (f == "ase-db") return read_ase_db(path, options);
  if (f == "aselmdb") return read_aselmdb(path, options);
  if (f == "mace-hdf5") return read_mace_hdf5(path, options);
  if (f == "pack") {
    check_pack_units(options.units, path);
    return read_pack(path);
  }
  if (f == "deepmd") {
    if (!fs::is_directory(path)) throw Error(path + ": a DeePMD system must be a directory");
    const std::vector<fs::path> systems = deepmd_systems(path);
    if (systems.empty()) throw Error(path + ": no DeePMD system (no type.raw at or below it)");
    std::vector<Structure> all;
    for (const fs::path& system : systems) {
      std::vector<Structure> frames = read_deepmd(system.string(), options);
      all.insert(all.end(), std::make_move_iterator(frames.begin()), std::make_move_iterator(frames.end()));
    }
    return all;
  }
  throw Error("unknown data format '" + format + "' for " + path +
              " (expected auto, extxyz, deepmd, n2p2, fitsnap, lammps-dump, ase-db, aselmdb, mace-hdf5 or pack)");
}

}  // namespace mlip
