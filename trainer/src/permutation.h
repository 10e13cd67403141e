// A seeded random permutation of 0..n-1 that is evaluated where it is needed, in O(1) memory and
// time: the order of an epoch's frames and the training/validation split, for data sets of any
// size, with no list of indices held and no pass over the data at start. Each rank evaluates the
// entries of its own batches; the same (n, seed) gives the same permutation on every rank.
//
// It is a balanced Feistel network on the smallest even number of bits that holds n (a bijection
// of [0, 2^bits)), six rounds keyed by the seed through SplitMix64, restricted to [0, n) by cycle
// walking: an index that maps outside [0, n) is mapped again until it lands inside, which keeps
// the bijection (Black and Rogaway, "Ciphers with arbitrary finite domains", 2002). As 2^bits <
// 4n, that takes fewer than 4 evaluations on average.
#pragma once

#include <cstdint>

namespace mlip::trainer {

class Permutation {
 public:
  Permutation() = default;
  Permutation(uint64_t n, uint64_t seed);
  uint64_t size() const { return n_; }
  /// The j-th entry, j < size().
  uint64_t operator()(uint64_t j) const;

 private:
  uint64_t feistel(uint64_t x) const;
  static constexpr int kRounds = 6;
  uint64_t n_ = 0;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  uint64_t keys_[kRounds] = {};
};

}  // namespace mlip::trainer
