// Packed data sets (mlip/data/pack.h): frames back bit for bit across shards and appends, the
// statistics in the manifest, and every damaged pack ends in an error that names the file and
// the frame, with the previous pack still readable after an interrupted write.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "mlip/data/file_io.h"
#include "mlip/data/io.h"
#include "mlip/data/pack.h"
#include "mlip/error.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Frames of every kind: labels present or not, periodic or not, triclinic, weights.
std::vector<Structure> frames(int n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Structure> out;
  for (int k = 0; k < n; ++k) {
    Structure s;
    const int atoms = 3 + k % 5;
    for (int i = 0; i < atoms; ++i) {
      s.positions.push_back({3 * u(rng), 3 * u(rng), 3 * u(rng)});
      s.numbers.push_back(i % 3 == 0 ? 8 : (k % 4 == 3 ? 6 : 1));
    }
    if (k % 3 != 2) {
      s.cell.lattice = {{{8 + u(rng), 0, 0}, {u(rng), 8, 0}, {u(rng), u(rng), 9}}};
      s.cell.pbc = {true, true, k % 2 == 0};
    }
    if (k % 5 != 4) s.energy = -10 * atoms + u(rng);
    if (k % 4 != 1)
      for (int i = 0; i < atoms; ++i) s.forces.push_back({u(rng), u(rng), u(rng)});
    if (k % 2 == 0) s.virial = Mat3{{{u(rng), u(rng), u(rng)}, {u(rng), u(rng), u(rng)}, {u(rng), u(rng), u(rng)}}};
    s.weight = 1 + k % 3;
    out.push_back(s);
  }
  return out;
}

void pack(const std::string& dir, const std::vector<Structure>& fs, const std::string& source, bool append = false,
          uint64_t shard_bytes = 2000) {
  PackWriteOptions o;
  o.append = append;
  o.shard_bytes = shard_bytes;
  PackWriter w(dir, o);
  const uint32_t id = w.add_source(source);
  for (std::size_t k = 0; k < fs.size(); ++k) w.add(fs[k], id, k);
  w.finish();
}

void expect_same(const Structure& a, const Structure& b) {
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.numbers, b.numbers);
  EXPECT_EQ(a.cell.lattice, b.cell.lattice);
  EXPECT_EQ(a.cell.pbc, b.cell.pbc);
  EXPECT_EQ(a.energy, b.energy);
  EXPECT_EQ(a.forces, b.forces);
  EXPECT_EQ(a.virial, b.virial);
  EXPECT_EQ(a.weight, b.weight);
}

using testing::error_of;
using testing::has;

TEST(Pack, FramesComeBackBitForBitAcrossShardsAndAppends) {
  TempDir tmp("mlip_test_pack_roundtrip");
  const std::string dir = (tmp.path / "p").string();
  const auto first = frames(23, 1), second = frames(9, 2);
  pack(dir, first, "a.xyz");
  pack(dir, second, "b.xyz", /*append=*/true);

  const PackReader r(dir);
  ASSERT_EQ(r.size(), first.size() + second.size());
  EXPECT_GT(r.manifest().shards.size(), 4u);  // 2000-byte shards
  for (uint64_t i = 0; i < r.size(); ++i) {
    const Structure& want = i < first.size() ? first[i] : second[i - first.size()];
    const Structure got = r.frame(i);
    SCOPED_TRACE(got.origin);
    expect_same(got, want);
    EXPECT_EQ(r.atoms(i), want.size());
  }
  EXPECT_EQ(r.frame(24).origin, "b.xyz:frame 1 (pack " + dir + ", frame 24)");
  // read_structures reads a pack folder as such.
  EXPECT_EQ(detect_format(dir), "pack");
  const std::vector<Structure> all = read_structures(dir);
  ASSERT_EQ(all.size(), r.size());
  expect_same(all[30], second[7]);
  std::vector<std::string> lines;
  verify_pack(dir, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(lines.size(), r.manifest().shards.size());
  EXPECT_EQ(r.manifest().species(), (std::vector<std::string>{"H", "C", "O"}));
}

TEST(Pack, ASourceReadInBlocksPacksAsTheSameFramesInMemory) {
  // More frames than a block (PackWriter::kBlock), from an extended XYZ file by its offset index,
  // as `mlip-trainer pack` reads it, against the same file parsed whole: the same bytes.
  TempDir tmp("mlip_test_pack_blocks");
  const std::string xyz = (tmp.path / "many.xyz").string();
  std::vector<Structure> many = frames(2 * PackWriter::kBlock + 37, 4);
  for (Structure& s : many) s.weight = 1;   // extended XYZ keeps no weights
  write_extxyz(xyz, many);
  const auto write = [&](const std::string& name, bool by_reader) {
    const std::string dir = (tmp.path / name).string();
    PackWriteOptions o;
    o.shard_bytes = 200000;
    PackWriter w(dir, o);
    const uint32_t id = w.add_source(xyz);
    if (by_reader) {
      EXPECT_EQ(w.add_reader(ExtxyzFile(xyz, {}), id), many.size());
    } else {
      w.add_all(read_structures(xyz), id);
    }
    w.finish();
    return dir;
  };
  const std::string whole = write("whole", false), blocks = write("blocks", true);
  const auto text = [](const std::string& dir) {
    std::ifstream in(fs::path(dir) / "manifest.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(text(whole), text(blocks));
  const PackReader r(blocks);
  const std::vector<Structure> parsed = read_structures(xyz);
  ASSERT_EQ(r.size(), many.size());
  EXPECT_GT(r.manifest().shards.size(), 2u);
  for (uint64_t i : {uint64_t{0}, uint64_t{1023}, uint64_t{1024}, uint64_t{2048}, uint64_t{2084}}) {
    SCOPED_TRACE(i);
    expect_same(r.frame(i), parsed[i]);
  }
}

TEST(Pack, ManifestStatisticsAreTheFramesSums) {
  TempDir tmp("mlip_test_pack_stats");
  const std::string dir = (tmp.path / "p").string();
  const auto fs1 = frames(17, 3), fs2 = frames(5, 4);
  pack(dir, fs1, "a");
  pack(dir, fs2, "b", true);
  const PackStats& st = read_pack_manifest(dir).stats;
  uint64_t atoms = 0, energy_frames = 0, oxygens = 0;
  double f2 = 0, e_o = 0, hh = 0;
  for (const auto* set : {&fs1, &fs2})
    for (const Structure& s : *set) {
      atoms += s.size();
      int n_o = 0, n_h = 0;
      for (int z : s.numbers) n_o += z == 8, n_h += z == 1;
      oxygens += n_o;
      for (const auto& f : s.forces) f2 += f[0] * f[0] + f[1] * f[1] + f[2] * f[2];
      if (s.energy) ++energy_frames, e_o += n_o * *s.energy, hh += double(n_h) * n_h;
    }
  EXPECT_EQ(st.atoms, atoms);
  EXPECT_EQ(st.atoms_by_z[8], oxygens);
  EXPECT_EQ(st.energy_frames, energy_frames);
  EXPECT_NEAR(st.force_squares, f2, 1e-12 * f2);
  const auto row = [&](int z) {
    return static_cast<std::size_t>(std::find(st.e0_numbers.begin(), st.e0_numbers.end(), z) - st.e0_numbers.begin());
  };
  EXPECT_NEAR(st.counts_energy[row(8)], e_o, 1e-12 * std::abs(e_o));
  EXPECT_DOUBLE_EQ(st.counts_counts[row(1)][row(1)], hh);
}

// A fresh pack in a folder with two shards, for damaging.
struct Damaged {
  TempDir tmp;
  std::string dir;
  explicit Damaged(const std::string& name) : tmp(name), dir((tmp.path / "p").string()) {
    pack(dir, frames(12, 5), "src.xyz", false, 1500);
  }
  fs::path shard(int k, const char* ext = ".bin") const {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%05d%s", k, ext);
    return fs::path(dir) / name;
  }
  void poke(const fs::path& file, uint64_t offset, char byte) const {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(byte);
  }
};

TEST(Pack, DamagedPacksGiveErrorsThatNameTheFileAndFrame) {
  const auto verify = [](const std::string& dir) { return error_of([&] { verify_pack(dir, [](const std::string&) {}); }); };
  {
    Damaged d("mlip_test_pack_truncated");
    fs::resize_file(d.shard(1), fs::file_size(d.shard(1)) - 10);
    const std::string e = error_of([&] { PackReader r(d.dir); });
    EXPECT_TRUE(has(e, "shard-00001.bin") && has(e, "truncated")) << e;
  }
  {
    Damaged d("mlip_test_pack_flipped");
    d.poke(d.shard(0), 250, 0x7f);  // inside frame 0's positions
    const std::string e = verify(d.dir);
    EXPECT_TRUE(has(e, "shard-00000.bin") && has(e, "checksum")) << e;
  }
  {
    Damaged d("mlip_test_pack_index");
    d.poke(d.shard(0, ".idx"), 8, 0x10);   // frame 1's offset points into frame 0
    const std::string e = verify(d.dir);
    EXPECT_TRUE(has(e, "shard-00000.idx") && has(e, "checksum")) << e;
    // Reading the frame itself (without the checksums) also says so.
    const std::string read = error_of([&] { PackReader(d.dir).frame(1); });
    EXPECT_TRUE(has(read, "shard-00000.bin, frame 1") && has(read, "disagrees")) << read;
  }
  {
    // An entry inside the index pointing past its shard: opening reads only the first and last
    // entries (no pass over the index, whatever its size); the frames that use it say so.
    Damaged d("mlip_test_pack_index_middle");
    d.poke(d.shard(0, ".idx"), 8 * 2 + 6, 0x40);   // frame 2's offset, far past the shard's end
    const PackReader r(d.dir);
    EXPECT_NO_THROW(r.frame(0));
    for (std::size_t i : {1, 2}) {
      const std::string e = error_of([&] { r.frame(i); });
      EXPECT_TRUE(has(e, "shard-00000.idx disagrees with its shard at frame " + std::to_string(i))) << e;
    }
    EXPECT_TRUE(has(verify(d.dir), "shard-00000.idx")) << verify(d.dir);
  }
  {
    Damaged d("mlip_test_pack_missing");
    fs::remove(d.shard(1));
    const std::string e = error_of([&] { PackReader r(d.dir); });
    EXPECT_TRUE(has(e, "shard-00001.bin") && has(e, "missing")) << e;
  }
  {
    Damaged d("mlip_test_pack_manifest");
    std::ofstream(fs::path(d.dir) / "manifest.json") << "{\"format\": \"mlip-pack\", \"version\": 99}";
    const std::string e = error_of([&] { PackReader r(d.dir); });
    EXPECT_TRUE(has(e, "manifest.json") && has(e, "version 99")) << e;
  }
  {
    Damaged d("mlip_test_pack_frame_range");
    const std::string e = error_of([&] { PackReader(d.dir).frame(12); });
    EXPECT_TRUE(has(e, "frame 12 does not exist (12 frames)")) << e;
  }
}

TEST(Pack, AtomCountsComeFromTheIndexAndAreCheckedAgainstTheRecords) {
  // Version 2 indexes list each frame's atom count after the offsets: batches by atoms read them,
  // one read a shard, instead of a record header a frame.
  Damaged d("mlip_test_pack_atoms");
  const auto want = frames(12, 5);
  const PackReader r(d.dir);
  EXPECT_EQ(r.manifest().version, kPackVersion);
  std::vector<uint32_t> sizes;
  for (const Structure& s : want) sizes.push_back(static_cast<uint32_t>(s.size()));
  EXPECT_EQ(r.atom_counts(), sizes);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.atoms(i), want[i].size());
  const PackShard& s0 = r.manifest().shards[0];
  EXPECT_EQ(fs::file_size(d.shard(0, ".idx")), 8 * (s0.frames + 1) + 4 * s0.frames);
  // A count that is not its record's: atoms() says what the index says, reading the frame says
  // that they disagree, and verify finds the index changed.
  d.poke(d.shard(0, ".idx"), 8 * (s0.frames + 1) + 4 * 1, static_cast<char>(want[1].size() + 1));
  const PackReader damaged(d.dir);
  EXPECT_EQ(damaged.atoms(1), want[1].size() + 1);
  const std::string e = error_of([&] { damaged.frame(1); });
  EXPECT_TRUE(has(e, "shard-00000.bin, frame 1: the record has " + std::to_string(want[1].size()) +
                         " atoms, shard-00000.idx says " + std::to_string(want[1].size() + 1))) << e;
  const std::string v = error_of([&] { verify_pack(d.dir, [](const std::string&) {}); });
  EXPECT_TRUE(has(v, "shard-00000.idx") && has(v, "checksum")) << v;
}

TEST(Pack, AVersion1PackStillReadsVerifiesAndAppendsInVersion1) {
  // tests/data/pack-v1: written by mlip at 7ba90c0 (offsets alone in its indexes) from frames.xyz.
  const fs::path data = fs::path(MLIP_SOURCE_DIR) / "tests/data/pack-v1";
  const std::vector<Structure> want = read_extxyz((data / "frames.xyz").string());
  TempDir tmp("mlip_test_pack_v1");
  const std::string dir = (tmp.path / "pack").string();
  fs::copy(data / "pack", dir, fs::copy_options::recursive);
  const auto check = [&](const PackReader& r, const std::vector<Structure>& expected) {
    EXPECT_EQ(r.manifest().version, 1);
    ASSERT_EQ(r.size(), expected.size());
    std::vector<uint32_t> sizes;
    for (std::size_t i = 0; i < r.size(); ++i) {
      expect_same(r.frame(i), expected[i]);
      EXPECT_EQ(r.atoms(i), expected[i].size());
      sizes.push_back(static_cast<uint32_t>(expected[i].size()));
    }
    EXPECT_EQ(r.atom_counts(), sizes);   // from the records' headers
    EXPECT_NO_THROW(verify_pack(dir, [](const std::string&) {}));
  };
  ASSERT_EQ(want.size(), 7u);
  check(PackReader(dir), want);
  // An append keeps the pack's version: its new shard's index holds offsets alone.
  const auto more = frames(3, 9);
  pack(dir, more, "more.xyz", /*append=*/true, 1u << 20);
  std::vector<Structure> all = want;
  all.insert(all.end(), more.begin(), more.end());
  const PackReader r(dir);
  check(r, all);
  const PackShard& last = r.manifest().shards.back();
  EXPECT_EQ(fs::file_size(fs::path(dir) / last.index), 8 * (last.frames + 1));
  // The extended XYZ reader by index has the atom counts from its pass over the file.
  EXPECT_EQ(ExtxyzFile((data / "frames.xyz").string(), {}).atom_counts(),
            (std::vector<uint32_t>{3, 4, 5, 6, 7, 8, 9}));
}

TEST(Pack, ManyPacksOpenAtOnceNeedTheOpenFileLimitRaised) {
  // Each pack keeps up to 16 shards open, two files each: 12 packs of 6 shards want 144 files.
  // Under a soft limit of 64 the reader's error says so; allow_open_files() (mlip-trainer calls
  // it at start) raises the limit to the hard one, and then they all read.
  TempDir tmp("mlip_test_pack_open_files");
  std::vector<std::string> dirs;
  for (int k = 0; k < 12; ++k) {
    dirs.push_back((tmp.path / ("p" + std::to_string(k))).string());
    pack(dirs.back(), frames(12, k), "src.xyz", false, 1000);
  }
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 256) GTEST_SKIP() << "hard limit on open files below 256";
  const auto read_all = [&] {
    std::vector<PackReader> readers;
    for (const std::string& d : dirs) {
      readers.emplace_back(d);
      for (std::size_t i = 0; i < readers.back().size(); ++i) readers.back().frame(i);
    }
  };
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const std::string e = error_of(read_all);
  const long raised = allow_open_files();
  std::string after;
  try {
    read_all();
  } catch (const std::exception& x) {
    after = x.what();
  }
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_TRUE(has(e, "cannot open") && has(e, "this process may have 64 open files: raise `ulimit -n`")) << e;
  EXPECT_GE(raised, 256);
  EXPECT_EQ(after, "");
}

TEST(Pack, AnInterruptedWriteLeavesThePreviousPack) {
  TempDir tmp("mlip_test_pack_interrupted");
  const std::string dir = (tmp.path / "p").string();
  {
    PackWriter w(dir);   // never finished: no manifest, so no pack
    w.add(frames(1, 6)[0], w.add_source("a"), 0);
  }
  EXPECT_TRUE(has(error_of([&] { PackReader r(dir); }), "no manifest.json")) << error_of([&] { PackReader r(dir); });
  pack(dir, frames(4, 6), "a");
  {
    PackWriteOptions o;
    o.append = true;
    o.shard_bytes = 100;   // shards written and closed, the manifest not
    PackWriter w(dir, o);
    const uint32_t id = w.add_source("b");
    for (const Structure& s : frames(6, 7)) w.add(s, id, 0);
  }
  const PackReader r(dir);
  EXPECT_EQ(r.size(), 4u);
  verify_pack(dir, [](const std::string&) {});
  // Packing again into a pack's folder without --append is refused.
  const std::string e = error_of([&] { PackWriter w(dir); });
  EXPECT_TRUE(has(e, "already holds a pack") && has(e, "--append")) << e;
  // A pack holds eV and angstrom: units given for it are an error.
  ReadOptions o;
  o.units.energy = "kcal/mol";
  EXPECT_TRUE(has(error_of([&] { read_structures(dir, "auto", o); }), "give it no units"));
}

TEST(Pack, InvalidFramesAreRefusedWhenPacked) {
  TempDir tmp("mlip_test_pack_invalid");
  Structure s = frames(1, 8)[0];
  s.positions[1][2] = std::nan("");
  s.origin = "bad.xyz:frame 3";
  PackWriter w((tmp.path / "p").string());
  const uint32_t id = w.add_source("bad.xyz");
  EXPECT_TRUE(has(error_of([&] { w.add(s, id, 3); }), "bad.xyz:frame 3"));
}

}  // namespace
}  // namespace mlip
