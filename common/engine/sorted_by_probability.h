// SortedByProbability: the ids of a row of probabilities in the order the
// sampler reads them (docs/model.md, "Sampling": probability descending,
// ties to the lower id), sorted only as far as they are read.
//   SortedByProbability  counting-sorts the ids into kBuckets buckets
//   At                   the id at a position (sorts the buckets up to it)
//   DrawUntruncated      the inverse-CDF draw over every id, sorting only
//                        the bucket where the sum crosses u; nullopt when
//                        u is too close to a crossing to call
//   DrawNucleus          the same after the nucleus (top_p) truncation,
//                        sorting the buckets where top_p and u cross
// No LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace pdserve {

// The buffers a SortedByProbability works in: keep one per thread (a 128k
// vocabulary needs ~1.3 MB).
struct ProbabilitySortScratch {
  std::vector<int64_t> ids, start, fill;
  std::vector<uint16_t> bucket;
  std::vector<uint8_t> state, wanted;
  std::vector<uint64_t> keys;
};

// A counting sort on each probability's double bits (monotone in the value
// for p >= 0) puts every id in one of kBuckets buckets, in probability order,
// ids ascending inside each. Both steps after the count are lazy: a
// bucket's ids are placed (one pass over the ids places a run of buckets)
// and sorted the first time a reader reaches it. The buckets split the bits
// between the largest probability and the smallest one not below 2^-32 of
// it into equal power-of-two widths (about equal widths in log p, however
// narrow the distribution); anything smaller shares the last bucket.
//
// Whole-vocabulary partial sorts, which this replaced, cost 2.2-34 ms a
// draw at 128k ids with temperature 1 or top_p 0.9 (a flat distribution
// walks far into the order); this costs a counting pass plus the buckets a
// draw reaches (docs/benchmarks.md §5).
class SortedByProbability {
 public:
  static constexpr int64_t kBuckets = 4096;

  // p: vocab probabilities >= 0 summing to ~1, max_p and min_p their
  // extremes; p and scratch must outlive this. with_masses: also sum the
  // probabilities per group of buckets, which the draws need. Costs
  // one pass over p; no id is placed yet.
  SortedByProbability(const double* p, int64_t vocab, double max_p, double min_p, bool with_masses,
                      ProbabilitySortScratch* scratch);

  // The id at position i of the order, 0 <= i < vocab.
  int64_t At(int64_t i);

  // The first id whose probability, summed in this order, exceeds u: the
  // draw when neither top_k nor top_p renormalised anything. Groups and
  // buckets the sum passes whole need no order: their masses, summed in a
  // fixed order, stay within the rounding slack of the ordered sums, so
  // only the group where the sum crosses u is placed and only the bucket
  // where it crosses is sorted. nullopt when u lies within that slack of a
  // crossing or past the total (then walk with At), or without with_masses.
  std::optional<int64_t> DrawUntruncated(double u);

  // The draw of docs/model.md's nucleus when top_k kept every id: the
  // shortest prefix of the order whose mass, summed in order, reaches top_p,
  // renormalised by that mass, then the first id of it whose cumulative
  // probability exceeds u. Sorts only the buckets where the two sums cross;
  // nullopt when either lies within the slack of a crossing (then walk with
  // At), or without with_masses.
  std::optional<int64_t> DrawNucleus(double top_p, double u);

  // The bound the draws keep from every crossing (DrawNucleus's second
  // crossing keeps three).
  double slack() const { return slack_; }

 private:
  // Where a sum over the order first passes target (reaches: >= rather than
  // >): the position, the sum through it as the masses give it (within
  // slack_ of the ordered sum), and whether the ordered sum surely stays
  // below target before it (before_clear: the sum before lies more than
  // margin below, or it is the first term) and surely passes it there
  // (after_clear: the sum through it lies more than margin above, or with
  // exact_first it is the first term, which both sums hold exactly).
  // nullopt when the sum never passes target or without with_masses.
  struct Crossing {
    int64_t pos;
    double sum;
    bool before_clear, after_clear;
  };
  std::optional<Crossing> Cross(double target, double margin, bool reaches, bool exact_first);
  // The counting pass: each id's bucket, the bucket sizes in start_[b + 1],
  // and with_masses the group masses.
  void Count(bool with_masses);
  // Places the ids of buckets [lo, hi] not placed yet, in one pass over the
  // ids, each bucket's in id order.
  void Place(int64_t lo, int64_t hi);
  void SortBucket(int64_t b);  // places it first if need be
  int64_t Bucket(int64_t i) const;  // non-decreasing as p_[i] falls

  static constexpr uint8_t kPlaced = 1, kSorted = 2;
  // The draws' masses are summed per group of buckets while counting (a
  // small array the counting pass keeps in L1), then per bucket inside the
  // one group where a sum crosses.
  static constexpr int64_t kGroupBuckets = 64;
  static constexpr int64_t kGroups = kBuckets / kGroupBuckets;

  const double* p_;
  int64_t vocab_;
  std::vector<int64_t>& ids_;
  std::vector<int64_t>& start_;  // bucket b holds ids_[start_[b], start_[b + 1])
  std::vector<int64_t>& fill_;   // Place's write positions
  std::vector<uint16_t>& bucket_;  // each id's bucket
  std::vector<uint8_t>& state_;    // each bucket's kPlaced, kSorted bits
  std::vector<uint8_t>& wanted_;   // Place's buckets
  std::vector<uint64_t>& keys_;
  bool with_masses_;
  std::array<double, kGroups> group_mass_;  // each group's probabilities, in a fixed order
  double slack_ = 0.0;
  uint64_t top_ = 0;        // the bits of max_p
  int shift_ = 0;           // a bucket is 2^shift_ values of the bits wide
  int id_bits_ = 0;         // the low bits of a sort key that hold the id
  bool ids_fit_ = false;    // every id fits in id_bits_
  int64_t next_ = 0;        // the first bucket At has not passed
  int64_t sorted_end_ = 0;  // ids_[0, sorted_end_) are in their final order
};

}  // namespace pdserve
