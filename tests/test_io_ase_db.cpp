// ASE's databases: the SQLite file (*.db) and the ASE-LMDB file (*.aselmdb) written by ASE itself
// (tests/python/ase_db_write.py, in the torch venv, where ase and ase_db_backends live) read to
// the same frames as the extended XYZ they came from; bad files end in errors naming them.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "mlip/data/io.h"
#include "mlip/error.h"
#include "support/error_of.h"
#include "support/same_frames.h"
#include "support/temp_dir.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::has;
using testing::expect_same_frames;

class AseDatabases : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string python = MLIP_TORCH_PYTHON;
    if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no torch venv python (MLIP_TORCH_PYTHON)";
    const std::string command = python + " " + std::string(MLIP_SOURCE_DIR) + "/tests/python/ase_db_write.py " +
                                tmp.path.string() + " " + MLIP_SOURCE_DIR + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz > " +
                                (tmp.path / "write.log").string() + " 2>&1";
    const int rc = std::system(command.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "ase, lmdb or ase_db_backends missing in " << python;
    ASSERT_EQ(rc, 0) << command;
  }
  std::string path(const std::string& name) const { return (tmp.path / name).string(); }
  // A folder per test: ctest runs the tests of this file in parallel.
  testing::TempDir tmp{std::string("mlip_test_io_ase_db_") +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(AseDatabases, ReadTheFramesOfTheExtendedXyzTheyCameFrom) {
  const std::vector<Structure> xyz = read_extxyz(path("frames.xyz"));
  ASSERT_EQ(xyz.size(), 7u);
  EXPECT_TRUE(xyz[3].virial.has_value() && !xyz[4].virial.has_value() && xyz[5].forces.empty());
  EXPECT_EQ(xyz[6].weight, 2.5);
  expect_same_frames(xyz, read_ase_db(path("frames.db")));
  expect_same_frames(xyz, read_aselmdb(path("frames.aselmdb")));
  expect_same_frames(xyz, read_aselmdb(path("nested.aselmdb")));
  // By index (the trainer's streaming, test, deviation): the same frames, in any order.
  for (const char* name : {"frames.db", "frames.aselmdb"}) {
    const std::unique_ptr<FrameReader> by_index = open_frame_reader(path(name));
    ASSERT_TRUE(by_index) << name;
    std::vector<Structure> got(by_index->size());
    for (std::size_t k = got.size(); k-- > 0;) got[k] = by_index->frame(k);
    expect_same_frames(xyz, got);
    std::vector<uint32_t> sizes;
    for (const Structure& s : xyz) sizes.push_back(static_cast<uint32_t>(s.size()));
    EXPECT_EQ(by_index->atom_counts(), sizes) << name;   // .db: its natoms column
  }
  // A folder of them, as fairchem ships its data sets: the files in name order, as one source.
  fs::create_directories(path("folder"));
  fs::copy_file(path("frames.aselmdb"), path("folder/data.0001.aselmdb"));
  fs::copy_file(path("frames.aselmdb"), path("folder/data.0000.aselmdb"));
  std::vector<Structure> twice = xyz;
  twice.insert(twice.end(), xyz.begin(), xyz.end());
  EXPECT_EQ(detect_format(path("folder")), "aselmdb");
  const std::vector<Structure> folder = read_structures(path("folder"));
  expect_same_frames(twice, folder);
  EXPECT_EQ(folder.at(7).origin, path("folder/data.0001.aselmdb") + ":frame 0 (id 1)");
  const std::unique_ptr<FrameReader> folder_by_index = open_frame_reader(path("folder"));
  ASSERT_EQ(folder_by_index->size(), twice.size());
  std::vector<Structure> got_folder(twice.size());
  for (std::size_t k = got_folder.size(); k-- > 0;) got_folder[k] = folder_by_index->frame(k);
  expect_same_frames(twice, got_folder);
  EXPECT_TRUE(has(error_of([&] { folder_by_index->frame(14); }), "folder: no frame 14 (14 frames)"));
  EXPECT_EQ(detect_format(path("frames.db")), "ase-db");
  EXPECT_EQ(detect_format(path("frames.aselmdb")), "aselmdb");
  const std::vector<Structure> auto_read = read_structures(path("frames.aselmdb"));
  EXPECT_EQ(auto_read.at(4).origin, path("frames.aselmdb") + ":frame 4 (id 5)");
  // Units apply as for any source.
  ReadOptions kcal;
  kcal.units.energy = "kcal/mol";
  expect_same_frames(read_extxyz(path("frames.xyz"), kcal), read_ase_db(path("frames.db"), kcal));
  EXPECT_NE(*read_ase_db(path("frames.db"), kcal).at(0).energy, *xyz[0].energy);
}

TEST_F(AseDatabases, BadFilesGiveErrorsThatNameThem) {
  const std::string row = error_of([&] { read_aselmdb(path("corrupt.aselmdb")); });
  EXPECT_TRUE(has(row, "corrupt.aselmdb: row 2") && has(row, "not zlib")) << row;
  std::ofstream(path("garbage.db")) << "this is not a database, only some text that is long enough to be read";
  const std::string db = error_of([&] { read_ase_db(path("garbage.db")); });
  EXPECT_TRUE(has(db, "garbage.db") && (has(db, "not an ASE database") || has(db, "cannot open"))) << db;
  std::ofstream(path("garbage.aselmdb")) << "not an LMDB file either";
  const std::string lm = error_of([&] { read_aselmdb(path("garbage.aselmdb")); });
  EXPECT_TRUE(has(lm, "garbage.aselmdb") && has(lm, "cannot open as an LMDB file")) << lm;
  // A natoms column that is not the row's: the reader by index lists it, and reading says so.
  fs::copy_file(path("frames.db"), path("natoms.db"), fs::copy_options::overwrite_existing);
  sqlite3* sql = nullptr;
  ASSERT_EQ(sqlite3_open(path("natoms.db").c_str(), &sql), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(sql, "UPDATE systems SET natoms = natoms + 1 WHERE id = 2", nullptr, nullptr, nullptr), SQLITE_OK);
  // A writer other than ASE may leave natoms empty: the count then comes from the row.
  ASSERT_EQ(sqlite3_exec(sql, "UPDATE systems SET natoms = NULL WHERE id = 3", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(sql);
  const std::unique_ptr<FrameReader> r = open_frame_reader(path("natoms.db"));
  const std::size_t n = read_extxyz(path("frames.xyz")).at(1).size();
  EXPECT_EQ(r->atoms(1), n + 1);
  const std::string e = error_of([&] { r->frame(1); });
  EXPECT_TRUE(has(e, "natoms.db:frame 1 (id 2): its natoms column says " + std::to_string(n + 1) + ", its arrays hold " +
                         std::to_string(n) + " atoms")) << e;
  EXPECT_EQ(r->atoms(2), read_extxyz(path("frames.xyz")).at(2).size());
  EXPECT_NO_THROW(r->frame(2));
}

}  // namespace
}  // namespace mlip
