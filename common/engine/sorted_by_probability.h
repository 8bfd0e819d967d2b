// SortedByProbability: the ids of a row of probabilities in the order the
// sampler reads them (docs/model.md, "Sampling": probability descending,
// ties to the lower id), sorted only as far as they are read.
//   SortedByProbability  counting-sorts the ids into kBuckets buckets
//   At                   the id at a position (sorts the buckets up to it)
//   DrawUntruncated      the inverse-CDF draw over every id, sorting only
//                        the bucket where the sum crosses u; nullopt when
//                        u is too close to a crossing to call
// No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pdserve {

// The buffers a SortedByProbability works in: keep one per thread (a 128k
// vocabulary needs ~1 MB).
struct ProbabilitySortScratch {
  std::vector<int64_t> ids, start;
  std::vector<uint64_t> keys;
  std::vector<double> mass;
};

// A counting sort on each probability's double bits (monotone in the value
// for p >= 0) puts every id in one of kBuckets buckets, in probability order,
// ids ascending inside each; a bucket is sorted the first time a reader
// reaches it. The buckets split the bits between the largest probability
// and the smallest one not below 2^-32 of it into equal power-of-two widths
// (about equal widths in log p, however narrow the distribution); anything
// smaller shares the last bucket.
//
// Whole-vocabulary partial sorts, which this replaced, cost 2.2-34 ms a
// draw at 128k ids with temperature 1 or top_p 0.9 (a flat distribution
// walks far into the order); this costs a few linear passes plus the
// buckets a draw reaches (docs/benchmarks.md §5).
class SortedByProbability {
 public:
  static constexpr int64_t kBuckets = 4096;

  // p: vocab probabilities >= 0 summing to ~1, max_p and min_p their
  // extremes; p and scratch must outlive this. with_masses: also sum each
  // bucket's probabilities, which DrawUntruncated needs.
  SortedByProbability(const double* p, int64_t vocab, double max_p, double min_p, bool with_masses,
                      ProbabilitySortScratch* scratch);

  // The id at position i of the order, 0 <= i < vocab.
  int64_t At(int64_t i);

  // The first id whose probability, summed in this order, exceeds u: the
  // draw when neither top_k nor top_p renormalised anything. Buckets the sum
  // passes whole need no order: their masses, summed in id order, stay
  // within the rounding slack of the ordered sums, so only the bucket where
  // the sum crosses u is sorted. nullopt when u lies within that slack of a
  // crossing or past the total (then walk with At), or without with_masses.
  std::optional<int64_t> DrawUntruncated(double u);

  // The bound DrawUntruncated keeps from every crossing.
  double slack() const { return slack_; }

 private:
  void SortBucket(int64_t b);
  int64_t Bucket(int64_t i) const;  // non-decreasing as p_[i] falls

  const double* p_;
  std::vector<int64_t>& ids_;
  std::vector<int64_t>& start_;  // bucket b holds ids_[start_[b], start_[b + 1])
  std::vector<uint64_t>& keys_;
  std::vector<double>& mass_;  // each bucket's probabilities, summed in id order
  double slack_ = 0.0;
  uint64_t top_ = 0;        // the bits of max_p
  int shift_ = 0;           // a bucket is 2^shift_ values of the bits wide
  int id_bits_ = 0;         // the low bits of a sort key that hold the id
  bool ids_fit_ = false;    // every id fits in id_bits_
  int64_t next_ = 0;        // the first bucket At has not sorted
  int64_t sorted_end_ = 0;  // ids_[0, sorted_end_) are in their final order
};

}  // namespace pdserve
