// LAMMPS text dumps (dump custom / dump atom): the frames of an MD run, e.g. to pick the ones
// a committee disagrees on for labelling.
#include <algorithm>
#include <cmath>
#include <map>

#include "io_detail.h"
#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {

using namespace io_detail;

namespace {

// Reads one frame starting at lines[k] ("ITEM: TIMESTEP"); advances k past it.
class DumpFrameReader {
 public:
  DumpFrameReader(const std::string& path, const std::vector<std::string_view>& lines, const ReadOptions& options)
      : path_(path), lines_(lines), options_(options) {}

  Structure read(std::size_t& k, int frame) {
    expect(k, "ITEM: TIMESTEP");
    k += 2;
    expect(k, "ITEM: NUMBER OF ATOMS");
    const long long n = parse_integer(line(k + 1), at_line(path_, k + 1), "number of atoms");
    if (n < 1) throw Error(at_line(path_, k + 1) + ": the number of atoms must be positive");
    k += 2;
    Structure s;
    read_box(k, s);
    read_atoms(k, static_cast<std::size_t>(n), s);
    s.origin = path_ + ":frame " + std::to_string(frame);
    validate_frame(s, " (" + at_line(path_, k) + ")");
    return s;
  }

 private:
  std::string_view line(std::size_t k) const {
    if (k >= lines_.size()) throw Error(path_ + ": the file ends inside a frame (after line " + std::to_string(k) + ")");
    return lines_[k];
  }

  void expect(std::size_t k, std::string_view item) const {
    if (line(k).rfind(item, 0) != 0)
      throw Error(at_line(path_, k) + ": expected '" + std::string(item) + "', found '" + std::string(line(k)) + "'");
  }

  // ITEM: BOX BOUNDS [xy xz yz] xx yy zz, then 3 lines of bounds (and tilts): LAMMPS's bounding
  // box of a triclinic cell back to its lattice vectors (the dump command's documentation).
  void read_box(std::size_t& k, Structure& s) {
    expect(k, "ITEM: BOX BOUNDS");
    const auto words = split_words(line(k));
    const bool triclinic = words.size() >= 6 && words[3] == "xy";
    const std::size_t flags = triclinic ? 6 : 3;
    if (words.size() != flags + 3) throw Error(at_line(path_, k) + ": expected three boundary flags (e.g. pp pp pp)");
    for (int d = 0; d < 3; ++d) s.cell.pbc[d] = words[flags + d] == "pp";
    double b[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    for (int d = 0; d < 3; ++d) {
      const auto v = split_words(line(k + 1 + d));
      if (v.size() != (triclinic ? 3u : 2u))
        throw Error(at_line(path_, k + 1 + d) + ": expected " + (triclinic ? "3" : "2") + " numbers (bounds" +
                    (triclinic ? " and a tilt)" : ")"));
      for (std::size_t c = 0; c < v.size(); ++c) b[d][c] = parse_number(v[c], at_line(path_, k + 1 + d), "box bound");
    }
    const double xy = b[0][2], xz = b[1][2], yz = b[2][2];
    const double xlo = b[0][0] - std::min({0.0, xy, xz, xy + xz}), xhi = b[0][1] - std::max({0.0, xy, xz, xy + xz});
    const double ylo = b[1][0] - std::min(0.0, yz), yhi = b[1][1] - std::max(0.0, yz);
    const double f = options_.units.length_factor();
    s.cell.lattice = {{{(xhi - xlo) * f, 0, 0}, {xy * f, (yhi - ylo) * f, 0}, {xz * f, yz * f, (b[2][1] - b[2][0]) * f}}};
    origin_ = {xlo, ylo, b[2][0]};
    k += 4;
  }

  void read_atoms(std::size_t& k, std::size_t n, Structure& s) {
    expect(k, "ITEM: ATOMS");
    const auto names = split_words(line(k).substr(std::string_view("ITEM: ATOMS").size()));
    std::map<std::string_view, std::size_t> column;
    for (std::size_t c = 0; c < names.size(); ++c) column[names[c]] = c;
    const char* const position_sets[3][3] = {{"x", "y", "z"}, {"xu", "yu", "zu"}, {"xs", "ys", "zs"}};
    int set = -1;
    for (int p = 0; p < 3 && set < 0; ++p)
      if (column.count(position_sets[p][0]) && column.count(position_sets[p][1]) && column.count(position_sets[p][2])) set = p;
    if (set < 0) throw Error(at_line(path_, k) + ": the atoms need positions (x y z, xu yu zu or xs ys zs)");
    const bool by_element = column.count("element") > 0;
    if (!by_element && (!column.count("type") || options_.type_elements.empty()))
      throw Error(at_line(path_, k) + ": the atoms have " + (column.count("type") ? "types" : "neither types") +
                  " but no elements: give the element of each type (--types El1 El2 ...) or dump the element column "
                  "(dump_modify element)");
    const double f = options_.units.length_factor();
    for (std::size_t a = 0; a < n; ++a) {
      const std::size_t at = k + 1 + a;
      const auto v = split_words(line(at));
      if (v.size() != names.size())
        throw Error(at_line(path_, at) + ": " + std::to_string(v.size()) + " columns, the ATOMS line names " +
                    std::to_string(names.size()));
      Vec3 x{};
      for (int d = 0; d < 3; ++d) x[d] = parse_number(v[column[position_sets[set][d]]], at_line(path_, at), "position");
      if (set == 2) {    // scaled: fractions of the lattice vectors
        const Vec3 u = x;
        for (int d = 0; d < 3; ++d)
          x[d] = (u[0] * s.cell.lattice[0][d] + u[1] * s.cell.lattice[1][d] + u[2] * s.cell.lattice[2][d]) / f;
      } else {
        for (int d = 0; d < 3; ++d) x[d] -= origin_[d];
      }
      s.positions.push_back({x[0] * f, x[1] * f, x[2] * f});
      s.numbers.push_back(by_element ? element_number(v[column["element"]], at_line(path_, at)) : type_number(v, column["type"], at));
    }
    k += 1 + n;
  }

  int type_number(const std::vector<std::string_view>& v, std::size_t col, std::size_t at) const {
    const long long t = parse_integer(v[col], at_line(path_, at), "atom type");
    if (t < 1 || t > static_cast<long long>(options_.type_elements.size()))
      throw Error(at_line(path_, at) + ": atom type " + std::to_string(t) + " has no element (--types gives " +
                  std::to_string(options_.type_elements.size()) + ")");
    return element_number(options_.type_elements[static_cast<std::size_t>(t - 1)], path_ + ": --types");
  }

  const std::string& path_;
  const std::vector<std::string_view>& lines_;
  const ReadOptions& options_;
  Vec3 origin_{};
};

}  // namespace

std::vector<Structure> read_lammps_dump(const std::string& path, const ReadOptions& options) {
  const std::string text = read_file(path);
  const std::vector<std::string_view> lines = split_lines(text);
  DumpFrameReader reader(path, lines, options);
  std::vector<Structure> frames;
  std::size_t k = 0;
  while (k < lines.size()) {
    if (split_words(lines[k]).empty()) {
      ++k;
      continue;
    }
    frames.push_back(reader.read(k, static_cast<int>(frames.size())));
  }
  if (frames.empty()) throw Error(path + ": no frame (a LAMMPS dump starts with 'ITEM: TIMESTEP')");
  return frames;
}

}  // namespace mlip
