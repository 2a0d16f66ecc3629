// Bounded series over the step axis (internal to src/report): a Curve per metric and a Timeline of expert load.
//
// Memory stays bounded however long the run: every curve is kept in step buckets that double in width (pairs
// merge) when there are more than kMaxBuckets, with each bucket's count, sums and its min and max points. The step
// x expert heatmap's Timeline buckets the same way (at most kMaxTimelineColumns columns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace myriad::report {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Point {
  double x = 0, y = 0;
};

class Curve {
 public:
  struct Bucket {
    int64_t n = 0;
    double sum_x = 0, sum_y = 0;
    Point lo, hi;  // the points with the smallest and the largest y
  };

  void add(double x, double y);

  bool empty() const { return count_ == 0; }
  int64_t count() const { return count_; }
  Point last() const { return last_; }
  double min_y() const { return min_y_; }
  double max_y() const { return max_y_; }
  double mean_y() const { return count_ ? sum_y_ / double(count_) : kNaN; }
  double bucket_width() const { return width_; }
  bool exact() const { return size_t(count_) == buckets_.size(); }

  // Every point while each bucket holds one; otherwise each bucket's min and max, in step order.
  std::vector<Point> envelope() const;

  // Bucket means under a centred moving average over ~1/100 of the buckets, weighted by their counts; the
  // window does not reach across `breaks` (sorted steps: the stage switches, where throughput jumps).
  std::vector<Point> smoothed(const std::vector<double>& breaks) const;

 private:
  static void merge(Bucket& a, const Bucket& b);
  void coarsen();

  double width_ = 1;  // steps per bucket
  std::map<int64_t, Bucket> buckets_;
  int64_t count_ = 0;
  double min_y_ = kInf, max_y_ = -kInf, sum_y_ = 0;
  Point last_;
};

// Expert load of one MoE layer over training, in step columns that double in width like Curve's buckets; each
// column holds the sum over its records of load / mean load per expert.
struct Timeline {
  struct Column {
    int64_t n = 0;
    std::vector<double> sum;  // [E]
  };
  int64_t layer = -1;
  size_t experts = 0;
  double width = 1;
  std::map<int64_t, Column> cols;

  void add(double step, const std::vector<double>& ratio_E);
  void coarsen();
};

}  // namespace myriad::report
