// DeePMD npy systems and the .npy reader they need.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>

#include "io_detail.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
namespace fs = std::filesystem;
using namespace io_detail;

namespace {

// The value of `key` in the header dict: from after "'key':" to the end of the header.
std::string_view header_field(std::string_view header, const std::string& key, const std::string& path) {
  std::size_t at = header.find("'" + key + "'");
  if (at == std::string_view::npos) at = header.find("\"" + key + "\"");
  if (at == std::string_view::npos)
    throw Error(path + ": .npy header has no '" + key + "': " + std::string(header));
  const std::size_t colon = header.find(':', at + key.size() + 2);
  if (colon == std::string_view::npos) throw Error(path + ": malformed .npy header: " + std::string(header));
  std::string_view rest = header.substr(colon + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return rest;
}

// Little-endian bytes to an unsigned integer, independent of the host's byte order.
std::uint64_t little_endian(const unsigned char* p, int n_bytes) {
  std::uint64_t v = 0;
  for (int b = n_bytes - 1; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

}  // namespace

std::string NpyArray::shape_string() const {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NpyArray read_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    throw Error(path + ": not a .npy file (bad magic string)");
  }
  const int major = u[6];
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = little_endian(u + 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(path + ": truncated .npy header");
    header_len = little_endian(u + 8, 4);
    header_start = 12;
  } else {
    throw Error(path + ": unsupported .npy format version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) throw Error(path + ": truncated .npy header");
  const std::string_view header(bytes.data() + header_start, header_len);

  NpyArray array;
  std::string_view descr = header_field(header, "descr", path);
  if (descr.empty() || (descr[0] != '\'' && descr[0] != '"')) {
    throw Error(path + ": .npy descr is not a simple dtype string: " + std::string(header));
  }
  const std::size_t close = descr.find(descr[0], 1);
  if (close == std::string_view::npos) throw Error(path + ": malformed .npy header: " + std::string(header));
  array.dtype = std::string(descr.substr(1, close - 1));
  if (!array.dtype.empty() && array.dtype[0] == '>') {
    throw Error(path + ": big-endian dtype '" + array.dtype +
                "' is not supported (save it as little-endian, e.g. "
                "arr.astype('<f8'))");
  }
  if (array.dtype != "<f4" && array.dtype != "<f8" && array.dtype != "<i4" && array.dtype != "<i8") {
    throw Error(path + ": unsupported dtype '" + array.dtype + "' (expected <f4, <f8, <i4 or <i8)");
  }
  const std::string_view fortran = header_field(header, "fortran_order", path);
  if (fortran.rfind("True", 0) == 0) {
    throw Error(path + ": Fortran-ordered arrays are not supported (save it with np.ascontiguousarray)");
  }
  if (fortran.rfind("False", 0) != 0) throw Error(path + ": malformed .npy header: " + std::string(header));

  std::string_view shape = header_field(header, "shape", path);
  const std::size_t open = shape.find('('), end = shape.find(')');
  if (open != 0 || end == std::string_view::npos) {
    throw Error(path + ": malformed .npy shape in header: " + std::string(header));
  }
  shape = shape.substr(1, end - 1);
  std::size_t count = 1;
  std::size_t start = 0;
  while (start <= shape.size()) {
    std::size_t comma = shape.find(',', start);
    if (comma == std::string_view::npos) comma = shape.size();
    std::string_view dim = shape.substr(start, comma - start);
    while (!dim.empty() && dim.front() == ' ') dim.remove_prefix(1);
    while (!dim.empty() && dim.back() == ' ') dim.remove_suffix(1);
    if (!dim.empty()) {
      long long n = 0;
      if (!try_parse_integer(dim, n) || n < 0) {
        throw Error(path + ": malformed .npy shape in header: " + std::string(header));
      }
      array.shape.push_back(static_cast<std::size_t>(n));
      count *= static_cast<std::size_t>(n);
    }
    start = comma + 1;
  }

  const int item = array.dtype[2] - '0';  // 4 or 8 bytes
  const std::size_t data_start = header_start + header_len;
  const std::size_t available = bytes.size() - data_start;
  if (available < count * item) {
    throw Error(path + ": truncated .npy data: shape " + array.shape_string() + " of " + array.dtype +
                " needs " + std::to_string(count * item) + " bytes, the file has " +
                std::to_string(available));
  }
  if (available > count * item) {
    throw Error(path + ": .npy header declares shape " + array.shape_string() + " of " + array.dtype + " (" +
                std::to_string(count * item) + " bytes) but the file holds " + std::to_string(available) +
                " bytes of data");
  }
  array.data.resize(count);
  const unsigned char* p = u + data_start;
  for (std::size_t k = 0; k < count; ++k, p += item) {
    const std::uint64_t bits = little_endian(p, item);
    if (array.dtype == "<f8") {
      double d;
      std::memcpy(&d, &bits, 8);
      array.data[k] = d;
    } else if (array.dtype == "<f4") {
      const auto b32 = static_cast<std::uint32_t>(bits);
      float f;
      std::memcpy(&f, &b32, 4);
      array.data[k] = f;
    } else if (array.dtype == "<i8") {
      array.data[k] = static_cast<double>(static_cast<std::int64_t>(bits));
    } else {
      array.data[k] = static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    }
  }
  return array;
}

namespace {

// The whitespace-separated words of a small text file, with their line indices.
struct Words {
  std::vector<std::string> words;
  std::vector<std::size_t> lines;
};

Words read_words(const std::string& path) {
  const std::string text = read_file(path);
  const std::vector<std::string_view> lines = split_lines(text);
  Words out;
  for (std::size_t ln = 0; ln < lines.size(); ++ln) {
    for (std::string_view w : split_words(lines[ln])) {
      out.words.emplace_back(w);
      out.lines.push_back(ln);
    }
  }
  return out;
}

// An array of a set folder, checked to have `rows` rows (when known) and `cols` columns (0 = 1-D
// or (rows, 1)). `rows_from` names the file that fixed the row count.
std::optional<NpyArray> load_set_array(const fs::path& file, bool required, std::optional<std::size_t>& rows,
                                       std::string& rows_from, std::size_t cols,
                                       const std::string& cols_meaning) {
  if (!fs::exists(file)) {
    if (required) throw Error(file.string() + ": missing (required in a DeePMD set)");
    return std::nullopt;
  }
  NpyArray a = read_npy(file.string());
  const bool ok = cols == 0 ? (a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[1] == 1))
                            : (a.shape.size() == 2 && a.shape[1] == cols);
  if (!ok) {
    const std::string want = cols == 0 ? "(nframes,)" : "(nframes, " + std::to_string(cols) + ")";
    throw Error(file.string() + ": shape " + a.shape_string() + ", expected " + want +
                (cols_meaning.empty() ? "" : " for " + cols_meaning));
  }
  if (rows && a.shape[0] != *rows) {
    throw Error(file.string() + ": shape " + a.shape_string() + " has " + std::to_string(a.shape[0]) +
                " frames, but " + rows_from + " has " + std::to_string(*rows));
  }
  if (!rows) {
    rows = a.shape[0];
    rows_from = file.string();
  }
  return a;
}

}  // namespace

std::vector<Structure> read_deepmd(const std::string& system_dir, const ReadOptions& options) {
  const double length = options.units.length_factor();
  const double energy = options.units.energy_factor();
  const double force = options.units.force_factor();
  const fs::path dir(system_dir);
  if (!fs::is_directory(dir)) throw Error(system_dir + ": not a directory (a DeePMD system is a folder)");

  // Atom types and their elements.
  const fs::path type_file = dir / "type.raw", map_file = dir / "type_map.raw";
  if (!fs::exists(type_file)) throw Error(type_file.string() + ": missing (not a DeePMD system?)");
  if (!fs::exists(map_file)) {
    throw Error(map_file.string() + ": missing; without it the atom types cannot be mapped to elements");
  }
  const Words map_words = read_words(map_file.string());
  std::vector<int> type_numbers;
  for (std::size_t t = 0; t < map_words.words.size(); ++t) {
    type_numbers.push_back(
        element_number(map_words.words[t], at_line(map_file.string(), map_words.lines[t])));
  }
  const Words type_words = read_words(type_file.string());
  std::vector<int> numbers;
  for (std::size_t i = 0; i < type_words.words.size(); ++i) {
    const std::string where = at_line(type_file.string(), type_words.lines[i]);
    const long long t = parse_integer(type_words.words[i], where, "atom type");
    if (t < 0 || t >= static_cast<long long>(type_numbers.size())) {
      throw Error(where + ": atom type " + std::to_string(t) + " is not in type_map.raw (" +
                  std::to_string(type_numbers.size()) + " types)");
    }
    numbers.push_back(type_numbers[t]);
  }
  if (numbers.empty()) throw Error(type_file.string() + ": no atoms");
  const std::size_t n = numbers.size();
  const bool periodic = !fs::exists(dir / "nopbc");

  const std::vector<fs::path> sets = list_dir(system_dir, false, [](const fs::directory_entry& e) {
    return e.is_directory() && e.path().filename().string().rfind("set.", 0) == 0;
  });
  if (sets.empty()) throw Error(system_dir + ": no set.* folders");

  std::vector<Structure> frames;
  const std::string atoms = std::to_string(n) + " atoms in type.raw";
  for (const fs::path& set : sets) {
    std::optional<std::size_t> rows;
    std::string rows_from;
    const auto coord = load_set_array(set / "coord.npy", true, rows, rows_from, 3 * n, atoms);
    const auto box = load_set_array(set / "box.npy", periodic, rows, rows_from, 9, "");
    const auto e = load_set_array(set / "energy.npy", false, rows, rows_from, 0, "");
    const auto f = load_set_array(set / "force.npy", false, rows, rows_from, 3 * n, atoms);
    const auto w = load_set_array(set / "virial.npy", false, rows, rows_from, 9, "");
    for (std::size_t r = 0; r < *rows; ++r) {
      Structure s;
      s.origin = system_dir + ":frame " + std::to_string(frames.size());
      s.numbers = numbers;
      s.positions.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        for (int d = 0; d < 3; ++d) s.positions[i][d] = coord->data[r * 3 * n + 3 * i + d] * length;
      }
      if (box) {
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) s.cell.lattice[a][b] = box->data[9 * r + 3 * a + b] * length;
        }
      }
      s.cell.pbc = {periodic, periodic, periodic};
      if (e) s.energy = e->data[r] * energy;
      if (f) {
        s.forces.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          for (int d = 0; d < 3; ++d) s.forces[i][d] = f->data[r * 3 * n + 3 * i + d] * force;
        }
      }
      if (w) {  // DeePMD's virial is in energy units with mlip's sign
        Mat3 m{};
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) m[a][b] = w->data[9 * r + 3 * a + b] * energy;
        }
        s.virial = m;
      }
      validate_frame(s, " (" + set.filename().string() + " row " + std::to_string(r) + ")");
      frames.push_back(std::move(s));
    }
  }
  if (frames.empty()) throw Error(system_dir + ": no frames in its set.* folders");
  return frames;
}

}  // namespace mlip
