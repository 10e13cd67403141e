// ASE's databases: its SQLite file (*.db, ase.db) and the ASE-LMDB file fairchem's data sets
// ship in (*.aselmdb, ase_db_backends.aselmdb). Both hold ASE rows: numbers, positions, cell,
// pbc and the stored calculator results (energy, forces, stress), with key-value pairs.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <tuple>

#include <lmdb.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>
#include <zlib.h>

#include "io_detail.h"
#include "mlip/data/io.h"
#include "mlip/error.h"

namespace mlip {
namespace {

using json = nlohmann::json;

// ---- SQLite (*.db) ------------------------------------------------------------------------------

// A blob of `count` little-endian values of T (what ase.db's blob() writes), or none if NULL.
template <typename T>
std::vector<T> blob(sqlite3_stmt* st, int column) {
  const void* p = sqlite3_column_blob(st, column);   // before the size, as SQLite asks
  const int bytes = sqlite3_column_bytes(st, column);
  std::vector<T> out(static_cast<std::size_t>(bytes) / sizeof(T));
  if (p && !out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(T));
  return out;
}

struct Sqlite {
  sqlite3* db = nullptr;
  sqlite3_stmt* st = nullptr;
  ~Sqlite() {
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
};

double kv_weight(const std::string& text, const std::string& where) {
  if (text.empty()) return 1.0;
  const json kv = json::parse(text, nullptr, false);
  if (kv.is_discarded() || !kv.is_object()) throw Error(where + ": key_value_pairs is not a JSON object");
  if (!kv.contains("weight")) return 1.0;
  if (!kv["weight"].is_number()) throw Error(where + ": key-value 'weight' is not a number");
  return kv["weight"].get<double>();
}

}  // namespace

namespace {

constexpr const char* kRowColumns = "id, numbers, positions, cell, pbc, energy, forces, stress, key_value_pairs";

// Opens `path` read-only and checks it is an ASE database of a schema version this reader knows.
void open_ase_db(Sqlite& q, const std::string& path) {
  if (sqlite3_open_v2(path.c_str(), &q.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK)
    throw Error(path + ": cannot open as an SQLite database: " + sqlite3_errmsg(q.db));
  int version = 0;
  if (sqlite3_prepare_v2(q.db, "SELECT value FROM information WHERE name = 'version'", -1, &q.st, nullptr) != SQLITE_OK)
    throw Error(path + ": not an ASE database: no 'information' table (" + sqlite3_errmsg(q.db) + ")");
  if (sqlite3_step(q.st) == SQLITE_ROW && sqlite3_column_type(q.st, 0) != SQLITE_NULL)
    version = sqlite3_column_int(q.st, 0);
  sqlite3_finalize(q.st);
  q.st = nullptr;
  if (version < 5 || version > 9)
    throw Error(path + ": ASE database schema version " + std::to_string(version) +
                "; this mlip reads versions 5 to 9 (ASE 3.12 and later): convert it with ASE");
}

// The row `st` stands on (columns kRowColumns) as frame `frame` of `path`.
Structure sqlite_row(sqlite3_stmt* st, const std::string& path, std::size_t frame, const ReadOptions& options) {
  const std::string where =
      path + ":frame " + std::to_string(frame) + " (id " + std::to_string(sqlite3_column_int64(st, 0)) + ")";
  io_detail::RawFrame r;
  for (const int32_t z : blob<int32_t>(st, 1)) r.numbers.push_back(z);
  r.positions = blob<double>(st, 2);
  r.cell = blob<double>(st, 3);
  const int pbc = sqlite3_column_int(st, 4);
  r.pbc = {(pbc & 1) != 0, (pbc & 2) != 0, (pbc & 4) != 0};
  if (sqlite3_column_type(st, 5) != SQLITE_NULL) r.energy = sqlite3_column_double(st, 5);
  r.forces = blob<double>(st, 6);
  r.stress = blob<double>(st, 7);
  const unsigned char* kv = sqlite3_column_text(st, 8);
  r.weight = kv_weight(kv ? reinterpret_cast<const char*>(kv) : "", where);
  return io_detail::to_structure(r, options, where);
}

// Rows by index: their ids and atom counts (the natoms column) listed at construction, 12 bytes
// a frame; one row read per frame() (one connection, one statement, taken in turn).
class AseDbFile final : public FrameReader {
 public:
  AseDbFile(const std::string& path, const ReadOptions& options) : path_(path), options_(options) {
    open_ase_db(q_, path);
    if (sqlite3_prepare_v2(q_.db, "SELECT id, natoms FROM systems ORDER BY id", -1, &q_.st, nullptr) != SQLITE_OK)
      throw Error(path + ": not an ASE database (" + sqlite3_errmsg(q_.db) + ")");
    for (int rc; (rc = sqlite3_step(q_.st)) != SQLITE_DONE;) {
      if (rc != SQLITE_ROW) throw Error(path + ": cannot list its rows (" + sqlite3_errmsg(q_.db) + ")");
      ids_.push_back(sqlite3_column_int64(q_.st, 0));
      const sqlite3_int64 n = sqlite3_column_int64(q_.st, 1);
      atoms_.push_back(n > 0 && n <= UINT32_MAX ? static_cast<uint32_t>(n) : 0);   // 0: not given (NULL)
    }
    sqlite3_finalize(q_.st);
    q_.st = nullptr;
    const std::string sql = std::string("SELECT ") + kRowColumns + " FROM systems WHERE id = ?";
    if (sqlite3_prepare_v2(q_.db, sql.c_str(), -1, &q_.st, nullptr) != SQLITE_OK)
      throw Error(path + ": not an ASE database (" + sqlite3_errmsg(q_.db) + ")");
  }
  std::size_t size() const override { return ids_.size(); }
  Structure frame(std::size_t i) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    sqlite3_reset(q_.st);
    sqlite3_bind_int64(q_.st, 1, ids_.at(i));
    if (sqlite3_step(q_.st) != SQLITE_ROW)
      throw Error(path_ + ":frame " + std::to_string(i) + " (id " + std::to_string(ids_[i]) + "): cannot read the row (" +
                  sqlite3_errmsg(q_.db) + ")");
    Structure s = sqlite_row(q_.st, path_, i, options_);
    if (atoms_[i] != 0 && s.size() != atoms_[i])
      throw Error(path_ + ":frame " + std::to_string(i) + " (id " + std::to_string(ids_[i]) + "): its natoms column says " +
                  std::to_string(atoms_[i]) + ", its arrays hold " + std::to_string(s.size()) + " atoms");
    return s;
  }
  /// From the natoms column (frame() checks it against the row's arrays); where a writer other
  /// than ASE left it empty, from the frame.
  std::size_t atoms(std::size_t i) const override { return atoms_.at(i) != 0 ? atoms_[i] : frame(i).size(); }

 private:
  std::string path_;
  ReadOptions options_;
  Sqlite q_;
  std::vector<sqlite3_int64> ids_;
  std::vector<uint32_t> atoms_;
  mutable std::mutex mutex_;
};

}  // namespace

std::vector<Structure> read_ase_db(const std::string& path, const ReadOptions& options) {
  Sqlite q;
  open_ase_db(q, path);
  const std::string sql = std::string("SELECT ") + kRowColumns + " FROM systems ORDER BY id";
  if (sqlite3_prepare_v2(q.db, sql.c_str(), -1, &q.st, nullptr) != SQLITE_OK)
    throw Error(path + ": not an ASE database (" + sqlite3_errmsg(q.db) + ")");
  std::vector<Structure> frames;
  for (int rc; (rc = sqlite3_step(q.st)) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW)
      throw Error(path + ": cannot read row " + std::to_string(frames.size() + 1) + " (" + sqlite3_errmsg(q.db) + ")");
    frames.push_back(sqlite_row(q.st, path, frames.size(), options));
  }
  return frames;
}

// ---- ASE-LMDB (*.aselmdb) -----------------------------------------------------------------------

namespace {

// zlib-inflated bytes (a row is zlib-compressed JSON), at most kMaxRow of them.
constexpr std::size_t kMaxRow = std::size_t(1) << 30;

std::string inflate_row(const MDB_val& v, const std::string& where) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) throw Error(where + ": zlib cannot start");
  z.next_in = static_cast<Bytef*>(v.mv_data);
  z.avail_in = static_cast<uInt>(v.mv_size);
  std::string out;
  char chunk[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof chunk;
    rc = ::inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      throw Error(where + ": the row is not zlib-compressed data (corrupt or truncated)");
    }
    out.append(chunk, sizeof chunk - z.avail_out);
    if (out.size() > kMaxRow) {
      inflateEnd(&z);
      throw Error(where + ": the row inflates beyond 1 GiB (corrupt)");
    }
  }
  inflateEnd(&z);
  return out;
}

// Numbers of a JSON array, nested or flat (fairchem's writers store [[x, y, z], ...]), in order.
template <typename T>
void flatten_into(const json& v, std::vector<T>& out) {
  if (v.is_array()) {
    for (const json& e : v) flatten_into(e, out);
  } else {
    out.push_back(v.get<T>());
  }
}

// An array as ase.io.jsonio encodes it: {"__ndarray__": [shape, dtype, flat values]}.
template <typename T>
std::vector<T> ndarray(const json& row, const char* key, const std::string& where) {
  if (!row.contains(key) || row[key].is_null()) return {};
  const json& v = row[key];
  std::vector<T> out;
  if (v.is_array()) {   // plain (nested) lists, as fairchem-core's LMDB writer stores them (orjson)
    flatten_into(v, out);
    return out;
  }
  if (!v.is_object() || !v.contains("__ndarray__") || !v["__ndarray__"].is_array() || v["__ndarray__"].size() != 3)
    throw Error(where + ": '" + key + "' is not an array");
  flatten_into(v["__ndarray__"][2], out);
  return out;
}

struct Lmdb {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_cursor* cursor = nullptr;
  ~Lmdb() {
    if (cursor) mdb_cursor_close(cursor);
    if (txn) mdb_txn_abort(txn);
    if (env) mdb_env_close(env);
  }
};

}  // namespace

namespace {

void check_lmdb(int rc, const std::string& path, const std::string& what) {
  if (rc != MDB_SUCCESS) throw Error(path + ": " + what + ": " + mdb_strerror(rc));
}

void open_lmdb(Lmdb& l, const std::string& path) {
  check_lmdb(mdb_env_create(&l.env), path, "cannot open as an LMDB file");
  check_lmdb(mdb_env_set_mapsize(l.env, std::size_t(1) << 40), path, "cannot open as an LMDB file");
  // MDB_NOTLS: read transactions of any thread (the trainer's prefetching one)
  check_lmdb(mdb_env_open(l.env, path.c_str(), MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0444), path,
             "cannot open as an LMDB file");
}

// The rows' ids and keys, sorted by id: keys "1", "2", ... beside nextid, deleted_ids and
// metadata; ASE lists the rows by id. With `texts`, also each row's inflated JSON.
std::vector<std::pair<long long, std::string>> lmdb_rows(const Lmdb& env, const std::string& path,
                                                         std::vector<std::string>* texts) {
  Lmdb l;   // a transaction and cursor of its own, over env's environment
  check_lmdb(mdb_txn_begin(env.env, nullptr, MDB_RDONLY, &l.txn), path, "cannot read");
  MDB_dbi dbi;
  check_lmdb(mdb_dbi_open(l.txn, nullptr, 0, &dbi), path, "cannot read");
  check_lmdb(mdb_cursor_open(l.txn, dbi, &l.cursor), path, "cannot read");
  std::vector<std::tuple<long long, std::string, std::string>> rows;
  MDB_val key, value;
  for (int rc = mdb_cursor_get(l.cursor, &key, &value, MDB_FIRST); rc != MDB_NOTFOUND;
       rc = mdb_cursor_get(l.cursor, &key, &value, MDB_NEXT)) {
    check_lmdb(rc, path, "cannot read its keys");
    const std::string k(static_cast<const char*>(key.mv_data), key.mv_size);
    long long id;
    if (!io_detail::try_parse_integer(k, id)) continue;
    rows.emplace_back(id, k, texts ? inflate_row(value, path + ": row " + k) : std::string());
  }
  std::sort(rows.begin(), rows.end());
  std::vector<std::pair<long long, std::string>> out;
  for (auto& [id, k, text] : rows) {
    out.emplace_back(id, k);
    if (texts) texts->push_back(std::move(text));
  }
  return out;
}

// A row's JSON as frame `frame` (id `id`) of `path`.
Structure lmdb_row(const std::string& text, const std::string& path, std::size_t frame, long long id,
                   const ReadOptions& options) {
  const std::string where = path + ":frame " + std::to_string(frame) + " (id " + std::to_string(id) + ")";
  const json row = json::parse(text, nullptr, false);
  if (row.is_discarded() || !row.is_object()) throw Error(where + ": the row is not a JSON object (corrupt)");
  io_detail::RawFrame r;
  try {
    r.numbers = ndarray<int>(row, "numbers", where);
    r.positions = ndarray<double>(row, "positions", where);
    r.cell = ndarray<double>(row, "cell", where);
    if (r.cell.empty()) r.cell.assign(9, 0.0);
    const std::vector<bool> pbc = ndarray<bool>(row, "pbc", where);
    if (!pbc.empty() && pbc.size() != 3) throw Error(where + ": pbc has " + std::to_string(pbc.size()) + " values");
    for (std::size_t d = 0; d < pbc.size(); ++d) r.pbc[d] = pbc[d];
    if (row.contains("energy") && !row["energy"].is_null()) r.energy = row["energy"].get<double>();
    r.forces = ndarray<double>(row, "forces", where);
    r.stress = ndarray<double>(row, "stress", where);
    if (row.contains("key_value_pairs") && row["key_value_pairs"].contains("weight"))
      r.weight = row["key_value_pairs"]["weight"].get<double>();
  } catch (const json::exception& e) {
    throw Error(where + ": a value of the wrong type (" + std::string(e.what()) + ")");
  }
  return io_detail::to_structure(r, options, where);
}

// Rows by index: the keys listed at construction (values not read), a read transaction per frame().
class AselmdbFile final : public FrameReader {
 public:
  AselmdbFile(const std::string& path, const ReadOptions& options) : path_(path), options_(options) {
    open_lmdb(env_, path);
    rows_ = lmdb_rows(env_, path, nullptr);
  }
  std::size_t size() const override { return rows_.size(); }
  Structure frame(std::size_t i) const override {
    const auto& [id, k] = rows_.at(i);
    Lmdb l;
    check_lmdb(mdb_txn_begin(env_.env, nullptr, MDB_RDONLY, &l.txn), path_, "cannot read");
    MDB_dbi dbi;
    check_lmdb(mdb_dbi_open(l.txn, nullptr, 0, &dbi), path_, "cannot read");
    MDB_val key{k.size(), const_cast<char*>(k.data())}, value;
    check_lmdb(mdb_get(l.txn, dbi, &key, &value), path_, "row " + k);
    return lmdb_row(inflate_row(value, path_ + ": row " + k), path_, i, id, options_);
  }

 private:
  std::string path_;
  ReadOptions options_;
  Lmdb env_;
  std::vector<std::pair<long long, std::string>> rows_;
};

}  // namespace

namespace {

// The *.aselmdb and *.lmdb files of a folder (fairchem ships its data sets as folders of them);
// `path` itself if it is a file.
std::vector<std::string> aselmdb_files(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return {path};
  const std::vector<std::string> files = io_detail::data_files(path, {".aselmdb", ".lmdb"});
  if (files.empty()) throw Error(path + ": a folder without *.aselmdb or *.lmdb files");
  return files;
}

std::vector<Structure> read_aselmdb_file(const std::string& path, const ReadOptions& options) {
  Lmdb l;
  open_lmdb(l, path);
  std::vector<std::string> texts;
  const auto rows = lmdb_rows(l, path, &texts);
  std::vector<Structure> frames;
  for (std::size_t k = 0; k < rows.size(); ++k) frames.push_back(lmdb_row(texts[k], path, k, rows[k].first, options));
  return frames;
}

}  // namespace

std::vector<Structure> read_aselmdb(const std::string& path, const ReadOptions& options) {
  std::vector<Structure> frames;
  for (const std::string& file : aselmdb_files(path)) {
    std::vector<Structure> part = read_aselmdb_file(file, options);
    frames.insert(frames.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return frames;
}

std::unique_ptr<FrameReader> io_detail::open_ase_reader(const std::string& path, const std::string& format,
                                                        const ReadOptions& options) {
  if (format == "ase-db") return std::make_unique<AseDbFile>(path, options);
  if (format == "aselmdb") {
    std::vector<std::unique_ptr<FrameReader>> parts;
    for (const std::string& file : aselmdb_files(path)) parts.push_back(std::make_unique<AselmdbFile>(file, options));
    return parts.size() == 1 && parts.front() ? std::move(parts.front()) : concat_readers(std::move(parts), path);
  }
  return nullptr;
}

}  // namespace mlip
