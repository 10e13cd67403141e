// Frames read two ways against each other: the same atoms, cell, labels and weight (virials to
// 1e-13 eV, as they may come from a stress times a volume).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "mlip/data/structure.h"

namespace mlip::testing {

inline void expect_same_frames(const std::vector<Structure>& want, const std::vector<Structure>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE(got[k].origin);
    EXPECT_EQ(got[k].numbers, want[k].numbers);
    EXPECT_EQ(got[k].positions, want[k].positions);
    EXPECT_EQ(got[k].cell.lattice, want[k].cell.lattice);
    EXPECT_EQ(got[k].cell.pbc, want[k].cell.pbc);
    EXPECT_EQ(got[k].energy, want[k].energy);
    EXPECT_EQ(got[k].forces, want[k].forces);
    ASSERT_EQ(got[k].virial.has_value(), want[k].virial.has_value());
    if (want[k].virial) {
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) EXPECT_NEAR((*got[k].virial)[a][b], (*want[k].virial)[a][b], 1e-13);
    }
    EXPECT_EQ(got[k].weight, want[k].weight);
  }
}

}  // namespace mlip::testing
