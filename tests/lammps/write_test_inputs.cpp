// Writes the binary inputs of the LAMMPS tests and benchmarks, deterministically:
//
//   mlip_test_inputs model NAME PATH            a model of support/test_models.h
//   mlip_test_inputs water PATH NX NY NZ        LAMMPS data file (no masses): frame 0 of
//                                               data/water-deepmd/data_0 (64 H2O, 12.44 A cubic)
//                                               replicated NX x NY x NZ, types 1 = O, 2 = H
//
// ctest runs the `model` form as a fixture (FIXTURES_SETUP) before the force-style YAML cases;
// benchmarks/bench_pair.sh uses both forms.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mlip/data/io.h"
#include "support/source_dir.h"
#include "support/test_models.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: mlip_test_inputs model NAME PATH\n       mlip_test_inputs water PATH NX NY NZ\n");
  return 2;
}

void write_water(const std::string& path, int nx, int ny, int nz) {
  const mlip::Structure frame = mlip::read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0").at(0);
  mlip::write_lammps_data(path, mlip::replicate(frame, nx, ny, nz), {"O", "H"});
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "model" && argc == 4) {
      mlip::testing::write_test_model(argv[2], argv[3]);
    } else if (what == "water" && argc == 6) {
      write_water(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
    } else {
      return usage();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlip_test_inputs: %s\n", e.what());
    return 1;
  }
  return 0;
}
