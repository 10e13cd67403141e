// The trainer's sampling: the seeded permutation (trainer/src/permutation.h) and the epochs'
// batches built on it (Sampler, EpochBatches in trainer/src/training.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlip/error.h"
#include "frame_source.h"
#include "permutation.h"
#include "training.h"

using mlip::trainer::EpochBatches;
using mlip::trainer::FrameSource;
using mlip::trainer::Permutation;
using mlip::trainer::Sampler;

namespace {

std::vector<uint64_t> entries(const Permutation& p) {
  std::vector<uint64_t> v(p.size());
  for (uint64_t j = 0; j < p.size(); ++j) v[j] = p(j);
  return v;
}

// Frames with a given number of atoms each, for the sampler (which asks for nothing else).
class AtomsOnly final : public FrameSource {
 public:
  explicit AtomsOnly(std::vector<int64_t> atoms) : atoms_(std::move(atoms)) {}
  std::size_t size() const override { return atoms_.size(); }
  int64_t atoms(std::size_t i) const override {
    ++calls;
    return atoms_.at(i);
  }
  mutable std::atomic<std::size_t> calls = 0;   // atoms() calls, to count passes over the frames
  std::vector<const mlip::Frame*> frames(const std::vector<int64_t>&, std::vector<mlip::Frame>&) const override {
    throw std::logic_error("not used");
  }
  const mlip::PackStats& stats() const override { return stats_; }
  bool streamed() const override { return true; }

 private:
  std::vector<int64_t> atoms_;
  mlip::PackStats stats_;
};

}  // namespace

TEST(Permutation, IsABijectionOfEverySize) {
  for (uint64_t n : {0, 1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 4095, 4096, 4097, 65537}) {
    for (uint64_t seed : {0ull, 1ull, 12345678901234ull}) {
      std::vector<uint64_t> v = entries(Permutation(n, seed));
      std::sort(v.begin(), v.end());
      std::vector<uint64_t> iota(n);
      std::iota(iota.begin(), iota.end(), 0);
      EXPECT_EQ(v, iota) << "n " << n << ", seed " << seed;
    }
  }
}

TEST(Permutation, SeedsGiveDifferentOrdersAndTheSameSeedTheSame) {
  const auto a = entries(Permutation(1000, 7)), b = entries(Permutation(1000, 7)), c = entries(Permutation(1000, 8));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Shuffled: few entries stay in place (about 1 expected) and neighbours do not stay neighbours.
  int fixed = 0, adjacent = 0;
  for (uint64_t j = 0; j < a.size(); ++j) {
    fixed += a[j] == j;
    if (j > 0) adjacent += (a[j] == a[j - 1] + 1);
  }
  EXPECT_LE(fixed, 6);
  EXPECT_LE(adjacent, 6);
}

TEST(Permutation, EveryPlaceIsAboutEquallyLikely) {
  // Over 4000 seeds, where entry 0 and entry 5 land among 10: each value about 400 times
  // (binomial, standard deviation 19); the bounds are 5 deviations.
  for (uint64_t j : {0, 5}) {
    std::vector<int> count(10, 0);
    for (uint64_t seed = 0; seed < 4000; ++seed) ++count[Permutation(10, seed)(j)];
    for (int v = 0; v < 10; ++v) EXPECT_NEAR(count[v], 400, 95) << "entry " << j << " at " << v;
  }
}

TEST(Permutation, HoldsNoListWhateverTheSize) {
  const uint64_t n = 110'000'000'000ull;   // a thousand OMat24s
  const Permutation p(n, 3);
  EXPECT_LE(sizeof p, 128u);
  std::set<uint64_t> seen;
  for (uint64_t j = 0; j < 10000; ++j) {
    const uint64_t x = p(j);
    EXPECT_LT(x, n);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_THROW(p(n), std::out_of_range);
}

TEST(Permutation, TheLargestSizesToo) {
  for (uint64_t n : {(uint64_t{1} << 62) + 3, ~uint64_t{0}}) {
    const Permutation p(n, 9);
    std::set<uint64_t> seen;
    for (uint64_t j : {uint64_t{0}, uint64_t{1}, uint64_t{2}, n / 2, n - 2, n - 1}) {
      EXPECT_LT(p(j), n);
      seen.insert(p(j));
    }
    EXPECT_EQ(seen.size(), 6u) << "n " << n;
  }
}

TEST(Split, TrainingAndValidationAreDisjointAndCoverEveryFrame) {
  // Frame i has i + 1 atoms, so that atoms() names the frame a subset maps to.
  std::vector<int64_t> atoms(1001);
  std::iota(atoms.begin(), atoms.end(), 1);
  auto all = std::make_shared<AtomsOnly>(atoms);
  const auto frames_of = [](const FrameSource& part) {
    std::vector<int64_t> v;
    for (std::size_t i = 0; i < part.size(); ++i) v.push_back(part.atoms(i) - 1);
    return v;
  };
  const Permutation order(all->size(), 42);
  const auto validation = frames_of(*mlip::trainer::subset_source(all, order, 0, 100));
  const auto train = frames_of(*mlip::trainer::subset_source(all, order, 100, 901));
  ASSERT_EQ(validation.size(), 100u);
  ASSERT_EQ(train.size(), 901u);
  std::vector<int64_t> both = validation;
  both.insert(both.end(), train.begin(), train.end());
  std::sort(both.begin(), both.end());
  std::vector<int64_t> iota(1001);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(both, iota);   // disjoint, and every frame in one of them
  // Drawn from the whole set, not its first frames; another seed, another split.
  EXPECT_GT(*std::max_element(validation.begin(), validation.end()), 500);
  EXPECT_NE(frames_of(*mlip::trainer::subset_source(all, Permutation(all->size(), 43), 0, 100)), validation);
}

TEST(Sampler, ByFramesEveryFrameOncePerEpochAndRanksSplitEachBatch) {
  const AtomsOnly frames(std::vector<int64_t>(103, 5));
  const Sampler sampler(frames, 4, 0, 11);
  EXPECT_EQ(sampler.batches_per_epoch(), 26);
  const EpochBatches e0 = sampler.epoch_batches(0), e1 = sampler.epoch_batches(1);
  ASSERT_EQ(e0.size(), 26u);
  std::vector<int64_t> all0, all1;
  for (std::size_t k = 0; k < e0.size(); ++k) {
    EXPECT_EQ(e0.frames(k), k + 1 < e0.size() ? 4 : 3);
    std::vector<int64_t> whole = e0.share(k, 0, 1), ranks;
    for (int r = 0; r < 3; ++r) {
      const auto mine = e0.share(k, r, 3);
      ranks.insert(ranks.end(), mine.begin(), mine.end());
    }
    std::sort(whole.begin(), whole.end());
    std::sort(ranks.begin(), ranks.end());
    EXPECT_EQ(whole, ranks) << "batch " << k;
    all0.insert(all0.end(), whole.begin(), whole.end());
    const auto b1 = e1.share(k, 0, 1);
    all1.insert(all1.end(), b1.begin(), b1.end());
  }
  EXPECT_NE(all0, all1);   // another epoch, another order
  std::sort(all0.begin(), all0.end());
  std::vector<int64_t> iota(103);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(all0, iota);
}

TEST(Sampler, ByAtomsBatchesStayUnderTheBudget) {
  std::vector<int64_t> atoms;
  for (int i = 0; i < 200; ++i) atoms.push_back(1 + (i * 37) % 50);
  const AtomsOnly frames(atoms);
  const Sampler sampler(frames, 1, 120, 5);
  const EpochBatches e = sampler.epoch_batches(3);
  std::vector<int64_t> all;
  for (std::size_t k = 0; k < e.size(); ++k) {
    const auto b = e.share(k, 0, 1);
    int64_t sum = 0;
    for (int64_t i : b) sum += atoms[i];
    EXPECT_TRUE(sum <= 120 || b.size() == 1) << "batch " << k << ": " << sum << " atoms";
    // Full: the next frame would not have fitted.
    if (k + 1 < e.size()) {
      EXPECT_GT(sum + atoms[e.share(k + 1, 0, 1).front()], 120) << "batch " << k;
    }
    all.insert(all.end(), b.begin(), b.end());
    std::vector<int64_t> ranks;
    for (int r = 0; r < 2; ++r) {
      const auto mine = e.share(k, r, 2);
      ranks.insert(ranks.end(), mine.begin(), mine.end());
    }
    std::vector<int64_t> whole = b;
    std::sort(whole.begin(), whole.end());
    std::sort(ranks.begin(), ranks.end());
    EXPECT_EQ(ranks, whole) << "batch " << k;
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> iota(200);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(all, iota);
}

TEST(Sampler, ByAtomsTheCountKeepsEpochZerosBatchesForItsFirstUse) {
  // batches_per_epoch() finds epoch 0's batches; the first epoch_batches(0) gets those (one pass
  // over the frames at start, not two), and any later call computes them again, the same.
  std::vector<int64_t> atoms;
  for (int i = 0; i < 300; ++i) atoms.push_back(1 + (i * 53) % 40);
  const AtomsOnly frames(atoms);
  const Sampler fresh(frames, 1, 100, 9), counted(frames, 1, 100, 9);
  const EpochBatches want = fresh.epoch_batches(0);
  frames.calls = 0;
  EXPECT_EQ(counted.batches_per_epoch(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(counted.batches_per_epoch(), static_cast<int64_t>(want.size()));
  const EpochBatches first = counted.epoch_batches(0);
  EXPECT_EQ(frames.calls.load(), atoms.size());   // one pass: the count and the first epoch share it
  const auto same = [&](const EpochBatches& got) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got.share(k, 0, 1), want.share(k, 0, 1)) << "batch " << k;
  };
  same(first);
  same(counted.epoch_batches(0));
  EXPECT_EQ(counted.epoch_batches(1).size(), fresh.epoch_batches(1).size());
  same(counted.epoch_batches(0));
  EXPECT_EQ(counted.batches_per_epoch(), static_cast<int64_t>(want.size()));
}

TEST(Sampler, ByAtomsThreadsFindTheSameBatchesAsOne) {
  // More frames than one block of the pass (2^18), so that blocks and threads both split it.
  std::vector<int64_t> atoms;
  for (int64_t i = 0; i < (1 << 18) + 12345; ++i) atoms.push_back(1 + (i * 7919) % 61);
  const AtomsOnly frames(atoms);
  const Sampler one(frames, 1, 200, 4, 1), three(frames, 1, 200, 4, 3);
  for (int64_t epoch : {0, 1}) {
    frames.calls = 0;
    const EpochBatches a = one.epoch_batches(epoch);
    EXPECT_EQ(frames.calls.load(), atoms.size());
    const EpochBatches b = three.epoch_batches(epoch);
    EXPECT_EQ(frames.calls.load(), 2 * atoms.size());
    EXPECT_GT(a.size(), atoms.size() / 10);
    EXPECT_EQ(a.starts, b.starts) << "epoch " << epoch;
  }
}

TEST(Sampler, ByAtomsAnErrorOnAThreadReachesTheCaller) {
  class Unreadable final : public FrameSource {
   public:
    std::size_t size() const override { return 10000; }
    int64_t atoms(std::size_t i) const override {
      if (i == 7777) throw mlip::Error("frames.xyz, frame 7777: no atom count");
      return 3;
    }
    std::vector<const mlip::Frame*> frames(const std::vector<int64_t>&, std::vector<mlip::Frame>&) const override {
      throw std::logic_error("not used");
    }
    const mlip::PackStats& stats() const override { return stats_; }
    bool streamed() const override { return true; }

   private:
    mlip::PackStats stats_;
  };
  const Unreadable frames;
  const Sampler sampler(frames, 1, 50, 2, 4);
  try {
    sampler.epoch_batches(0);
    FAIL() << "no error";
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "frames.xyz, frame 7777: no atom count");
  }
}

TEST(ReaderSource, TheStatisticsPassKeepsTheAtomCountsAndThreadsShareThem) {
  // A streamed source that is not a pack reads every frame once for its statistics; batches by
  // atoms take the counts from that pass, not from another (atom_counts() is never asked), on
  // any number of threads, and an error reading a frame reaches the caller.
  class Counting final : public mlip::FrameReader {
   public:
    explicit Counting(std::size_t bad = SIZE_MAX) : bad_(bad) {}
    std::size_t size() const override { return 6000; }
    mlip::Structure frame(std::size_t i) const override {
      ++reads;
      if (i == bad_) throw mlip::Error("frames.aselmdb:frame " + std::to_string(i) + ": the row is not a JSON object (corrupt)");
      mlip::Structure s;
      s.numbers.assign(1 + i % 7, 1);
      for (std::size_t a = 0; a < s.numbers.size(); ++a) s.positions.push_back({0.0, 0.0, 0.8 * static_cast<double>(a)});
      return s;
    }
    std::vector<uint32_t> atom_counts() const override { throw std::logic_error("the counts come from the pass"); }
    mutable std::atomic<std::size_t> reads = 0;

   private:
    std::size_t bad_;
  };
  auto reader = std::make_unique<Counting>();
  const Counting& counting = *reader;
  const auto source = mlip::trainer::reader_source(std::move(reader), 1.0, 5.0);
  EXPECT_EQ(source->stats().atoms, 6000u / 7 * 28 + 6000 % 7 * (6000 % 7 + 1) / 2);
  for (std::size_t i = 0; i < source->size(); i += 997) EXPECT_EQ(source->atoms(i), static_cast<int64_t>(1 + i % 7));
  const Sampler one(*source, 1, 20, 3, 1), two(*source, 1, 20, 3, 2);
  EXPECT_EQ(one.epoch_batches(0).starts, two.epoch_batches(0).starts);
  EXPECT_EQ(counting.reads.load(), 6000u);   // one pass, for both

  // Asked for the counts first, on threads: the pass runs on the calling thread, and its error
  // comes back each time they are asked for.
  const auto broken = mlip::trainer::reader_source(std::make_unique<Counting>(4321), 1.0, 5.0);
  const Sampler threads(*broken, 1, 20, 3, 4);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      threads.epoch_batches(0);
      FAIL() << "no error";
    } catch (const mlip::Error& e) {
      EXPECT_STREQ(e.what(), "frames.aselmdb:frame 4321: the row is not a JSON object (corrupt)");
    }
  }
}
