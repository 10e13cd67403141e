// MACE's HDF5 data files written by mace-torch itself (tests/python/mace_hdf5_write.py, in the
// torch venv, from the frames tests/python/ase_db_write.py writes) read to the same frames as the
// extended XYZ they came from: one file, a folder of shards, virials instead of stress; by index
// as training streams them; bad files end in errors naming them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "mlip/data/io.h"
#include "mlip/error.h"
#include "support/error_of.h"
#include "support/same_frames.h"
#include "support/temp_dir.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::expect_same_frames;
using testing::has;

class MaceHdf5 : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef MLIP_TEST_HAVE_HDF5
    GTEST_SKIP() << "mlip built without HDF5 (-DMLIP_WITH_HDF5=OFF or no libhdf5-dev)";
#endif
    const std::string python = MLIP_TORCH_PYTHON;
    if (python.empty() || !fs::exists(python)) GTEST_SKIP() << "no torch venv python (MLIP_TORCH_PYTHON)";
    const std::string scripts = std::string(MLIP_SOURCE_DIR) + "/tests/python/";
    const std::string log = " >> " + (tmp.path / "write.log").string() + " 2>&1";
    for (const std::string& command :
         {python + " " + scripts + "ase_db_write.py " + tmp.path.string() + " " + MLIP_SOURCE_DIR +
              "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz" + log,
          python + " " + scripts + "mace_hdf5_write.py " + tmp.path.string() + log}) {
      const int rc = std::system(command.c_str());
      if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "ase, h5py or mace-torch missing in " << python;
      ASSERT_EQ(rc, 0) << command;
    }
  }
  std::string path(const std::string& name) const { return (tmp.path / name).string(); }
  testing::TempDir tmp{std::string("mlip_test_io_mace_hdf5_") +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(MaceHdf5, ReadTheFramesOfTheExtendedXyzTheyCameFrom) {
  const std::vector<Structure> xyz = read_extxyz(path("frames.xyz"));
  ASSERT_EQ(xyz.size(), 7u);
  EXPECT_TRUE(xyz[3].virial.has_value() && !xyz[4].virial.has_value() && xyz[5].forces.empty());
  EXPECT_EQ(xyz[6].weight, 2.5);
  EXPECT_EQ(detect_format(path("frames.h5")), "mace-hdf5");
  EXPECT_EQ(detect_format(path("sharded")), "mace-hdf5");
  expect_same_frames(xyz, read_mace_hdf5(path("frames.h5")));
  expect_same_frames(xyz, read_structures(path("sharded")));   // train_0.h5, train_1.h5, ..., train_10.h5
  expect_same_frames(xyz, read_mace_hdf5(path("virials.h5")));
  const std::vector<Structure> shards = read_structures(path("sharded"));
  EXPECT_EQ(shards.at(6).origin, path("sharded/train_10.h5") + ":frame 0");
  // By index (streamed training, test, deviation, pack): the same frames, in any order.
  const std::unique_ptr<FrameReader> by_index = open_frame_reader(path("sharded"));
  ASSERT_TRUE(by_index);
  std::vector<Structure> got(by_index->size());
  for (std::size_t k = got.size(); k-- > 0;) got[k] = by_index->frame(k);
  expect_same_frames(xyz, got);
  std::vector<uint32_t> sizes;
  for (const Structure& s : xyz) sizes.push_back(static_cast<uint32_t>(s.size()));
  EXPECT_EQ(by_index->atom_counts(), sizes);   // the lengths of atomic_numbers
  // Units apply as for any source.
  ReadOptions kcal;
  kcal.units.energy = "kcal/mol";
  expect_same_frames(read_extxyz(path("frames.xyz"), kcal), read_mace_hdf5(path("frames.h5"), kcal));
}

TEST_F(MaceHdf5, BadFilesGiveErrorsThatNameThem) {
  std::ofstream(path("garbage.h5")) << "not an HDF5 file, only some text";
  const std::string garbage = error_of([&] { read_mace_hdf5(path("garbage.h5")); });
  EXPECT_TRUE(has(garbage, "garbage.h5: cannot open as an HDF5 file")) << garbage;
  fs::create_directories(path("empty"));
  std::ofstream(path("empty/notes.txt")) << "no shards here";
  const std::string empty = error_of([&] { read_mace_hdf5(path("empty")); });
  EXPECT_TRUE(has(empty, "empty: a folder without *.h5 or *.hdf5 files")) << empty;
  // Files made with h5py that are not MACE's layout, or whose labels MACE weighs per property.
  const std::string python = MLIP_TORCH_PYTHON;
  const std::string script = "import h5py, numpy as np, sys\n"
                             "d = sys.argv[1]\n"
                             "with h5py.File(d + '/other.h5', 'w') as f: f['x'] = np.zeros(3)\n"
                             "with h5py.File(d + '/frames.h5', 'a') as f:\n"
                             "    f['config_batch_0/config_2/property_weights/forces'][()] = 0.5\n"
                             "    del f['config_batch_0/config_4/positions']\n"
                             "    f['config_batch_0/config_4/positions'] = np.zeros((2, 3))\n"
                             "    del f['config_batch_0/config_5/weight']\n"
                             "    f['config_batch_0/config_5/weight'] = ['None', 'None']\n";
  std::ofstream(path("damage.py")) << script;
  ASSERT_EQ(std::system((python + " " + path("damage.py") + " " + tmp.path.string()).c_str()), 0);
  const std::string other = error_of([&] { read_mace_hdf5(path("other.h5")); });
  EXPECT_TRUE(has(other, "other.h5: group 'x' is not a config_batch_N: not MACE's HDF5 data layout")) << other;
  const std::unique_ptr<FrameReader> r = open_frame_reader(path("frames.h5"));
  const std::string weight = error_of([&] { r->frame(2); });
  EXPECT_TRUE(has(weight, "frames.h5:frame 2 (config_batch_0/config_2): property_weights/forces is 0.5")) << weight;
  const std::string sizes = error_of([&] { r->frame(4); });
  EXPECT_TRUE(has(sizes, "frames.h5:frame 4: its arrays' sizes do not match its 6 atoms")) << sizes;
  const std::string strings = error_of([&] { r->frame(5); });
  EXPECT_TRUE(has(strings, "frames.h5:frame 5 (config_batch_0/config_5): weight is an array of strings, not numbers"))
      << strings;
  EXPECT_NO_THROW(r->frame(3));
}

}  // namespace
}  // namespace mlip
