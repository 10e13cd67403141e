// Chemical elements by symbol and atomic number. Species are always identified by element, never by
// their position in a file.
#pragma once

#include <string>
#include <string_view>

namespace mlip {

constexpr int kMaxAtomicNumber = 118;

/// Atomic number of an element symbol ("O" -> 8); 0 if the symbol is not an element.
/// Case matters as in chemistry: "Co" is cobalt, "CO" is not an element.
int atomic_number(std::string_view symbol);

/// Symbol of an atomic number (8 -> "O"); throws mlip::Error outside 1..118.
const std::string& element_symbol(int atomic_number);

/// Standard atomic weight of element `atomic_number` (g/mol = LAMMPS metal units' mass).
double atomic_mass(int atomic_number);

/// Covalent radius of element `atomic_number` in Å (Cordero et al., Dalton Trans. 2008, as ASE's
/// ase.data.covalent_radii tabulates them, 2.0 where there is none): MACE's ZBL and Agnesi radii.
double covalent_radius(int atomic_number);

}  // namespace mlip
