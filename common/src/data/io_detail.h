// Helpers shared by the data readers (private to mlip_core).
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mlip/data/io.h"
#include "mlip/data/structure.h"

namespace mlip::io_detail {

/// The whole file as bytes; throws mlip::Error naming `path` if it cannot be read.
std::string read_file(const std::string& path);

/// `text` cut at '\n' (a trailing '\r' is dropped from each line). Views into `text`.
std::vector<std::string_view> split_lines(std::string_view text);

/// Whitespace-separated tokens of `line`.
std::vector<std::string_view> split_words(std::string_view line);

/// Entries of `dir` (and of its subfolders when `recursive`) for which `keep` is true, in sorted
/// order. Filesystem errors become mlip::Error naming `dir`.
std::vector<std::filesystem::path> list_dir(
    const std::string& dir, bool recursive,
    const std::function<bool(const std::filesystem::directory_entry&)>& keep);

/// "<path>:line <n>" with n counted from 1.
std::string at_line(const std::string& path, std::size_t line_index);

/// A finite double from the whole token; throws mlip::Error "<where>: ..." naming the token and
/// `what` (e.g. "energy") when it is not a number or not finite.
double parse_number(std::string_view token, const std::string& where, const std::string& what);

/// A base-10 integer from the whole token; throws like parse_number.
long long parse_integer(std::string_view token, const std::string& where, const std::string& what);

/// Like parse_integer, but says whether `token` is an integer instead of throwing.
bool try_parse_integer(std::string_view token, long long& value);

/// Atomic number of an element symbol; throws mlip::Error "<where>: unknown element '...'".
int element_number(std::string_view symbol, const std::string& where);

/// s.validate(), rethrown with `context` appended to the message (e.g. " (frame starts at line 3)").
void validate_frame(const Structure& s, const std::string& context);

/// ASE's SQLite database ("ase-db") or ASE-LMDB ("aselmdb") by index (io_ase_db.cpp); nullptr
/// for other formats.
std::unique_ptr<FrameReader> open_ase_reader(const std::string& path, const std::string& format,
                                             const ReadOptions& options);

Mat3 scaled(const Mat3& m, double factor);

/// A frame as ASE's databases and MACE's HDF5 files store it, in the file's units.
struct RawFrame {
  std::vector<int> numbers;
  std::vector<double> positions, cell, forces;
  std::vector<double> stress;   // ASE's: 6 Voigt values xx yy zz yz xz xy or 9, positive under tension
  std::vector<double> virial;   // 9 values or 6 Voigt, energy units, positive under compression (MACE's)
  std::array<bool, 3> pbc{false, false, false};
  std::optional<double> energy;
  double weight = 1.0;
};

/// `r` as a frame, validated: units applied, and the virial given or from the stress
/// (virial = -stress * volume). Errors name `where`.
Structure to_structure(const RawFrame& r, const ReadOptions& options, const std::string& where);

/// The regular files in `dir` (not below) whose extension is one of `extensions` (lowercase, with
/// the dot; compared without case), in number order: train_2.h5 before train_10.h5.
std::vector<std::string> data_files(const std::string& dir, std::initializer_list<std::string_view> extensions);

/// The frames of `parts`, one after the other (a folder of files read as one source, `name`).
std::unique_ptr<FrameReader> concat_readers(std::vector<std::unique_ptr<FrameReader>> parts, const std::string& name);

/// MACE's HDF5 files ("mace-hdf5": a file, or a folder of *.h5 / *.hdf5 shards) by index
/// (io_mace_hdf5.cpp).
std::unique_ptr<FrameReader> open_mace_hdf5(const std::string& path, const ReadOptions& options);

}  // namespace mlip::io_detail
