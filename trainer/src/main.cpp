// mlip-trainer: train, export and test machine-learning interatomic potentials.
//
//   mlip-trainer train CONFIG.yaml [--set key=value ...] [--resume] [--committee K]
//   mlip-trainer deviation MODEL1 MODEL2 [...] DATA [-o model_devi.out] [--trust-lo F --trust-hi F --candidates out.xyz]
//   mlip-trainer export RUN_DIR/checkpoints/best -o model.pt [--compress]
//   mlip-trainer compress MODEL.pt|CHECKPOINT -o model-compressed.pt [--min-distance R]
//   mlip-trainer test MODEL.pt DATA [--format F] [--per-frame out.csv]
//   mlip-trainer convert DATA out.data --types O H [--frame K] [--replicate NA NB NC]
//   mlip-trainer pack DATA... -o PACK_DIR [--append] | pack --verify PACK_DIR
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "communicator.h"
#include "config.h"
#include "mlip/error.h"
#include "mlip/data/file_io.h"
#include "mlip/data/io.h"
#include "mlip/data/pack.h"
#include "mlip/potentials.h"
#include "mlip/model/runtime.h"
#include "training.h"

namespace fs = std::filesystem;
using namespace mlip;
using namespace mlip::trainer;

namespace {

void print_line(const std::string& s) { std::printf("%s\n", s.c_str()); }

int fail_with_current(Communicator* comm);

int run_train(Communicator& comm, const std::string& config_path, const std::vector<std::string>& overrides,
              bool resume, int64_t stop_after, int64_t profile = 0) {
  Config config = read_config(config_path, overrides);
  Trainer trainer(config, config_text(config_path, overrides), comm);
  try {
    trainer.profile_steps(profile);
    trainer.run(resume, stop_after);
  } catch (const std::exception&) {
    // A failing rank of several ends the job here, with the trainer alive: destroying it first
    // would destroy its NCCL communicator, which may wait for all-reduces whose peers never come.
    if (comm.size() > 1) return fail_with_current(&comm);
    throw;
  }
  return 0;
}

// A committee for model deviation: K models that differ only in their seeds (model.seed and
// training.seed + k), trained one after the other into output.dir/model-k (each with all ranks).
int run_committee(Communicator& comm, const std::string& config_path, std::vector<std::string> overrides,
                  bool resume, int64_t stop_after, int members) {
  const Config base = read_config(config_path, overrides);
  std::vector<std::string> models;
  for (int k = 0; k < members; ++k) {
    const std::string dir = (fs::path(base.output_dir) / fmt::format("model-{}", k)).string();
    std::vector<std::string> member = overrides;
    member.push_back(fmt::format("model.seed={}", base.model.seed + k));
    member.push_back(fmt::format("training.seed={}", base.seed + k));
    member.push_back("output.dir=" + dir);
    if (comm.rank() == 0) std::printf("committee: model %d of %d -> %s\n", k + 1, members, dir.c_str());
    run_train(comm, config_path, member, resume, stop_after);
    models.push_back((fs::path(dir) / "model.pt").string());
  }
  if (comm.rank() == 0) {
    std::string list;
    for (const auto& m : models) list += " " + m;
    std::printf("committee of %d models:%s\n(pair_style mlip%s out_freq N, or mlip-trainer deviation%s DATA)\n",
                members, list.c_str(), list.c_str(), list.c_str());
  }
  return 0;
}

int run_deviation(std::vector<std::string> inputs, const DeviationOptions& options) {
  if (inputs.size() < 3) throw Error("deviation: expected two or more model files and then a data file");
  const std::string data = inputs.back();
  inputs.pop_back();
  const DeviationCounts c = model_deviation(inputs, data, options, print_line);
  std::printf("wrote %s: %zu frames\n", options.output.c_str(), c.frames);
  std::printf("max force deviation below %g eV/A (accurate): %zu; candidates for labelling: %zu; above %s (failed): %zu\n",
              options.trust_lo, c.accurate, c.candidates,
              options.trust_hi > 0 ? fmt::format("{} eV/A", options.trust_hi).c_str() : "(no --trust-hi)", c.failed);
  if (!options.candidates.empty()) std::printf("candidates written to %s\n", options.candidates.c_str());
  return 0;
}

int run_export(const std::string& checkpoint, const std::string& output, const ExportOptions& options) {
  export_checkpoint(checkpoint, output, {{"exported_from", fs::absolute(checkpoint).string()}}, options, print_line);
  std::printf("exported %s -> %s\n", checkpoint.c_str(), output.c_str());
  return 0;
}

int run_compress(const std::string& source, const std::string& output, const ExportOptions& options) {
  compress_file(source, output, options, print_line);
  std::printf("compressed %s -> %s\n", source.c_str(), output.c_str());
  return 0;
}

int run_convert(const std::string& input, const std::string& output, const std::string& format, const Units& units,
                int frame, const std::vector<int>& reps, const std::vector<std::string>& types) {
  ReadOptions opts;
  opts.units = units;
  std::vector<Structure> frames = read_structures(input, format, opts);
  if (frame < 0 || frame >= static_cast<int>(frames.size())) {
    throw Error(input + ": frame " + std::to_string(frame) + " does not exist (" + std::to_string(frames.size()) +
                " frames)");
  }
  Structure s = frames[frame];
  if (reps.size() == 3) s = replicate(s, reps[0], reps[1], reps[2]);
  const bool to_lammps = output.size() > 5 && output.substr(output.size() - 5) == ".data";
  if (to_lammps) {
    if (types.empty()) throw Error("convert to a LAMMPS data file needs --types (element of each atom type)");
    write_lammps_data(output, s, types);
  } else {
    write_extxyz(output, {s});
  }
  std::printf("wrote %s: %zu atoms from %s\n", output.c_str(), s.size(), s.origin.c_str());
  return 0;
}

int run_test(const std::string& model, const std::string& data, const std::string& format, const Units& units,
             const TestOptions& options) {
  const MetricSums m =
      test_model(model, data, format, units, options, [](const std::string& s) { std::printf("%s\n", s.c_str()); });
  std::printf("frames %.0f\n", m.frames);
  std::printf("energy RMSE  %s meV/atom%s\n", milli(m.energy_rmse(), 3).c_str(),
              m.energy_n > 0 ? "" : " (no frame has an energy)");
  std::printf("force RMSE   %s meV/A%s\n", milli(m.forces_rmse(), 2).c_str(), m.forces_n > 0 ? "" : " (no frame has forces)");
  if (m.virial_n > 0) std::printf("virial RMSE  %s meV/atom\n", milli(m.virial_rmse(), 3).c_str());
  if (!options.per_frame_csv.empty()) std::printf("per-frame results: %s\n", options.per_frame_csv.c_str());
  if (!options.forces_csv.empty()) std::printf("per-atom forces: %s\n", options.forces_csv.c_str());
  return 0;
}

// Adds a source's frames to `writer`; returns how many. A source with a reader by index
// (extended XYZ, ASE databases, a pack) is read in blocks, so that it need not fit in memory;
// the others are read whole. The pack is the same either way.
uint64_t pack_source(PackWriter& writer, const std::string& source, const std::string& format, const ReadOptions& read) {
  const uint32_t id = writer.add_source(source);
  if (const std::unique_ptr<FrameReader> reader = open_frame_reader(source, format, read)) return writer.add_reader(*reader, id);
  const std::vector<Structure> structures = read_structures(source, format, read);
  writer.add_all(structures, id);
  return structures.size();
}

// Packs the sources' frames (one source at a time) into `dir`; prints the throughput.
int run_pack(const std::vector<std::string>& sources, const std::string& dir, const std::string& format,
             const Units& units, const PackWriteOptions& options) {
  if (sources.empty()) throw Error("pack: no data to pack (give files or folders, then -o PACK_DIR)");
  if (dir.empty()) throw Error("pack: no output folder (-o PACK_DIR)");
  const auto start = std::chrono::steady_clock::now();
  PackWriter writer(dir, options);
  ReadOptions read;
  read.units = units;
  uint64_t frames = 0;
  for (const std::string& source : sources) {
    const uint64_t n = pack_source(writer, source, format, read);
    frames += n;
    std::printf("%s: %llu frames\n", source.c_str(), static_cast<unsigned long long>(n));
  }
  const PackManifest& m = writer.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t bytes = 0, added = 0;   // shards written by this run start at its first frame
  for (const PackShard& s : m.shards) (s.first_frame >= m.frames - frames ? added : bytes) += s.bytes;
  bytes += added;
  std::string species;
  for (const auto& e : m.species()) species += " " + e;
  std::printf("wrote %s: %llu frames added in %.1f s (%.0f frames/s, %.1f MB/s read and packed); the pack: %llu "
              "frames, %zu shards, %.1f MB, elements%s\n",
              dir.c_str(), static_cast<unsigned long long>(frames), seconds, frames / seconds,
              added / 1e6 / seconds, static_cast<unsigned long long>(m.frames),
              m.shards.size(), bytes / 1e6, species.c_str());
  return 0;
}

// One line naming the rank (in a multi-rank run), then the whole job ends: the other ranks may
// be waiting for this one in a collective (MPI or NCCL).
int fail(Communicator* comm, const char* kind, const std::string& what) {
  const bool many = comm && comm->size() > 1;
  std::fprintf(stderr, "mlip-trainer: %s%s: %s\n", kind, many ? fmt::format(" (rank {})", comm->rank()).c_str() : "",
               what.c_str());
  std::fflush(stderr);
  if (many) comm->abort(1);
  return 1;
}

// fail() with the exception being handled: its message, one line, no backtrace.
int fail_with_current(Communicator* comm) {
  try {
    throw;
  } catch (const mlip::Error& e) {
    return fail(comm, "error", e.what());
  } catch (const c10::Error& e) {
    return fail(comm, "LibTorch error", e.what_without_backtrace());
  } catch (const std::exception& e) {  // filesystem, JSON, YAML, allocation
    const std::string what = e.what();
    return fail(comm, "error", what.substr(0, what.find('\n')));
  }
}

}  // namespace

int main(int argc, char** argv) {
  mlip::prefer_avx512_kernels();  // before any tensor operation
  mlip::keep_freed_memory();
  mlip::allow_open_files();  // data in many files (packs, ASE databases) read at once
  CLI::App app{"mlip-trainer: train, export and test machine-learning interatomic potentials"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  bool resume = false;
  int threads = 0;
  auto* train = app.add_subcommand("train", "Train a model from a YAML config (see docs/config.md). Run under "
                                            "mpirun/srun for data parallelism; only rank 0 writes.");
  train->add_option("config", config_path, "YAML config file")->required()->check(CLI::ExistingFile);
  train->add_option("--set", overrides, "Override a config key, e.g. --set training.epochs=10 (repeatable)");
  train->add_flag("--resume", resume, "Continue from the latest checkpoint in output.dir");
  int64_t stop_after = 0;
  train->add_option("--stop-after-epochs", stop_after, "End this run after N epochs (resume later with --resume)");
  int64_t profile = 0;
  train->add_option("--profile", profile,
                    "Profile N optimiser steps after the first two (LibTorch's profiler, rank 0): the GPU's kernels "
                    "and copies, the host's launches, waits and operators, per step, in the log")
      ->check(CLI::PositiveNumber);
  train->add_option("--threads", threads, "LibTorch threads per rank (default: the cores the rank may run on, its CPU affinity, each shared "
                  "with the node's other ranks that may run on it)");
  int committee = 1;
  train->add_option("--committee", committee,
                    "Train K models differing only in seeds, into output.dir/model-0..K-1 (for model deviation)")
      ->check(CLI::Range(1, 64));

  std::string checkpoint, output = "model.pt";
  auto* exp = app.add_subcommand("export", "Freeze a checkpoint into a model file for pair_style mlip");
  exp->add_option("checkpoint", checkpoint, "Checkpoint folder, e.g. run/checkpoints/best")->required();
  exp->add_option("-o,--output", output, "Model file to write");
  ExportOptions export_options;
  CompressOptions& compress = export_options.compression;
  exp->add_flag("--compress", export_options.compress, "Write the compressed model (se_e2_a; see 'compress')");
  exp->add_option("--min-distance", compress.min_distance, "With --compress: see 'compress'");
  exp->add_option("--dtype", export_options.dtype,
                  "float32: a float64 model's weights in float32 for faster MD (LAMMPS still sums in float64)");

  std::string compress_source, compress_output = "model-compressed.pt";
  auto* cmp = app.add_subcommand("compress", "Replace an se_e2_a model's embedding nets by tables fused with the "
                                             "descriptor (faster MD; see docs/model-format.md)");
  cmp->add_option("model", compress_source, "Model file exported by this mlip, or a checkpoint folder")
      ->required()
      ->check(CLI::ExistingPath);
  cmp->add_option("-o,--output", compress_output, "Compressed model file to write");
  cmp->add_option("--min-distance", compress.min_distance,
                  "Shortest neighbour distance the tables cover, A (default: 0.75 x the shortest in the training "
                  "data); closer neighbours stop the run with an error");
  cmp->add_option("--tolerance", compress.tolerance, "Largest table error, relative to the largest embedding value");
  cmp->add_option("--dtype", export_options.dtype, "float32: from a float64 checkpoint (see 'export --dtype')");

  std::string model, data, format = "auto";
  TestOptions test_options;
  auto* test = app.add_subcommand("test", "Evaluate a model on labelled data: energy, force and virial RMSE");
  test->add_option("model", model, "Model file (model.pt)")->required()->check(CLI::ExistingFile);
  test->add_option("data", data, "Data file or folder")->required()->check(CLI::ExistingPath);
  test->add_option("--format", format, "auto, extxyz, deepmd, n2p2, fitsnap, ase-db, aselmdb, mace-hdf5 or pack");
  test->add_option("--per-frame", test_options.per_frame_csv, "Write per-frame results to this CSV file");
  test->add_option("--forces", test_options.forces_csv,
                   "Write reference and predicted forces of every atom to this CSV file (parity plots)");
  test->add_option("--head", test_options.head, "The head of a multi-head model to evaluate (default: the file's)");
  Units units;
  test->add_option("--length-unit", units.length, "Length unit of the data file (angstrom, bohr, nm)");
  test->add_option("--energy-unit", units.energy, "Energy unit of the data file (eV, meV, kcal/mol, kJ/mol, hartree, Ry)");
  test->add_option("--stress-unit", units.stress, "Stress unit of the data file (bar, kbar, GPa, eV/A^3)");

  std::string conv_in, conv_out, conv_format = "auto";
  Units conv_units;
  int conv_frame = 0;
  std::vector<int> conv_reps;
  std::vector<std::string> conv_types;
  auto* conv = app.add_subcommand("convert", "Write one frame of a data set as a LAMMPS data file (*.data) or "
                                             "extended XYZ (other names), optionally replicated");
  conv->add_option("input", conv_in, "Data file or folder")->required()->check(CLI::ExistingPath);
  conv->add_option("output", conv_out, "Output file: *.data for LAMMPS, else extended XYZ")->required();
  conv->add_option("--format", conv_format, "auto, extxyz, deepmd, n2p2 or fitsnap");
  conv->add_option("--frame", conv_frame, "Frame index (default 0)");
  conv->add_option("--replicate", conv_reps, "Supercell counts along a, b, c")->expected(3);
  conv->add_option("--types", conv_types, "Element of each LAMMPS atom type, in order")->expected(1, 118);
  conv->add_option("--length-unit", conv_units.length, "Length unit of the input");
  conv->add_option("--energy-unit", conv_units.energy, "Energy unit of the input");

  std::vector<std::string> devi_inputs;
  DeviationOptions devi;
  auto* dev = app.add_subcommand("deviation", "Model deviation of a committee on every frame of a data file "
                                              "(as pair_style mlip's out_file), and the frames to label");
  dev->add_option("inputs", devi_inputs, "Two or more model files, then the data file or folder")->required()->expected(3, 1000);
  dev->add_option("-o,--output", devi.output, "Deviation file to write (one line per frame)");
  dev->add_option("--format", devi.format, "auto, extxyz, deepmd, n2p2, fitsnap, lammps-dump, ase-db, aselmdb, mace-hdf5 or pack");
  dev->add_option("--types", devi.type_elements, "LAMMPS dump with types, not elements: the element of each type")
      ->expected(1, 118);
  dev->add_option("--relative", devi.relative, "Force deviation relative to |F| + this (eV/A)");
  dev->add_option("--trust-lo", devi.trust_lo, "Frames whose max force deviation is at least this (eV/A)...");
  dev->add_option("--trust-hi", devi.trust_hi, "...and below this (eV/A; default: no bound) are candidates");
  dev->add_option("--candidates", devi.candidates, "Write the candidate frames to this extended XYZ file");
  dev->add_option("--length-unit", devi.units.length, "Length unit of the data file");
  dev->add_option("--energy-unit", devi.units.energy, "Energy unit of the data file");

  std::string import_spec, import_weights, import_output = "model.pt";
  auto* imp = app.add_subcommand("import", "Write a model file from settings (JSON) and weights (torch.save'd dict) "
                                           "made elsewhere, e.g. by python/mace_to_mlip.py from a mace-torch model");
  imp->add_option("spec", import_spec, "JSON: architecture, species, cutoff, dtype, hyperparameters")
      ->required()
      ->check(CLI::ExistingFile);
  imp->add_option("weights", import_weights, "torch.save'd dict of tensors by the model's names")
      ->required()
      ->check(CLI::ExistingFile);
  imp->add_option("-o,--output", import_output, "Model file to write");

  std::vector<std::string> pack_sources;
  std::string pack_dir, pack_verify, pack_format = "auto";
  Units pack_units;
  PackWriteOptions pack_options;
  double shard_mb = 256;
  auto* pk = app.add_subcommand("pack", "Write data into a packed data set (binary shards, their indexes and a "
                                        "manifest; docs/data-format.md) that training reads frame by frame, or "
                                        "check one (--verify)");
  pk->add_option("sources", pack_sources, "Data files or folders (the formats 'train' reads)");
  pk->add_option("-o,--output", pack_dir, "Pack folder to write");
  pk->add_flag("--append", pack_options.append, "Add the sources to the pack in the output folder");
  pk->add_option("--verify", pack_verify, "Check the pack in this folder: files, checksums, indexes, every frame");
  pk->add_option("--format", pack_format, "auto, extxyz, deepmd, n2p2, fitsnap, lammps-dump, ase-db, aselmdb or mace-hdf5");
  pk->add_option("--shard-mb", shard_mb, "Start a new shard file after this many MB (default 256)")
      ->check(CLI::Range(0.001, 1e6));
  pk->add_option("--length-unit", pack_units.length, "Length unit of the sources");
  pk->add_option("--energy-unit", pack_units.energy, "Energy unit of the sources");
  pk->add_option("--stress-unit", pack_units.stress, "Stress unit of the sources");

  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Communicator> comm;
  try {
    comm = make_mpi_communicator(&argc, &argv);
    if (threads <= 0) threads = default_threads(*comm);
    at::set_num_threads(threads);
    if (const std::string note = threads_beyond_cores(threads); !note.empty() && comm->is_root())
      std::fprintf(stderr, "mlip-trainer: WARNING: %s\n", note.c_str());
    if (*train && committee > 1) return run_committee(*comm, config_path, overrides, resume, stop_after, committee);
    if (*train) return run_train(*comm, config_path, overrides, resume, stop_after, profile);
    if (*dev) return run_deviation(devi_inputs, devi);
    if (*exp) return run_export(checkpoint, output, export_options);
    if (*cmp) return run_compress(compress_source, compress_output, export_options);
    if (*test) return run_test(model, data, format, units, test_options);
    if (*imp) {
      import_model(import_spec, import_weights, import_output, print_line);
      std::printf("wrote %s\n", import_output.c_str());
      return 0;
    }
    if (*pk && !pack_verify.empty()) {
      verify_pack(pack_verify, print_line);
      std::printf("%s: a good pack of %llu frames\n", pack_verify.c_str(),
                  static_cast<unsigned long long>(read_pack_manifest(pack_verify).frames));
      return 0;
    }
    if (*pk) {
      pack_options.shard_bytes = static_cast<uint64_t>(shard_mb * 1e6);
      return run_pack(pack_sources, pack_dir, pack_format, pack_units, pack_options);
    }
    if (*conv) return run_convert(conv_in, conv_out, conv_format, conv_units, conv_frame, conv_reps, conv_types);
  } catch (const std::exception&) {
    return fail_with_current(comm.get());
  }
  return 0;
}
