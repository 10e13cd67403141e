#include "mlip/data/elements.h"

#include <array>

#include "mlip/error.h"

namespace mlip {
namespace {

const std::array<std::string, kMaxAtomicNumber + 1> kSymbols = {
    "X",  "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si",
    "P",  "S",  "Cl", "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu",
    "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru",
    "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe", "Cs", "Ba", "La", "Ce", "Pr",
    "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W",
    "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac",
    "Th", "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf",
    "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og"};

// Standard atomic weights (IUPAC 2016; for elements without one, the mass number of the
// longest-lived isotope), in g/mol, index = atomic number (0 unused). Values as tabulated by ASE's
// ase.data.atomic_masses_iupac2016.
const std::array<double, kMaxAtomicNumber + 1> kMasses = {
    0.0,
    1.008, 4.002602, 6.94, 9.012183, 10.81, 12.011, 14.007, 15.999, 18.9984, 20.1797,
    22.98977, 24.305, 26.98154, 28.085, 30.97376, 32.06, 35.45, 39.948, 39.0983, 40.078,
    44.95591, 47.867, 50.9415, 51.9961, 54.93804, 55.845, 58.93319, 58.6934, 63.546, 65.38,
    69.723, 72.63, 74.92159, 78.971, 79.904, 83.798, 85.4678, 87.62, 88.90584, 91.224,
    92.90637, 95.95, 97.90721, 101.07, 102.9055, 106.42, 107.8682, 112.414, 114.818, 118.71,
    121.76, 127.6, 126.9045, 131.293, 132.9055, 137.327, 138.9055, 140.116, 140.9077, 144.242,
    144.9128, 150.36, 151.964, 157.25, 158.9254, 162.5, 164.9303, 167.259, 168.9342, 173.054,
    174.9668, 178.49, 180.9479, 183.84, 186.207, 190.23, 192.217, 195.084, 196.9666, 200.592,
    204.38, 207.2, 208.9804, 208.9824, 209.9872, 222.0176, 223.0197, 226.0254, 227.0277, 232.0377,
    231.0359, 238.0289, 237.0482, 244.0642, 243.0614, 247.0703, 247.0703, 251.0796, 252.083, 257.0951,
    258.0984, 259.101, 262.11, 267.122, 268.126, 271.134, 270.133, 269.1338, 278.156, 281.165,
    281.166, 285.177, 286.182, 289.19, 289.194, 293.204, 293.208, 294.214,
};

// Covalent radii in Å, index = atomic number (0: ASE's placeholder), as tabulated by ASE's
// ase.data.covalent_radii (Cordero et al. 2008; 2.0 for elements without a value).
const std::array<double, kMaxAtomicNumber + 1> kCovalentRadii = {
    0.2,  0.31, 0.28, 1.28, 0.96, 0.84, 0.76, 0.71, 0.66, 0.57, 0.58, 1.66, 1.41, 1.21, 1.11,
    1.07, 1.05, 1.02, 1.06, 2.03, 1.76, 1.7,  1.6,  1.53, 1.39, 1.39, 1.32, 1.26, 1.24, 1.32,
    1.22, 1.22, 1.2,  1.19, 1.2,  1.2,  1.16, 2.2,  1.95, 1.9,  1.75, 1.64, 1.54, 1.47, 1.46,
    1.42, 1.39, 1.45, 1.44, 1.42, 1.39, 1.39, 1.38, 1.39, 1.4,  2.44, 2.15, 2.07, 2.04, 2.03,
    2.01, 1.99, 1.98, 1.98, 1.96, 1.94, 1.92, 1.92, 1.89, 1.9,  1.87, 1.87, 1.75, 1.7,  1.62,
    1.51, 1.44, 1.41, 1.36, 1.36, 1.32, 1.45, 1.46, 1.48, 1.4,  1.5,  1.5,  2.6,  2.21, 2.15,
    2.06, 2.0,  1.96, 1.9,  1.87, 1.8,  1.69, 2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,
    2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,  2.0,
};

}  // namespace

double covalent_radius(int z) {
  if (z < 1 || z > kMaxAtomicNumber) throw Error("no element with atomic number " + std::to_string(z));
  return kCovalentRadii[z];
}

double atomic_mass(int z) {
  if (z < 1 || z > kMaxAtomicNumber) throw Error("no element with atomic number " + std::to_string(z));
  return kMasses[z];
}

int atomic_number(std::string_view symbol) {
  for (int z = 1; z <= kMaxAtomicNumber; ++z) {
    if (kSymbols[z] == symbol) return z;
  }
  return 0;
}

const std::string& element_symbol(int z) {
  if (z < 1 || z > kMaxAtomicNumber) {
    throw Error("atomic number " + std::to_string(z) + " is not an element (1..118)");
  }
  return kSymbols[z];
}

}  // namespace mlip
