// Extended XYZ, read and written the way ASE (ase.io.extxyz) does.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>

#include "io_detail.h"
#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
namespace {

using namespace io_detail;

// The comment line as key -> value. Values may be bare, "quoted", 'quoted', {braced} or
// [bracketed]; a backslash escapes the next character; a key without '=' gets the value "T".
std::map<std::string, std::string> parse_comment_line(std::string_view line, const std::string& where) {
  std::map<std::string, std::string> pairs;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  const auto skip_space = [&] {
    while (i < line.size() && space(line[i])) ++i;
  };
  // One word: runs of plain characters and delimited parts, up to unquoted whitespace or '='.
  const auto read_word = [&](bool stop_at_equals) {
    std::string word;
    while (i < line.size() && !space(line[i]) && !(stop_at_equals && line[i] == '=')) {
      const char c = line[i++];
      char close = 0;
      if (c == '"' || c == '\'') close = c;
      if (c == '{') close = '}';
      if (c == '[') close = ']';
      if (close == 0) {
        if (c == '\\' && i < line.size())
          word += line[i++];
        else
          word += c;
        continue;
      }
      while (i < line.size() && line[i] != close) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        word += line[i++];
      }
      if (i == line.size())
        throw Error(where + ": unterminated " + std::string(1, c) + " in the comment line");
      ++i;  // the closing delimiter
    }
    return word;
  };
  while (true) {
    skip_space();
    if (i == line.size()) break;
    if (line[i] == '=') throw Error(where + ": '=' without a key in the comment line");
    std::string key = read_word(true);
    skip_space();
    if (i < line.size() && line[i] == '=') {
      ++i;
      skip_space();
      pairs[key] = read_word(false);
    } else {
      pairs[key] = "T";
    }
  }
  return pairs;
}

// Values of a comment-line entry, split at whitespace and commas as ASE does.
std::vector<std::string_view> split_values(std::string_view value) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  const auto sep = [](char c) { return c == ' ' || c == '\t' || c == ','; };
  while (i < value.size()) {
    while (i < value.size() && sep(value[i])) ++i;
    const std::size_t start = i;
    while (i < value.size() && !sep(value[i])) ++i;
    if (i > start) out.push_back(value.substr(start, i - start));
  }
  return out;
}

std::vector<double> parse_numbers(const std::string& value, const std::string& where, const std::string& key,
                                  std::initializer_list<std::size_t> allowed_counts) {
  std::vector<double> out;
  for (std::string_view v : split_values(value)) out.push_back(parse_number(v, where, key));
  for (std::size_t n : allowed_counts) {
    if (out.size() == n) return out;
  }
  std::string expected;
  for (std::size_t n : allowed_counts) expected += (expected.empty() ? "" : " or ") + std::to_string(n);
  throw Error(where + ": " + key + " has " + std::to_string(out.size()) + " values, expected " + expected);
}

// A 3x3 matrix flattened in Fortran order (column by column), as ASE writes virial and stress.
Mat3 from_fortran_order(const std::vector<double>& v) {
  Mat3 m{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[i][j] = v[3 * j + i];
  }
  return m;
}

bool parse_bool(std::string_view v, const std::string& where, const std::string& key) {
  if (v == "T" || v == "True" || v == "true") return true;
  if (v == "F" || v == "False" || v == "false") return false;
  throw Error(where + ": " + key + " value '" + std::string(v) + "' is not T or F");
}

// Where each column we need starts in an atom line, from Properties=name:type:count:...
struct Layout {
  int species = -1;  // S:1 element symbol
  int z = -1;        // I:1 atomic number
  int pos = -1;      // R:3
  int forces = -1;   // R:3
  int width = 0;     // total number of columns
};

Layout parse_properties(const std::string& value, const std::string& where) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t colon = value.find(':', start);
    parts.push_back(value.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() % 3 != 0) {
    throw Error(where + ": Properties '" + value + "' is not a list of name:type:count triples");
  }
  Layout layout;
  for (std::size_t p = 0; p < parts.size(); p += 3) {
    const std::string& name = parts[p];
    const std::string& type = parts[p + 1];
    if (type != "S" && type != "R" && type != "I" && type != "L") {
      throw Error(where + ": Properties column '" + name + "' has unknown type '" + type +
                  "' (S, R, I or L)");
    }
    const long long count = parse_integer(parts[p + 2], where, "Properties count of '" + name + "'");
    if (count < 1) throw Error(where + ": Properties column '" + name + "' has count " + parts[p + 2]);
    const auto claim = [&](int& slot, const std::string& want_type, int want_count) {
      if (type != want_type || count != want_count) {
        throw Error(where + ": Properties column '" + name + "' must be " + name + ":" + want_type + ":" +
                    std::to_string(want_count) + ", got " + name + ":" + type + ":" + parts[p + 2]);
      }
      if (slot >= 0) throw Error(where + ": Properties has more than one '" + name + "' column");
      slot = layout.width;
    };
    if (name == "species")
      claim(layout.species, "S", 1);
    else if (name == "Z")
      claim(layout.z, "I", 1);
    else if (name == "pos")
      claim(layout.pos, "R", 3);
    else if (name == "forces" || name == "force")
      claim(layout.forces, "R", 3);
    layout.width += static_cast<int>(count);
  }
  if (layout.pos < 0) throw Error(where + ": Properties '" + value + "' has no pos column");
  if (layout.species < 0 && layout.z < 0) {
    throw Error(where + ": Properties '" + value + "' has neither a species nor a Z column");
  }
  return layout;
}

// Shortest text that reads back as exactly `x`.
std::string exact(double x) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), x);
  return std::string(buffer, end);
}


// Frame `frame` of `path`, from lines[ln] (its atom-count line; line numbers in messages are
// first_line + the index into `lines`); ln ends after its last atom line.
Structure parse_frame(const std::vector<std::string_view>& lines, std::size_t& ln, std::size_t frame,
                      const std::string& path, std::size_t first_line, const ReadOptions& options) {
  const double length = options.units.length_factor();
  const double energy = options.units.energy_factor();
  const double force = options.units.force_factor();
  const double stress = options.units.stress_factor();
  const auto at_line = [&](const std::string& p, std::size_t i) { return io_detail::at_line(p, first_line + i); };
  {
    const std::string tag = " (frame " + std::to_string(frame) + ")";
    const std::size_t header_line = ln;

    // Line 1: the atom count.
    const std::vector<std::string_view> count_words = split_words(lines[ln]);
    long long n_atoms = 0;
    if (count_words.size() != 1 || !try_parse_integer(count_words[0], n_atoms)) {
      std::string message =
          at_line(path, ln) + tag + ": expected the number of atoms, got '" + std::string(lines[ln]) + "'";
      if (frame > 0) message += " (does the atom count of the previous frame match its atom lines?)";
      throw Error(message);
    }
    if (n_atoms < 1)
      throw Error(at_line(path, ln) + tag + ": atom count must be positive, got " + std::to_string(n_atoms));
    if (++ln == lines.size()) throw Error(at_line(path, ln) + tag + ": file ends before the comment line");

    // Line 2: key=value pairs.
    const std::string comment_where = at_line(path, ln) + tag;
    std::map<std::string, std::string> info = parse_comment_line(lines[ln], comment_where);
    const auto has = [&](const char* key) { return info.count(key) > 0; };
    ++ln;

    Structure s;
    s.origin = path + ":frame " + std::to_string(frame);
    if (has("Lattice")) {
      const std::vector<double> v = parse_numbers(info["Lattice"], comment_where, "Lattice", {9});
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 3; ++c) s.cell.lattice[r][c] = v[3 * r + c] * length;
      }
      s.cell.pbc = {true, true, true};
    }
    if (has("pbc")) {
      const std::vector<std::string_view> v = split_values(info["pbc"]);
      if (v.size() != 1 && v.size() != 3) {
        throw Error(comment_where + ": pbc has " + std::to_string(v.size()) + " values, expected 3");
      }
      for (int d = 0; d < 3; ++d) {  // a single value (pbc=T) applies to all directions, as in ASE
        s.cell.pbc[d] = parse_bool(v[v.size() == 1 ? 0 : d], comment_where, "pbc");
      }
      if (s.cell.any_periodic() && !has("Lattice")) {
        throw Error(comment_where + ": pbc is set but there is no Lattice");
      }
    }
    if (has("energy")) s.energy = parse_numbers(info["energy"], comment_where, "energy", {1})[0] * energy;
    if (has("weight")) s.weight = parse_numbers(info["weight"], comment_where, "weight", {1})[0];
    if (has("virial")) {
      s.virial =
          scaled(from_fortran_order(parse_numbers(info["virial"], comment_where, "virial", {9})), energy);
    }
    if (has("stress")) {
      const std::vector<double> v = parse_numbers(info["stress"], comment_where, "stress", {9, 6});
      Mat3 sigma = v.size() == 9 ? from_fortran_order(v)
                                 : Mat3{{{v[0], v[5], v[4]}, {v[5], v[1], v[3]}, {v[4], v[3], v[2]}}};
      const double volume = s.cell.volume();
      if (!(volume > 0.0)) throw Error(comment_where + ": stress is given but the cell has no volume");
      // ASE's stress is positive under tension; the virial is positive under compression.
      const Mat3 w = scaled(sigma, -stress * volume);
      if (s.virial) {
        double scale = 0.0, diff = 0.0;
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) {
            scale = std::max(scale, std::abs(w[a][b]));
            diff = std::max(diff, std::abs(w[a][b] - (*s.virial)[a][b]));
          }
        }
        if (diff > 1e-6 * scale + 1e-12) {
          throw Error(comment_where + ": virial and stress are both given and disagree (largest difference " +
                      std::to_string(diff) + " eV after virial = -stress * volume)");
        }
      } else {
        s.virial = w;
      }
    }
    const Layout layout =
        parse_properties(has("Properties") ? info["Properties"] : "species:S:1:pos:R:3", comment_where);

    // n_atoms atom lines.
    for (long long i = 0; i < n_atoms; ++i, ++ln) {
      if (ln == lines.size()) {
        throw Error(at_line(path, ln) + tag + ": file ends after " + std::to_string(i) + " of " +
                    std::to_string(n_atoms) + " atom lines (truncated file, or a wrong atom count on line " +
                    std::to_string(first_line + header_line + 1) + "?)");
      }
      const std::string where = at_line(path, ln) + tag;
      const std::vector<std::string_view> w = split_words(lines[ln]);
      if (static_cast<int>(w.size()) != layout.width) {
        throw Error(where + ": atom line has " + std::to_string(w.size()) + " columns, Properties declares " +
                    std::to_string(layout.width) + " (does the atom count on line " +
                    std::to_string(first_line + header_line + 1) + " match the atom lines?)");
      }
      if (layout.species >= 0) {
        s.numbers.push_back(element_number(w[layout.species], where));
      } else {
        const long long z = parse_integer(w[layout.z], where, "Z");
        if (z < 1 || z > kMaxAtomicNumber)
          throw Error(where + ": unknown element (Z = " + std::to_string(z) + ")");
        s.numbers.push_back(static_cast<int>(z));
      }
      Vec3 x{};
      for (int d = 0; d < 3; ++d) x[d] = parse_number(w[layout.pos + d], where, "position") * length;
      s.positions.push_back(x);
      if (layout.forces >= 0) {
        Vec3 f{};
        for (int d = 0; d < 3; ++d) f[d] = parse_number(w[layout.forces + d], where, "force") * force;
        s.forces.push_back(f);
      }
    }
    validate_frame(s, " (frame starts at line " + std::to_string(first_line + header_line + 1) + ")");
    return s;
  }
}

}  // namespace

std::vector<Structure> read_extxyz(const std::string& path, const ReadOptions& options) {
  const std::string text = read_file(path);
  const std::vector<std::string_view> lines = split_lines(text);
  std::vector<Structure> frames;
  std::size_t ln = 0;
  while (true) {
    while (ln < lines.size() && split_words(lines[ln]).empty()) ++ln;  // blank lines between frames
    if (ln == lines.size()) break;
    frames.push_back(parse_frame(lines, ln, frames.size(), path, 0, options));
  }
  if (frames.empty()) throw Error(path + ": no frames");
  return frames;
}

// ---- frame by frame: an offset index ---------------------------------------------------------

ExtxyzFile::ExtxyzFile(const std::string& path, const ReadOptions& options) : path_(path), options_(options) {
  // One pass over the file in blocks: only each frame's atom-count line is parsed.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  constexpr std::size_t kBlock = 1 << 24;
  std::string carry, block(kBlock, '\0');
  uint64_t offset = 0;          // of carry's first byte in the file
  std::size_t line = 0;         // line index of carry's first line
  long long skip = 0;           // lines of the current frame still to pass
  auto scan = [&](bool last) {
    std::size_t at = 0;
    while (true) {
      const std::size_t end = carry.find('\n', at);
      if (end == std::string::npos && !last) break;
      const std::size_t stop = end == std::string::npos ? carry.size() : end;
      if (stop == at && end == std::string::npos) break;
      const std::string_view text(carry.data() + at, stop - at);
      if (skip > 0) {
        --skip;
      } else if (!split_words(text).empty()) {
        const std::vector<std::string_view> w = split_words(text);
        long long n = 0;
        if (w.size() != 1 || !try_parse_integer(w[0], n) || n < 1) {
          throw Error(io_detail::at_line(path, line) + " (frame " + std::to_string(offsets_.size()) +
                      "): expected the number of atoms, got '" + std::string(text) + "'" +
                      (offsets_.empty() ? "" : " (does the atom count of the previous frame match its atom lines?)"));
        }
        offsets_.push_back(offset + at);
        lines_.push_back(line);
        skip = n + 1;
      }
      ++line;
      if (end == std::string::npos) {
        at = carry.size();
        break;
      }
      at = end + 1;
    }
    offset += at;
    carry.erase(0, at);
  };
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(kBlock));
    carry.append(block.data(), static_cast<std::size_t>(in.gcount()));
    scan(false);
  }
  scan(true);
  if (skip > 0) {
    throw Error(io_detail::at_line(path, line) + " (frame " + std::to_string(offsets_.size() - 1) +
                "): the file ends inside the frame (truncated file, or a wrong atom count on line " +
                std::to_string(lines_.back() + 1) + "?)");
  }
  if (offsets_.empty()) throw Error(path + ": no frames");
  offsets_.push_back(offset);
}

Structure ExtxyzFile::frame(std::size_t i) const {
  if (i + 1 >= offsets_.size()) throw Error(path_ + ": no frame " + std::to_string(i));
  std::ifstream in(path_, std::ios::binary);
  std::string text(offsets_[i + 1] - offsets_[i], '\0');
  in.seekg(static_cast<std::streamoff>(offsets_[i]));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.gcount() != static_cast<std::streamsize>(text.size()))
    throw Error(path_ + " (frame " + std::to_string(i) + "): the file changed since it was indexed");
  const std::vector<std::string_view> lines = split_lines(text);
  std::size_t ln = 0;
  return parse_frame(lines, ln, i, path_, lines_[i], options_);
}

namespace {

// One frame as extended XYZ text (see write_extxyz).
std::string extxyz_text(const Structure& s) {
  std::string out = std::to_string(s.size()) + "\n";
  bool has_lattice = false;
  for (const Vec3& row : s.cell.lattice) has_lattice = has_lattice || row != Vec3{0, 0, 0};
  if (has_lattice) {
    out += "Lattice=\"";
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) out += (r + c ? " " : "") + exact(s.cell.lattice[r][c]);
    }
    out += "\" ";
  }
  out += "Properties=species:S:1:pos:R:3";
  if (s.has_forces()) out += ":forces:R:3";
  if (s.energy) out += " energy=" + exact(*s.energy);
  if (s.virial) {
    out += " virial=\"";
    for (int c = 0; c < 3; ++c) {  // Fortran order, as ASE writes 3x3 values
      for (int r = 0; r < 3; ++r) out += (r + c ? " " : "") + exact((*s.virial)[r][c]);
    }
    out += "\"";
  }
  if (s.weight != 1.0) out += " weight=" + exact(s.weight);
  out += std::string(" pbc=\"") + (s.cell.pbc[0] ? "T" : "F") + (s.cell.pbc[1] ? " T" : " F") +
         (s.cell.pbc[2] ? " T" : " F") + "\"\n";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += element_symbol(s.numbers[i]);
    for (double x : s.positions[i]) out += " " + exact(x);
    if (s.has_forces()) {
      for (double f : s.forces[i]) out += " " + exact(f);
    }
    out += "\n";
  }
  return out;
}

}  // namespace

ExtxyzWriter::ExtxyzWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp"), file_(std::make_unique<std::ofstream>(tmp_, std::ios::binary | std::ios::trunc)) {
  if (!*file_) throw Error("write_extxyz: cannot create " + tmp_);
}

ExtxyzWriter::~ExtxyzWriter() {
  if (file_->is_open()) {
    file_->close();
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void ExtxyzWriter::add(const Structure& s) {
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error("write_extxyz " + path_ + ": frame " + std::to_string(frames_) + ": " + e.what());
  }
  const std::string text = extxyz_text(s);
  file_->write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!*file_) throw Error("write_extxyz: writing " + tmp_ + " failed");
  ++frames_;
}

void ExtxyzWriter::finish() {
  file_->close();
  std::error_code ec;
  if (!*file_) {
    std::filesystem::remove(tmp_, ec);
    throw Error("write_extxyz: writing " + tmp_ + " failed");
  }
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp_);
    throw Error("write_extxyz: cannot rename " + tmp_ + " to " + path_ + ": " + ec.message());
  }
}

void write_extxyz(const std::string& path, const std::vector<Structure>& frames) {
  // add() validates each frame; an invalid one leaves `path` as it was (the .tmp is removed).
  ExtxyzWriter out(path);
  for (const Structure& s : frames) out.add(s);
  out.finish();
}

}  // namespace mlip
