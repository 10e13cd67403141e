// Readers and a writer for training data: extended XYZ (as ASE writes it), DeePMD npy systems,
// n2p2/RuNNer input.data and FitSNAP JSON. Every reader returns Structures in mlip's units (eV, Å,
// eV/Å, virial in eV) with the sign conventions of structure.h, and sets `origin` to
// "<path>:frame N" (N counts from 0 within the file or DeePMD system).
//
// Every problem is an mlip::Error whose message names the file and the line or frame, e.g.
//   "data/x.xyz:line 14 (frame 1): atom line has 6 columns, Properties declares 7".
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mlip/data/structure.h"

namespace mlip {

/// The units a file's numbers are in, and their factors to mlip's units. Unit names are matched
/// exactly (so that meV and MeV cannot be confused); an unknown name is an mlip::Error.
struct Units {
  std::string length = "angstrom";  // angstrom (A, Ang) | bohr | nm
  std::string energy = "eV";        // eV | meV | kcal/mol | kJ/mol | hartree (Ha) | Ry
  std::string stress = "";          // bar | kbar | GPa | eV/A^3 ; "" = the format's default

  double length_factor() const;  // file length -> Å
  double energy_factor() const;  // file energy -> eV
  double force_factor() const;   // file energy/length -> eV/Å
  /// File stress -> eV/Å^3. When `stress` is empty, `format_default` is used; when that is empty
  /// too, the stress is taken to be in energy/length^3 of this Units (ASE's convention).
  double stress_factor(const std::string& format_default = "") const;
};

struct ReadOptions {
  Units units;
  /// LAMMPS dumps without an element column: the element of each atom type (type 1 first).
  std::vector<std::string> type_elements;
};

/// Extended XYZ as ASE writes and reads it: the comment line holds key=value pairs (values bare,
/// "quoted", 'quoted', {braced} or [bracketed]; a bare key means T). Recognised keys (case
/// sensitive, as in ASE): Lattice (9 numbers, rows a b c), Properties (name:type:count triples;
/// species:S:1 or Z:I:1, pos:R:3, forces:R:3 or force:R:3; other columns are skipped by their
/// declared width; default species:S:1:pos:R:3), pbc (default "T T T" with a Lattice, else
/// "F F F"), energy, virial (9 numbers, energy units), stress (9 numbers, or 6 in Voigt order
/// xx yy zz yz xz xy; positive under tension, ASE's sign, so virial = -stress * volume) and weight.
/// 3x3 values other than Lattice are flattened in Fortran order, as ASE does. Only `energy` is read
/// as the energy label: `free_energy` and other keys are ignored. If both virial and stress are
/// given they must agree.
std::vector<Structure> read_extxyz(const std::string& path, const ReadOptions& options = {});

/// Writes frames as extended XYZ that read_extxyz and ASE read back exactly: Lattice (when the cell
/// is nonzero), Properties=species:S:1:pos:R:3[:forces:R:3], energy, virial (9 numbers, eV), weight
/// (when not 1), pbc. Numbers are written in their shortest exact form. The file is written to a
/// temporary name and renamed, so a reader never sees half a file.
void write_extxyz(const std::string& path, const std::vector<Structure>& frames);

/// write_extxyz frame by frame, holding none of them: to `path`.tmp, renamed to `path` by
/// finish(). Unfinished (an error, or destroyed before finish), it removes the .tmp and leaves
/// `path` as it was. add() validates the frame; its errors name the file and the frame.
class ExtxyzWriter {
 public:
  explicit ExtxyzWriter(const std::string& path);
  ~ExtxyzWriter();
  ExtxyzWriter(const ExtxyzWriter&) = delete;
  ExtxyzWriter& operator=(const ExtxyzWriter&) = delete;
  void add(const Structure& s);
  void finish();

 private:
  std::string path_, tmp_;
  std::unique_ptr<std::ofstream> file_;
  std::size_t frames_ = 0;
};

/// Writes a LAMMPS data file (atom_style atomic, units metal) of `frame`: atom types follow
/// `type_elements` (type 1 = first element; an atom of another element is an error naming it).
/// A triclinic cell is rotated into LAMMPS's convention (a along x, b in the xy plane), and the
/// positions with it. Non-periodic directions get the atoms' extent plus `padding` Å. Written to a
/// temporary name and renamed.
void write_lammps_data(const std::string& path, const Structure& frame, const std::vector<std::string>& type_elements,
                       double padding = 10.0);

/// One DeePMD system: type.raw (one type index per atom), type_map.raw (element names, one per
/// type), and set.*/ folders (read in sorted order, frames numbered across sets) with box.npy
/// (nframes, 9), coord.npy (nframes, 3N), and optional energy.npy (nframes), force.npy (nframes, 3N)
/// and virial.npy (nframes, 9; eV, the same sign as mlip's). Periodic in x, y and z unless the
/// system has a `nopbc` file.
std::vector<Structure> read_deepmd(const std::string& system_dir, const ReadOptions& options = {});

/// n2p2/RuNNer input.data: begin / comment / lattice (0 or 3 lines, rows a b c) /
/// atom x y z element charge atomic_energy fx fy fz / energy / charge / end. A frame without
/// lattice lines is non-periodic. Units follow `options` (n2p2 files are often in Bohr and Hartree).
std::vector<Structure> read_n2p2(const std::string& path, const ReadOptions& options = {});

/// FitSNAP JSON: leading `#` comment lines, then {"Dataset": {"Data": [{...}], "*Style": ...}}.
/// Each configuration needs AtomTypes, Positions and Lattice (rows a b c); NumAtoms, Energy,
/// Forces and Stress (3x3) are optional. The Stress is a pressure tensor, positive under
/// compression (the opposite of ASE's sign), in bar by default, so virial = +stress * volume. Style
/// keys in the file, when present, must agree with `options`. A directory is read as all *.json
/// files below it, recursively, in sorted path order.
std::vector<Structure> read_fitsnap_json(const std::string& path_or_dir, const ReadOptions& options = {});

/// A LAMMPS text dump (dump custom or atom): per frame ITEM: TIMESTEP, NUMBER OF ATOMS, BOX BOUNDS
/// (orthogonal, or triclinic with tilts: the cell is rebuilt from LAMMPS's bounding box; pp =
/// periodic) and ATOMS with positions (x y z, unwrapped xu yu zu or scaled xs ys zs) and the
/// element column or types mapped by options.type_elements. No labels are read (a dump holds a
/// model's forces, not reference ones). Lengths in options.units (units metal and real: Å).
std::vector<Structure> read_lammps_dump(const std::string& path, const ReadOptions& options = {});

/// ASE's SQLite database (*.db, as ase.db.connect writes it; schema versions 5-9): every row in id
/// order, with the stored calculator results: energy, forces and stress (6 Voigt values xx yy zz
/// yz xz xy, or 9, positive under tension, so virial = -stress * volume), and the key-value pair
/// `weight` when present. `origin` is "<path>:frame K (id N)".
std::vector<Structure> read_ase_db(const std::string& path, const ReadOptions& options = {});

/// fairchem's ASE-LMDB (*.aselmdb: one LMDB file, ase_db_backends.aselmdb): rows keyed by their
/// id, each zlib-compressed JSON as ase.io.jsonio writes it; read as read_ase_db reads its rows.
/// A folder: its *.aselmdb and *.lmdb files in number order (io_detail::data_files), as fairchem ships its data sets.
std::vector<Structure> read_aselmdb(const std::string& path, const ReadOptions& options = {});

/// MACE's HDF5 data (mace-torch's preprocess_data.py; mace/data/utils.py
/// save_configurations_as_HDF5): a file, or a folder of *.h5 / *.hdf5 shards in number order.
/// Each config_batch_B/config_J group gives a frame: atomic_numbers, positions, cell, pbc,
/// weight, and from properties/ the energy, forces and virials (3x3 or 6 Voigt values, energy units) or else the
/// stress (as ASE's: virial = -stress * volume); the string "None" or a property weight of 0
/// means absent. A property weight other than 0 or 1 is an error (mlip weighs whole frames).
/// `origin` is "<file>:frame K" (K counted within the file).
std::vector<Structure> read_mace_hdf5(const std::string& path, const ReadOptions& options = {});

/// The format `read_structures` would pick for `path`: "pack" for a directory with a pack's
/// manifest.json (mlip/data/pack.h), "ase-db" for *.db, "aselmdb" for *.aselmdb and *.lmdb and
/// a directory of them,
/// "mace-hdf5" for *.h5, *.hdf5 and a directory of them,
/// "deepmd" for a directory with type.raw or
/// with DeePMD systems below it, "fitsnap" for *.json or a directory with *.json files below it,
/// "extxyz" for *.xyz and *.extxyz, "n2p2" for input.data*, "lammps-dump" for *.dump, *.lammpstrj
/// and files that start with "ITEM: TIMESTEP". Throws mlip::Error if none fits.
std::string detect_format(const std::string& path);

/// Reads `path` in `format` ("auto", "extxyz", "deepmd", "n2p2", "fitsnap", "lammps-dump",
/// "ase-db", "aselmdb", "mace-hdf5" or "pack"). A directory read as
/// "deepmd" may hold several systems; they are read in sorted path order.
std::vector<Structure> read_structures(const std::string& path, const std::string& format = "auto",
                                       const ReadOptions& options = {});

/// Frames of a data file read one at a time, by index: training streams them (a data set larger
/// than memory), `test` and `deviation` go through them in order.
class FrameReader {
 public:
  virtual ~FrameReader() = default;
  virtual std::size_t size() const = 0;
  /// Frame i, checked as the whole-file reader checks it. Safe from several threads at once.
  virtual Structure frame(std::size_t i) const = 0;
  /// Its number of atoms (a reader that can tell without parsing the frame says so).
  virtual std::size_t atoms(std::size_t i) const { return frame(i).size(); }
  /// atoms(i) of every frame, in order (a reader that keeps them in a list reads it at once).
  virtual std::vector<uint32_t> atom_counts() const {
    std::vector<uint32_t> out(size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint32_t>(atoms(i));
    return out;
  }
};

/// Extended XYZ by an offset index: one pass over the file at construction that parses only each
/// frame's atom-count line (the byte offsets and first lines of the frames: 16 bytes a frame),
/// then frame(i) reads and parses frame i alone, as read_extxyz would.
class ExtxyzFile final : public FrameReader {
 public:
  ExtxyzFile(const std::string& path, const ReadOptions& options);
  std::size_t size() const override { return offsets_.size() - 1; }
  Structure frame(std::size_t i) const override;

 private:
  std::string path_;
  ReadOptions options_;
  std::vector<uint64_t> offsets_;   // of each frame's first line; the last: the end of the last frame
  std::vector<std::size_t> lines_;  // each frame's first line (0-based)
};

/// A reader by index of `path` where its format allows one: a pack (PackReader, mlip/data/pack.h;
/// it takes no units), extended XYZ (ExtxyzFile), ASE's SQLite database and ASE-LMDB (their row
/// ids listed at construction, each row read when asked for); nullptr for the others (read them
/// whole, or pack them).
std::unique_ptr<FrameReader> open_frame_reader(const std::string& path, const std::string& format = "auto",
                                               const ReadOptions& options = {});

/// A NumPy .npy array (format versions 1-3) with dtype <f4, <f8, <i4 or <i8 in C order, converted
/// to double. Fortran order and big-endian data are rejected.
struct NpyArray {
  std::vector<std::size_t> shape;
  std::vector<double> data;  // row-major, prod(shape) values
  std::string dtype;         // as in the header, e.g. "<f4"

  std::size_t rows() const { return shape.empty() ? 1 : shape[0]; }
  std::string shape_string() const;  // "(80, 576)", "(80,)"
};

NpyArray read_npy(const std::string& path);

}  // namespace mlip
