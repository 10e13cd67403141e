// MACE's HDF5 data files, as mace-torch's preprocess_data.py writes them
// (mace/data/utils.py, save_configurations_as_HDF5): groups config_batch_B of groups config_J,
// each with atomic_numbers, positions, cell, pbc, weight, properties/{energy, forces, stress,
// virials, ...} and property_weights/{...}; a value that is absent is the string "None". Read
// frame by frame (nothing per frame is held: a file's batches and their sizes only).
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io_detail.h"
#include "mlip/data/file_io.h"
#include "mlip/error.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;

// The HDF5 library is not thread-safe in every build: every call holds this.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

// An HDF5 identifier, closed with its own close function.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 errors are ours to report, not printed by the library (per thread in thread-safe builds).
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

bool exists(hid_t group, const std::string& name) { return H5Lexists(group, name.c_str(), H5P_DEFAULT) > 0; }

// The link names in a group, in name order.
std::vector<std::string> names(hid_t group) {
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0) return {};
  std::vector<std::string> out;
  for (hsize_t k = 0; k < info.nlinks; ++k) {
    const ssize_t n = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, k, nullptr, 0, H5P_DEFAULT);
    if (n < 0) continue;
    std::string name(static_cast<std::size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, k, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<std::size_t>(n));
    out.push_back(name);
  }
  return out;
}

// A scalar string dataset's value (h5py writes a str as a variable-length UTF-8 string); nullopt
// if it cannot be read as one.
std::optional<std::string> read_string(hid_t dset, hid_t type) {
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(type));   // HDF5 converts no string between character sets
  if (H5Tis_variable_str(type) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* text = nullptr;
    if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) < 0 || !text) return std::nullopt;
    std::string out(text);
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(type), '\0');
  H5Tset_size(mem.get(), out.size());
  if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) return std::nullopt;
  return out.substr(0, out.find('\0'));
}

// Dataset `name` of `group` as numbers: empty when it is absent or the string "None" (MACE's
// absent value). `where` names it in errors.
std::vector<double> read_numbers(hid_t group, const std::string& name, const std::string& where) {
  if (!exists(group, name)) return {};
  Id dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.ok()) throw Error(where + ": " + name + " is not a dataset");
  Id type(H5Dget_type(dset.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  Id space(H5Dget_space(dset.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw Error(where + ": " + name + ": cannot read its shape");
  if (cls == H5T_STRING) {
    if (n != 1) throw Error(where + ": " + name + " is an array of strings, not numbers");
    const std::optional<std::string> text = read_string(dset.get(), type.get());
    if (text == "None") return {};
    throw Error(where + ": " + name + (text ? " is the string '" + *text + "'" : " is a string") + ", not numbers");
  }
  std::vector<double> out(static_cast<std::size_t>(n));
  if (cls == H5T_ENUM && H5Tget_size(type.get()) == 1) {   // numpy's bool, as h5py writes it
    std::vector<int8_t> raw(out.size());
    if (n > 0 && H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
      throw Error(where + ": " + name + ": cannot read it");
    std::copy(raw.begin(), raw.end(), out.begin());
    return out;
  }
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) throw Error(where + ": " + name + " is neither numbers nor \"None\"");
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error(where + ": " + name + ": cannot read it");
  return out;
}

// A scalar (or absent) number.
std::optional<double> read_scalar(hid_t group, const std::string& name, const std::string& where) {
  const std::vector<double> v = read_numbers(group, name, where);
  if (v.empty()) return std::nullopt;
  if (v.size() != 1) throw Error(where + ": " + name + " has " + std::to_string(v.size()) + " values, expected one");
  return v[0];
}

// One MACE HDF5 file: its config_batch_B groups (in B order) and how many configs each holds.
struct Hdf5File {
  std::string path;
  Id file{-1, H5Fclose};
  std::vector<std::string> batches;
  std::vector<uint64_t> first;   // the file's index of each batch's first config; then the total

  explicit Hdf5File(const std::string& p) : path(p) {
    quiet();
    {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);   // the system's reason, if it is one
      if (fd < 0) {
        const int error = errno;
        throw Error(p + ": cannot open: " + std::strerror(error) + open_files_hint(error));
      }
      ::close(fd);
    }
    file = Id(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.ok())
      throw Error(p + ": cannot open as an HDF5 file (not HDF5, or HDF5's file locking failed: on NFS or Lustre, "
                      "set HDF5_USE_FILE_LOCKING=FALSE)");
    std::vector<std::pair<long long, std::string>> found;
    for (const std::string& name : names(file.get())) {
      long long b = -1;
      if (name.rfind("config_batch_", 0) != 0 || !io_detail::try_parse_integer(name.substr(13), b) || b < 0)
        throw Error(p + ": group '" + name + "' is not a config_batch_N: not MACE's HDF5 data layout");
      found.emplace_back(b, name);
    }
    if (found.empty()) throw Error(p + ": no config_batch_N group: not MACE's HDF5 data layout");
    std::sort(found.begin(), found.end());
    first.push_back(0);
    for (const auto& [b, name] : found) {
      Id group(H5Gopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
      H5G_info_t info{};
      if (!group.ok() || H5Gget_info(group.get(), &info) < 0) throw Error(p + ": " + name + " is not a group");
      batches.push_back(name);
      first.push_back(first.back() + info.nlinks);
    }
  }

  // The group of config i (its batch's config_J, J counted from the batch's first).
  std::string group(uint64_t i) const {
    const std::size_t b = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin()) - 1;
    return batches[b] + "/config_" + std::to_string(i - first[b]);
  }

  // Config i's number of atoms: the length of its atomic_numbers, nothing read.
  std::size_t atoms(uint64_t i, const std::string& where) const {
    quiet();
    const std::string name = group(i) + "/atomic_numbers";
    Id dset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dset.ok()) throw Error(where + ": no dataset " + name);
    Id space(H5Dget_space(dset.get()), H5Sclose);
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0) throw Error(where + ": " + name + ": cannot read its shape");
    return static_cast<std::size_t>(n);
  }

  // Config i of the file.
  io_detail::RawFrame raw(uint64_t i, const std::string& where) const {
    quiet();
    const std::string name = group(i);
    Id g(H5Gopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.ok()) throw Error(where + ": no group " + name);
    const std::string at = where + " (" + name + ")";
    io_detail::RawFrame r;
    for (const double z : read_numbers(g.get(), "atomic_numbers", at)) {
      if (!(z >= 0 && z <= 1000) || z != static_cast<int>(z))
        throw Error(at + ": atomic_numbers holds " + std::to_string(z) + ", not an atomic number");
      r.numbers.push_back(static_cast<int>(z));
    }
    if (r.numbers.empty()) throw Error(at + ": no atomic_numbers");
    r.positions = read_numbers(g.get(), "positions", at);
    r.cell = read_numbers(g.get(), "cell", at);
    if (r.cell.empty()) r.cell.assign(9, 0.0);
    const std::vector<double> pbc = read_numbers(g.get(), "pbc", at);
    if (!pbc.empty() && pbc.size() != 3) throw Error(at + ": pbc has " + std::to_string(pbc.size()) + " values, expected 3");
    for (std::size_t k = 0; k < pbc.size(); ++k) r.pbc[k] = pbc[k] != 0;
    r.weight = read_scalar(g.get(), "weight", at).value_or(1.0);
    const Id props(exists(g.get(), "properties") ? H5Gopen2(g.get(), "properties", H5P_DEFAULT) : -1, H5Gclose);
    const Id weights(exists(g.get(), "property_weights") ? H5Gopen2(g.get(), "property_weights", H5P_DEFAULT) : -1,
                     H5Gclose);
    // A label counts where its property weight is 1 (or not given); 0 means absent, as in MACE.
    const auto labelled = [&](const char* key) {
      if (!props.ok() || !exists(props.get(), key)) return false;
      const std::optional<double> w = weights.ok() ? read_scalar(weights.get(), key, at + ": property_weights") : 1.0;
      if (!w || *w == 1.0) return true;
      if (*w == 0.0) return false;
      throw Error(at + ": property_weights/" + key + " is " + std::to_string(*w) +
                  ": mlip weighs a frame as a whole (its weight), not each label; make it 0 or 1");
    };
    if (labelled("energy")) r.energy = read_scalar(props.get(), "energy", at + ": properties");
    if (labelled("forces")) r.forces = read_numbers(props.get(), "forces", at + ": properties");
    if (labelled("virials")) r.virial = read_numbers(props.get(), "virials", at + ": properties");
    if (r.virial.empty() && labelled("stress")) r.stress = read_numbers(props.get(), "stress", at + ": properties");
    return r;
  }
};

// One MACE HDF5 file by index; every HDF5 call (opening and closing included) under the lock.
class MaceHdf5File final : public FrameReader {
 public:
  MaceHdf5File(const std::string& path, const ReadOptions& options)
      : options_(options), file_(open_locked(path)) {}
  ~MaceHdf5File() override {
    const std::lock_guard<std::mutex> lock(hdf5_mutex());
    file_.file = Id(-1, H5Fclose);
  }
  std::size_t size() const override { return file_.first.back(); }
  Structure frame(std::size_t i) const override {
    const std::string where = name(i);
    io_detail::RawFrame r;
    {
      const std::lock_guard<std::mutex> lock(hdf5_mutex());
      r = file_.raw(i, where);
    }
    return io_detail::to_structure(r, options_, where);
  }
  std::size_t atoms(std::size_t i) const override {
    const std::string where = name(i);
    const std::lock_guard<std::mutex> lock(hdf5_mutex());
    return file_.atoms(i, where);
  }

 private:
  static Hdf5File open_locked(const std::string& path) {
    const std::lock_guard<std::mutex> lock(hdf5_mutex());
    return Hdf5File(path);   // built in place (C++17): a failure closes what it opened under the lock
  }
  // "<file>:frame i", for messages.
  std::string name(std::size_t i) const {
    if (i >= size()) throw Error(file_.path + ": no frame " + std::to_string(i) + " (" + std::to_string(size()) + " frames)");
    return file_.path + ":frame " + std::to_string(i);
  }
  ReadOptions options_;
  Hdf5File file_;
};

}  // namespace

// A file, or a folder's *.h5 and *.hdf5 files in number order (the shards preprocess_data.py
// writes), frames numbered across them.
std::unique_ptr<FrameReader> io_detail::open_mace_hdf5(const std::string& path, const ReadOptions& options) {
  if (!fs::is_directory(path)) return std::make_unique<MaceHdf5File>(path, options);
  std::vector<std::unique_ptr<FrameReader>> parts;
  for (const std::string& file : data_files(path, {".h5", ".hdf5"})) parts.push_back(std::make_unique<MaceHdf5File>(file, options));
  if (parts.empty()) throw Error(path + ": a folder without *.h5 or *.hdf5 files");
  return concat_readers(std::move(parts), path);
}

std::vector<Structure> read_mace_hdf5(const std::string& path, const ReadOptions& options) {
  const std::unique_ptr<FrameReader> r = io_detail::open_mace_hdf5(path, options);
  std::vector<Structure> out;
  out.reserve(r->size());
  for (std::size_t i = 0; i < r->size(); ++i) out.push_back(r->frame(i));
  return out;
}

}  // namespace mlip
