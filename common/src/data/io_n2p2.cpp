// n2p2/RuNNer input.data.
#include "io_detail.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
using namespace io_detail;

std::vector<Structure> read_n2p2(const std::string& path, const ReadOptions& options) {
  const double length = options.units.length_factor();
  const double energy = options.units.energy_factor();
  const double force = options.units.force_factor();

  const std::string text = read_file(path);
  const std::vector<std::string_view> lines = split_lines(text);
  std::vector<Structure> frames;

  // The frame being read: open from its `begin` line to its `end` line.
  bool in_frame = false;
  std::size_t begin_line = 0;
  Structure s;
  int n_lattice = 0;
  std::string tag;

  for (std::size_t ln = 0; ln < lines.size(); ++ln) {
    const std::vector<std::string_view> w = split_words(lines[ln]);
    if (w.empty()) continue;
    const std::string where = at_line(path, ln) + tag;
    const std::string_view key = w[0];
    const auto expect_words = [&](std::size_t count) {
      if (w.size() != count) {
        throw Error(where + ": '" + std::string(key) + "' line has " + std::to_string(w.size() - 1) +
                    " values, expected " + std::to_string(count - 1));
      }
    };
    if (!in_frame) {
      if (key != "begin") throw Error(where + ": expected 'begin', got '" + std::string(key) + "'");
      in_frame = true;
      begin_line = ln;
      s = Structure{};
      s.origin = path + ":frame " + std::to_string(frames.size());
      n_lattice = 0;
      tag = " (frame " + std::to_string(frames.size()) + ")";
    } else if (key == "begin") {
      throw Error(where + ": 'begin' inside the frame that starts at line " + std::to_string(begin_line + 1) +
                  " (missing 'end'?)");
    } else if (key == "comment") {
      // free text
    } else if (key == "lattice") {
      expect_words(4);
      if (n_lattice == 3) throw Error(where + ": more than 3 lattice lines");
      for (int d = 0; d < 3; ++d)
        s.cell.lattice[n_lattice][d] = parse_number(w[1 + d], where, "lattice") * length;
      ++n_lattice;
    } else if (key == "atom") {
      // atom x y z element charge atomic_energy fx fy fz
      expect_words(10);
      Vec3 x{}, f{};
      for (int d = 0; d < 3; ++d) x[d] = parse_number(w[1 + d], where, "position") * length;
      s.numbers.push_back(element_number(w[4], where));
      parse_number(w[5], where, "atomic charge");
      parse_number(w[6], where, "atomic energy");
      for (int d = 0; d < 3; ++d) f[d] = parse_number(w[7 + d], where, "force") * force;
      s.positions.push_back(x);
      s.forces.push_back(f);
    } else if (key == "energy") {
      expect_words(2);
      if (s.energy) throw Error(where + ": second 'energy' line in one frame");
      s.energy = parse_number(w[1], where, "energy") * energy;
    } else if (key == "charge") {
      expect_words(2);
      parse_number(w[1], where, "total charge");
    } else if (key == "end") {
      if (n_lattice != 0 && n_lattice != 3) {
        throw Error(where + ": frame has " + std::to_string(n_lattice) + " lattice lines, expected 0 or 3");
      }
      if (s.positions.empty()) throw Error(where + ": frame has no atom lines");
      if (!s.energy) throw Error(where + ": frame has no 'energy' line");
      s.cell.pbc = {n_lattice == 3, n_lattice == 3, n_lattice == 3};
      validate_frame(s, " (frame starts at line " + std::to_string(begin_line + 1) + ")");
      frames.push_back(std::move(s));
      in_frame = false;
      tag.clear();
    } else {
      throw Error(where + ": unknown keyword '" + std::string(key) + "'");
    }
  }
  if (in_frame) {
    throw Error(at_line(path, begin_line) + tag +
                ": the frame that starts here has no 'end' (truncated file?)");
  }
  if (frames.empty()) throw Error(path + ": no frames");
  return frames;
}

}  // namespace mlip
