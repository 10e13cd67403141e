// Packed data sets: frames in binary shard files with an index and a manifest, so that a data set
// larger than memory is read frame by frame (by index, with positioned reads) instead of parsed
// whole. The byte layout is in docs/data-format.md.
//
//   DIR/manifest.json        written last (temporary name, then rename): a pack is the shards its
//                            manifest lists, so an interrupted pack or append never looks complete
//                            and the previous manifest, if any, still reads
//   DIR/shard-NNNNN.bin      frame records, back to back
//   DIR/shard-NNNNN.idx      the records' byte offsets (n + 1 little-endian u64: the last is the
//                            shard's size), then their atom counts (n little-endian u32; from
//                            format version 2), so that batches by atoms need no pass over records
//
// Frames are in mlip's units (eV, Å, eV/Å, virial in eV), float64, with their source file and
// their index in it. Every file has an XXH3-64 checksum in the manifest (checked by verify_pack);
// every problem found while reading is an mlip::Error naming the file and the frame.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlip/data/io.h"
#include "mlip/data/structure.h"

namespace mlip {

/// The format version written; versions from kPackOldestVersion on are read (and appended to in
/// their own version).
inline constexpr int kPackVersion = 2;
inline constexpr int kPackOldestVersion = 1;
/// Pairs of atoms closer than this (Å) enter PackStats::shortest (cutoffs above it: see
/// docs/data-format.md).
inline constexpr double kPackShortestRadius = 4.0;

struct PackShard {
  std::string data, index;     // file names in the pack's folder
  uint64_t first_frame = 0;    // the pack's index of its first frame
  uint64_t frames = 0;
  uint64_t bytes = 0;          // size of `data`
  std::string data_xxh3, index_xxh3;  // checksums, 16 hex digits
};

/// Sums from which data-set statistics follow, accumulated frame by frame.
struct PackStats {
  uint64_t atoms = 0;
  std::vector<uint64_t> atoms_by_z = std::vector<uint64_t>(119, 0);  // by atomic number
  uint64_t energy_frames = 0, force_frames = 0, virial_frames = 0;
  // Least squares of energies on species counts (E0s): sum over labelled frames of n n^T and n E,
  // over the atomic numbers present, and sum of E^2.
  std::vector<int> e0_numbers;                     // atomic numbers of the rows below
  std::vector<std::vector<double>> counts_counts;  // sum n_a n_b
  std::vector<double> counts_energy;               // sum n_a E
  double energy_squares = 0;
  double force_squares = 0;                        // sum of squared force components
  uint64_t force_components = 0;
  // The shortest distance between atoms of each pair of elements (Z_a <= Z_b), over the pairs
  // closer than kPackShortestRadius; pairs of elements never that close are absent. Known only
  // for packs that recorded it (has_shortest).
  bool has_shortest = true;
  std::map<std::pair<int, int>, double> shortest;

  void add(const Structure& s);
  /// add() of each, in order (the shortest distances found by several threads: a minimum does
  /// not depend on the order, so the result is add()'s bit for bit).
  void add_all(const std::vector<const Structure*>& frames);
  /// add_all() of frame(first), ..., frame(first + count - 1), in blocks (bounded memory).
  void add_each(std::size_t first, std::size_t count, const std::function<Structure(std::size_t)>& frame);
  /// The E0 sums alone, of `s`'s species counts and `energy` (its label, or a residual).
  void add_energy(const Structure& s, double energy);
  void merge(const PackStats& other);

 private:
  void add_counts(const Structure& s);
};

struct PackManifest {
  int version = kPackVersion;
  std::vector<std::string> sources;  // source files, as given to pack
  std::vector<PackShard> shards;
  uint64_t frames = 0;
  PackStats stats;

  /// Elements present, by atomic number.
  std::vector<std::string> species() const;
};

/// The manifest of the pack in `dir` (throws mlip::Error naming the file when absent or invalid).
PackManifest read_pack_manifest(const std::string& dir);

/// Whether `dir` holds a pack (a manifest.json whose format is mlip-pack).
bool is_pack(const std::string& dir);

struct PackWriteOptions {
  bool append = false;                 // add to the pack in `dir` (else `dir` must hold no pack)
  uint64_t shard_bytes = 256000000;    // a new shard once one reaches this size (256 MB)
};

/// Writes frames into a pack: shards as they fill, the manifest at finish(). Frames added after
/// the last finish() are not part of the pack if the process ends before the next one.
class PackWriter {
 public:
  PackWriter(const std::string& dir, const PackWriteOptions& options = {});
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  /// Adds a source file's name; returns its index for add().
  uint32_t add_source(const std::string& name);
  /// Validates `s` (Structure::validate) and appends it.
  void add(const Structure& s, uint32_t source, uint64_t source_frame);
  /// Frames a block of add_all (its statistics are found by several threads).
  static constexpr std::size_t kBlock = 1024;
  /// add() of every frame of `frames`, source frames first_frame, first_frame + 1, ...
  void add_all(const std::vector<Structure>& frames, uint32_t source, uint64_t first_frame = 0);
  /// add_all() of every frame of `reader`, read kBlock frames at a time (bounded memory: the
  /// source need not fit in memory). Returns how many.
  uint64_t add_reader(const FrameReader& reader, uint32_t source);
  /// Closes the current shard and writes the manifest; returns it.
  const PackManifest& finish();

 private:
  void write(const Structure& s, uint32_t source, uint64_t source_frame);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Reads frames of a pack by index: the manifest at construction, with each shard's files checked
/// by size and its index's first and last entries (no per-frame data is read or held, whatever
/// the size of the pack); then two positioned reads per frame, of its index entry and its record,
/// and from version 2 a third, of its atom count in the index.
/// frame() may be called from several threads at once.
class PackReader final : public FrameReader {
 public:
  explicit PackReader(const std::string& dir);
  ~PackReader() override;
  PackReader(PackReader&&) noexcept;

  const PackManifest& manifest() const;
  std::size_t size() const override;
  /// Frame i, `origin` "<source>:frame K (pack DIR, frame i)". Throws mlip::Error naming the
  /// shard and the frame if its record is truncated or inconsistent.
  Structure frame(std::size_t i) const override;
  /// Its number of atoms: from the index (version 2; frame() checks it against the record), or
  /// the record's header (version 1).
  std::size_t atoms(std::size_t i) const override;
  /// Every frame's atom count: one read per shard of its index (version 2), or a header a frame.
  std::vector<uint32_t> atom_counts() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Throws naming `path` unless `units` are mlip's own (a pack holds eV and Å already).
void check_pack_units(const Units& units, const std::string& path);

/// Every frame of a pack, in order.
std::vector<Structure> read_pack(const std::string& dir);

/// Checks a pack: every listed file present, its size and checksum; the indexes against their
/// shards; every record decoded and valid; the statistics against the frames. Throws
/// mlip::Error naming the first problem; `log` receives one line per shard.
void verify_pack(const std::string& dir, const std::function<void(const std::string&)>& log);

}  // namespace mlip
