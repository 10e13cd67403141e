// One integer array of a NumPy .npz file: a zip archive (np.savez: entries stored; np.savez_compressed:
// deflated; zip64 records where numpy writes them) of .npy files. The zip layout is PKWARE's
// APPNOTE (end of central directory, central directory, local headers), the .npy layout NumPy's
// format 1.0-3.0 (magic, version, a header that is a Python dict literal, then the data).
// Only what a 1-D little-endian integer array needs is read; anything else is an error naming
// the file.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <optional>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "io_detail.h"
#include "mlip/error.h"

namespace mlip::io_detail {
namespace {

uint64_t le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(p[b]);
  return v;
}

class ZipFile {
 public:
  explicit ZipFile(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw Error(path + ": cannot open");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
  }
  std::string bytes(uint64_t at, uint64_t n) {
    if (at > size_ || n > size_ - at) throw bad("a record beyond the end of the file (truncated?)");
    std::string out(n, '\0');
    in_.seekg(static_cast<std::streamoff>(at));
    if (!in_.read(out.data(), static_cast<std::streamsize>(n))) throw bad("cannot read");
    return out;
  }
  uint64_t size() const { return size_; }
  Error bad(const std::string& what) const { return Error(path_ + ": not a NumPy .npz file: " + what); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

struct Entry {
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t packed = 0, unpacked = 0, header_at = 0;
};

// The central directory's place and entry count, from the end-of-central-directory record (the
// last 0x06054b50 within its 65,557 bytes from the end), or its zip64 record where that says so.
std::array<uint64_t, 3> central_directory(ZipFile& zip) {
  const uint64_t tail = std::min<uint64_t>(zip.size(), 22 + 65535);
  const std::string t = zip.bytes(zip.size() - tail, tail);
  std::size_t at = std::string::npos;
  for (std::size_t i = t.size() >= 22 ? t.size() - 22 + 1 : 0; i-- > 0;) {
    if (le(&t[i], 4) == 0x06054b50) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) throw zip.bad("no end of central directory (not a zip archive, or truncated)");
  uint64_t entries = le(&t[at + 10], 2), cd_size = le(&t[at + 12], 4), cd_at = le(&t[at + 16], 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_at == 0xffffffff) {
    const uint64_t locator = zip.size() - tail + at - 20;
    if (at < 20 || le(zip.bytes(locator, 4).data(), 4) != 0x07064b50) throw zip.bad("no zip64 locator");
    const std::string z = zip.bytes(le(zip.bytes(locator + 8, 8).data(), 8), 56);
    if (le(z.data(), 4) != 0x06064b50) throw zip.bad("no zip64 end of central directory");
    entries = le(&z[32], 8);
    cd_size = le(&z[40], 8);
    cd_at = le(&z[48], 8);
  }
  return {entries, cd_size, cd_at};
}

// The central directory's entry named `name`; its sizes and offset from the zip64 extra field
// where the 32-bit fields say 0xffffffff.
std::optional<Entry> find_entry(ZipFile& zip, const std::string& name) {
  const auto [entries, cd_size, cd_at] = central_directory(zip);
  const std::string cd = zip.bytes(cd_at, cd_size);
  std::size_t p = 0;
  for (uint64_t k = 0; k < entries; ++k) {
    if (p + 46 > cd.size() || le(&cd[p], 4) != 0x02014b50) throw zip.bad("a damaged central directory");
    const std::size_t n = le(&cd[p + 28], 2), extra = le(&cd[p + 30], 2), comment = le(&cd[p + 32], 2);
    if (p + 46 + n + extra + comment > cd.size()) throw zip.bad("a damaged central directory");
    if (cd.compare(p + 46, n, name) == 0 && n == name.size()) {
      Entry e;
      e.method = static_cast<uint16_t>(le(&cd[p + 10], 2));
      e.crc = static_cast<uint32_t>(le(&cd[p + 16], 4));
      e.packed = le(&cd[p + 20], 4);
      e.unpacked = le(&cd[p + 24], 4);
      e.header_at = le(&cd[p + 42], 4);
      for (std::size_t x = p + 46 + n; x + 4 <= p + 46 + n + extra;) {
        const std::size_t id = le(&cd[x], 2), len = le(&cd[x + 2], 2);
        std::size_t f = x + 4;
        if (id == 0x0001) {
          for (uint64_t* v : {&e.unpacked, &e.packed, &e.header_at}) {
            if (*v != 0xffffffff) continue;
            if (f + 8 > x + 4 + len) throw zip.bad("a damaged zip64 field");
            *v = le(&cd[f], 8);
            f += 8;
          }
        }
        x += 4 + len;
      }
      return e;
    }
    p += 46 + n + extra + comment;
  }
  return std::nullopt;
}

// An entry's bytes in order, a piece at a time (inflated where deflated), so that a large array
// is never held twice; finish() checks that every byte was read and the CRC-32.
class EntryReader {
 public:
  EntryReader(ZipFile& zip, const Entry& e, const std::string& name) : zip_(zip), e_(e), name_(name) {
    const std::string h = zip.bytes(e.header_at, 30);
    if (le(h.data(), 4) != 0x04034b50) throw zip.bad(name + ": a damaged local header");
    at_ = e.header_at + 30 + le(&h[26], 2) + le(&h[28], 2);
    if (e.method == 8) {
      if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) throw Error(zip.path() + ": zlib cannot start");
      inflating_ = true;
    } else if (e.method != 0) {
      throw zip.bad(name + ": compression method " + std::to_string(e.method) + " (only stored or deflated)");
    }
  }
  ~EntryReader() {
    if (inflating_) inflateEnd(&z_);
  }
  EntryReader(const EntryReader&) = delete;
  EntryReader& operator=(const EntryReader&) = delete;

  /// The next n bytes; throws where the entry has fewer.
  void read(char* out, std::size_t n) {
    if (n > e_.unpacked - done_) throw zip_.bad(name_ + ": shorter than its header says");
    if (!inflating_) {
      const std::string b = zip_.bytes(at_ + done_, n);
      std::memcpy(out, b.data(), n);
    } else {
      z_.next_out = reinterpret_cast<Bytef*>(out);
      z_.avail_out = static_cast<uInt>(n);
      while (z_.avail_out > 0) {
        if (z_.avail_in == 0) {
          const uint64_t left = e_.packed - used_;
          if (left == 0) throw zip_.bad(name_ + ": its deflated data ends early (damaged)");
          in_ = zip_.bytes(at_ + used_, std::min<uint64_t>(left, 1 << 16));
          used_ += in_.size();
          z_.next_in = reinterpret_cast<Bytef*>(in_.data());
          z_.avail_in = static_cast<uInt>(in_.size());
        }
        const int rc = ::inflate(&z_, Z_NO_FLUSH);
        if (rc == Z_STREAM_END && z_.avail_out > 0) throw zip_.bad(name_ + ": its deflated data ends early (damaged)");
        if (rc != Z_OK && rc != Z_STREAM_END) throw zip_.bad(name_ + ": its deflated data is damaged");
      }
    }
    crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(out), static_cast<uInt>(n));
    done_ += n;
  }
  uint64_t left() const { return e_.unpacked - done_; }
  void finish() const {
    if (done_ != e_.unpacked) throw zip_.bad(name_ + ": longer than its header says");
    if (crc_ != e_.crc) throw zip_.bad(name_ + ": its CRC-32 does not match (damaged)");
  }

 private:
  ZipFile& zip_;
  Entry e_;
  std::string name_, in_;
  uint64_t at_ = 0, done_ = 0, used_ = 0;
  z_stream z_{};
  bool inflating_ = false;
  uLong crc_ = crc32(0L, Z_NULL, 0);
};

// The value after `key` in a .npy header dict ("'descr': '<i8', 'shape': (7,), ..."): the
// quoted string or the parenthesised tuple, without quotes or parentheses.
std::string header_value(const std::string& header, const std::string& key) {
  const std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  std::size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  v = header.find_first_not_of(' ', v + 1);
  if (v == std::string::npos) return "";
  const char close = header[v] == '(' ? ')' : header[v];
  const std::size_t end = header.find(close, v + 1);
  if (end == std::string::npos) return "";
  return header.substr(v + 1, end - v - 1);
}

}  // namespace

std::optional<std::vector<uint32_t>> read_npz_counts(const std::string& path, const std::string& name) {
  ZipFile zip(path);
  const std::string entry = name + ".npy";
  const std::optional<Entry> e = find_entry(zip, entry);
  if (!e) return std::nullopt;
  EntryReader in(zip, *e, entry);
  const std::string where = path + ": " + name;
  char magic[8];
  in.read(magic, 8);
  const int major = static_cast<unsigned char>(magic[6]);
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) throw Error(where + ": not a .npy array");
  if (major < 1 || major > 3) throw Error(where + ": .npy version " + std::to_string(major) + " (1 to 3 are read)");
  const int len_bytes = major == 1 ? 2 : 4;
  char len[4];
  in.read(len, static_cast<std::size_t>(len_bytes));
  const uint64_t header_len = le(len, len_bytes);
  if (header_len > in.left() || header_len > (1u << 20)) throw Error(where + ": a .npy header of " + std::to_string(header_len) + " bytes (damaged)");
  std::string header(header_len, '\0');
  in.read(header.data(), header.size());
  const std::string descr = header_value(header, "descr"), shape = header_value(header, "shape");
  // 1-D: C or Fortran order alike.
  const bool is_signed = descr.size() == 3 && descr[1] == 'i', is_unsigned = descr.size() == 3 && descr[1] == 'u';
  const int width = (is_signed || is_unsigned) ? descr[2] - '0' : 0;
  if (!(is_signed || is_unsigned) || (descr[0] != '<' && descr[0] != '|') || (width != 1 && width != 2 && width != 4 && width != 8))
    throw Error(where + ": an array of '" + descr + "', not of little-endian integers");
  long long n = 0;
  const std::string dims = shape.substr(0, shape.find_last_not_of(", ") + 1);
  if (dims.find(',') != std::string::npos || !try_parse_integer(dims, n) || n < 0)
    throw Error(where + ": an array of shape (" + shape + "), not one-dimensional");
  if (in.left() != static_cast<uint64_t>(n) * static_cast<uint64_t>(width))
    throw Error(where + ": " + std::to_string(in.left()) + " bytes of data for " + std::to_string(n) + " values");
  std::vector<uint32_t> out(static_cast<std::size_t>(n));
  std::vector<char> piece;
  constexpr std::size_t kPiece = 1 << 16;   // values a read
  for (std::size_t first = 0; first < out.size(); first += kPiece) {
    const std::size_t count = std::min(kPiece, out.size() - first);
    piece.resize(count * static_cast<std::size_t>(width));
    in.read(piece.data(), piece.size());
    for (std::size_t k = 0; k < count; ++k) {
      const uint64_t raw = le(&piece[k * width], width);
      const bool negative = is_signed && ((raw >> (8 * width - 1)) & 1);
      if (negative || raw > std::numeric_limits<uint32_t>::max())
        throw Error(where + ": value " + std::to_string(first + k) + " is not a count (negative, or 2^32 or more)");
      out[first + k] = static_cast<uint32_t>(raw);
    }
  }
  in.finish();
  return out;
}

}  // namespace mlip::io_detail
