#include "permutation.h"

#include <stdexcept>

namespace mlip::trainer {
namespace {

// SplitMix64's output function (Steele, Lea and Flood 2014): a bijective 64-bit mix.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t seed) : n_(n) {
  while (half_bits_ < 32 && (uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t state = seed;
  for (uint64_t& k : keys_) k = mix(state += 0x9e3779b97f4a7c15ull);
}

uint64_t Permutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (const uint64_t key : keys_) {
    const uint64_t next = left ^ (mix(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t j) const {
  if (j >= n_) throw std::out_of_range("Permutation: entry out of range");
  uint64_t x = feistel(j);
  while (x >= n_) x = feistel(x);
  return x;
}

}  // namespace mlip::trainer
