// Frames read two ways against each other: the same atoms, cell, labels and weight, the virials
// to within `virial_tolerance` eV (1e-13 by default, as they may come from a stress times a
// volume; 0: exactly).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mlip/data/structure.h"

namespace mlip::testing {

inline void expect_same_frames(const std::vector<Structure>& want, const std::vector<Structure>& got,
                               double virial_tolerance = 1e-13) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE("frame " + std::to_string(k) + " " + got[k].origin);
    EXPECT_EQ(got[k].numbers, want[k].numbers);
    EXPECT_EQ(got[k].positions, want[k].positions);
    EXPECT_EQ(got[k].cell.lattice, want[k].cell.lattice);
    EXPECT_EQ(got[k].cell.pbc, want[k].cell.pbc);
    EXPECT_EQ(got[k].energy, want[k].energy);
    EXPECT_EQ(got[k].forces, want[k].forces);
    ASSERT_EQ(got[k].virial.has_value(), want[k].virial.has_value());
    if (want[k].virial) {
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) EXPECT_NEAR((*got[k].virial)[a][b], (*want[k].virial)[a][b], virial_tolerance);
    }
    EXPECT_EQ(got[k].weight, want[k].weight);
  }
}

}  // namespace mlip::testing
