// FitSNAP JSON training files.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "io_detail.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace io_detail;

namespace {

double number(const json& v, const std::string& where, const std::string& what) {
  if (!v.is_number()) throw Error(where + ": " + what + " is not a number (" + v.dump() + ")");
  return v.get<double>();
}

// An (n, 3) array of numbers; `n` is checked when given.
std::vector<Vec3> rows_of_three(const json& v, const std::string& where, const std::string& key,
                                std::optional<std::size_t> n = std::nullopt) {
  if (!v.is_array()) throw Error(where + ": " + key + " is not an array");
  if (n && v.size() != *n) {
    throw Error(where + ": " + key + " has " + std::to_string(v.size()) + " rows, expected " +
                std::to_string(*n));
  }
  std::vector<Vec3> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    if (!v[i].is_array() || v[i].size() != 3) throw Error(where + ": " + item + " is not 3 numbers");
    for (int d = 0; d < 3; ++d) out[i][d] = number(v[i][d], where, item + "[" + std::to_string(d) + "]");
  }
  return out;
}

Mat3 matrix(const json& v, const std::string& where, const std::string& key) {
  const std::vector<Vec3> rows = rows_of_three(v, where, key, 3);
  return {rows[0], rows[1], rows[2]};
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// FitSNAP's unit words ("angstrom", "electronvolt", "bar", ...) as mlip unit names; "" if unknown.
std::string length_unit(const std::string& style) {
  if (style == "angstrom") return "angstrom";
  if (style == "bohr") return "bohr";
  if (style == "nanometer" || style == "nm") return "nm";
  return "";
}

std::string energy_unit(const std::string& style) {
  if (style == "electronvolt" || style == "ev") return "eV";
  if (style == "millielectronvolt" || style == "mev") return "meV";
  if (style == "hartree") return "hartree";
  if (style == "rydberg") return "Ry";
  if (style == "kcal/mol" || style == "kcalpermol") return "kcal/mol";
  if (style == "kj/mol" || style == "kjpermol") return "kJ/mol";
  return "";
}

std::string stress_unit(const std::string& style) {
  if (style == "bar") return "bar";
  if (style == "kbar" || style == "kilobar") return "kbar";
  if (style == "gpa" || style == "gigapascal") return "GPa";
  return "";
}

// Edit distance (insertions, deletions, substitutions), case-insensitive.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// A key that is not one of `known` but within two edits of one ("Forcs", "energy") is a typo that
// would silently drop a label: an error naming both. Other keys (FitSNAP extensions) are ignored.
void reject_misspelt_keys(const json& object, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    bool exact = false;
    const char* near = nullptr;
    for (const char* k : known) {
      if (key == k) exact = true;
      else if (edit_distance(key, k) <= 2) near = k;
    }
    if (!exact && near) throw Error(where + ": unknown key \"" + key + "\" (did you mean \"" + near + "\"?)");
  }
}

// The stress unit of the file. The *Style keys, when present, must name the units in `units`;
// their factors are compared, so that aliases agree.
std::string check_styles(const json& dataset, const Units& units, const std::string& path) {
  const auto style = [&](const char* key) -> std::string {
    if (!dataset.contains(key)) return "";
    if (!dataset[key].is_string()) throw Error(path + ": " + key + " is not a string");
    return lowercase(dataset[key].get<std::string>());
  };
  const auto mismatch = [&](const char* key, const std::string& file_unit, const std::string& asked) {
    return Error(path + ": " + key + " '" + dataset[key].get<std::string>() + "' (" + file_unit +
                 ") does not match the units asked for (" + asked + ")");
  };
  const auto unknown = [&](const char* key) {
    return Error(path + ": unknown " + std::string(key) + " '" + dataset[key].get<std::string>() + "'");
  };
  for (const char* key : {"PositionsStyle", "LatticeStyle"}) {
    const std::string s = style(key);
    if (s.empty()) continue;
    const std::string unit = length_unit(s);
    if (unit.empty()) throw unknown(key);
    if (Units{unit, "eV", ""}.length_factor() != units.length_factor())
      throw mismatch(key, unit, units.length);
  }
  if (const std::string s = style("EnergyStyle"); !s.empty()) {
    const std::string unit = energy_unit(s);
    if (unit.empty()) throw unknown("EnergyStyle");
    if (Units{"angstrom", unit, ""}.energy_factor() != units.energy_factor()) {
      throw mismatch("EnergyStyle", unit, units.energy);
    }
  }
  if (const std::string s = style("ForcesStyle"); !s.empty()) {
    const std::size_t per = s.find("per");
    const std::string e = per == std::string::npos ? "" : energy_unit(s.substr(0, per));
    const std::string l = per == std::string::npos ? "" : length_unit(s.substr(per + 3));
    if (e.empty() || l.empty()) throw unknown("ForcesStyle");
    if (Units{l, e, ""}.force_factor() != units.force_factor()) {
      throw mismatch("ForcesStyle", e + "/" + l, units.energy + "/" + units.length);
    }
  }
  if (const std::string s = style("AtomTypeStyle"); !s.empty() && s != "chemicalsymbol") {
    throw Error(path + ": AtomTypeStyle '" + s + "' is not supported (expected chemicalsymbol)");
  }
  const std::string s = style("StressStyle");
  if (s.empty()) return units.stress.empty() ? "bar" : units.stress;  // bar is FitSNAP's default
  const std::string stress = stress_unit(s);
  if (stress.empty()) throw unknown("StressStyle");
  if (!units.stress.empty() && Units{"angstrom", "eV", stress}.stress_factor() != units.stress_factor()) {
    throw mismatch("StressStyle", stress, units.stress);
  }
  return stress;
}

std::vector<Structure> read_one_file(const std::string& path, const ReadOptions& options) {
  // Leading '#' lines are comments. Blank them out (keeping the newlines) so that the parser's
  // positions are positions in the file.
  std::string text = read_file(path);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t first = text.find_first_not_of(" \t\r\n", pos);
    if (first == std::string::npos || text[first] != '#') break;
    std::size_t end = text.find('\n', first);
    if (end == std::string::npos) end = text.size();
    std::fill(text.begin() + first, text.begin() + end, ' ');
    pos = end;
  }
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    const std::size_t byte = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    const std::size_t line = static_cast<std::size_t>(std::count(text.begin(), text.begin() + byte, '\n'));
    throw Error(at_line(path, line) + ": invalid JSON (" + e.what() + ")");
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    throw Error(path + ": invalid JSON (" + e.what() + ")");
  }
  if (!root.is_object() || !root.contains("Dataset") || !root["Dataset"].is_object()) {
    throw Error(path + ": no \"Dataset\" object (not a FitSNAP JSON file?)");
  }
  const json& dataset = root["Dataset"];
  if (!dataset.contains("Data") || !dataset["Data"].is_array() || dataset["Data"].empty()) {
    throw Error(path + ": \"Dataset\" has no non-empty \"Data\" array");
  }
  reject_misspelt_keys(dataset, {"Data", "Label", "AtomTypeStyle", "PositionsStyle", "LatticeStyle", "EnergyStyle",
                                 "ForcesStyle", "StressStyle"},
                       path + ": \"Dataset\"");
  const std::string stress_unit = check_styles(dataset, options.units, path);
  const double length = options.units.length_factor();
  const double energy = options.units.energy_factor();
  const double force = options.units.force_factor();
  const double stress = Units{"angstrom", "eV", stress_unit}.stress_factor();

  std::vector<Structure> frames;
  for (std::size_t k = 0; k < dataset["Data"].size(); ++k) {
    const json& c = dataset["Data"][k];
    Structure s;
    s.origin = path + ":frame " + std::to_string(k);
    const std::string& where = s.origin;
    if (!c.is_object()) throw Error(where + ": configuration is not an object");
    reject_misspelt_keys(c, {"AtomTypes", "Positions", "Lattice", "NumAtoms", "Energy", "Forces", "Stress"}, where);
    for (const char* key : {"AtomTypes", "Positions", "Lattice"}) {
      if (!c.contains(key)) throw Error(where + ": missing required field \"" + key + "\"");
    }
    s.positions = rows_of_three(c["Positions"], where, "Positions");
    for (Vec3& x : s.positions) x = {x[0] * length, x[1] * length, x[2] * length};
    const std::size_t n = s.positions.size();
    if (c.contains("NumAtoms")) {
      const json& v = c["NumAtoms"];
      if (!v.is_number_integer()) throw Error(where + ": NumAtoms is not an integer");
      if (v.get<long long>() != static_cast<long long>(n)) {
        throw Error(where + ": NumAtoms is " + v.dump() + " but Positions has " + std::to_string(n) +
                    " rows");
      }
    }
    const json& types = c["AtomTypes"];
    if (!types.is_array() || types.size() != n) {
      throw Error(where + ": AtomTypes has " + std::to_string(types.is_array() ? types.size() : 0) +
                  " entries, Positions has " + std::to_string(n) + " rows");
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!types[i].is_string())
        throw Error(where + ": AtomTypes[" + std::to_string(i) + "] is not a string");
      s.numbers.push_back(element_number(types[i].get<std::string>(), where));
    }
    s.cell.lattice = scaled(matrix(c["Lattice"], where, "Lattice"), length);
    s.cell.pbc = {true, true, true};
    if (c.contains("Energy")) s.energy = number(c["Energy"], where, "Energy") * energy;
    if (c.contains("Forces")) {
      s.forces = rows_of_three(c["Forces"], where, "Forces", n);
      for (Vec3& f : s.forces) f = {f[0] * force, f[1] * force, f[2] * force};
    }
    if (c.contains("Stress")) {
      // FitSNAP's Stress is the pressure tensor -sigma (the LAMMPS pressure / virial-per-volume
      // sign): the compressed Volume_BCC cell with a = 2.2 A has Stress_xx = +3e7 bar, and the
      // thermodynamic pressure -dE/dV of that series has the same sign and size. mlip's virial is
      // also positive under compression, so W = +Stress * V with no sign change (unlike ASE).
      const double volume = s.cell.volume();
      s.virial = scaled(matrix(c["Stress"], where, "Stress"), stress * volume);
    }
    validate_frame(s, "");
    frames.push_back(std::move(s));
  }
  return frames;
}

}  // namespace

std::vector<Structure> read_fitsnap_json(const std::string& path_or_dir, const ReadOptions& options) {
  if (!fs::is_directory(path_or_dir)) return read_one_file(path_or_dir, options);
  const std::vector<fs::path> files = list_dir(path_or_dir, true, [](const fs::directory_entry& e) {
    return e.is_regular_file() && e.path().extension() == ".json";
  });
  if (files.empty()) throw Error(path_or_dir + ": no *.json files in this directory or below it");
  std::vector<Structure> frames;
  for (const fs::path& file : files) {
    std::vector<Structure> part = read_one_file(file.string(), options);
    frames.insert(frames.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return frames;
}

}  // namespace mlip
