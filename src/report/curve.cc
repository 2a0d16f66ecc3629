// Bounded series over the step axis: see curve.h.
#include "report/curve.h"

#include <algorithm>
#include <cmath>

namespace myriad::report {
namespace {

constexpr size_t kMaxBuckets = 512;          // per curve; each bucket draws as <= 2 points (its min and max)
constexpr size_t kMaxTimelineColumns = 160;  // step columns of the step x expert heatmap

int64_t floor_half(int64_t k) {
  return k >= 0 ? k / 2 : -((1 - k) / 2);
}

}  // namespace

void Curve::add(double x, double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  merge(buckets_[int64_t(std::floor(x / width_))], Bucket{1, x, y, {x, y}, {x, y}});
  min_y_ = std::min(min_y_, y);
  max_y_ = std::max(max_y_, y);
  sum_y_ += y;
  ++count_;
  last_ = {x, y};
  while (buckets_.size() > kMaxBuckets) coarsen();
}

std::vector<Point> Curve::envelope() const {
  std::vector<Point> out;
  out.reserve(2 * buckets_.size());
  for (const auto& [k, b] : buckets_) {
    if (b.n == 1 || (b.lo.x == b.hi.x && b.lo.y == b.hi.y)) {
      out.push_back(b.lo);
    } else if (b.lo.x <= b.hi.x) {
      out.push_back(b.lo);
      out.push_back(b.hi);
    } else {
      out.push_back(b.hi);
      out.push_back(b.lo);
    }
  }
  return out;
}

std::vector<Point> Curve::smoothed(const std::vector<double>& breaks) const {
  std::vector<const Bucket*> bs;
  std::vector<size_t> seg;
  for (const auto& [k, b] : buckets_) {
    bs.push_back(&b);
    const double x = b.sum_x / double(b.n);
    seg.push_back(size_t(std::upper_bound(breaks.begin(), breaks.end(), x) - breaks.begin()));
  }
  const size_t half = bs.size() / 100;
  std::vector<Point> out;
  for (size_t i = 0; i < bs.size(); ++i) {
    const size_t a = i >= half ? i - half : 0, z = std::min(bs.size() - 1, i + half);
    double n = 0, s = 0;
    for (size_t j = a; j <= z; ++j) {
      if (seg[j] != seg[i]) continue;
      n += double(bs[j]->n);
      s += bs[j]->sum_y;
    }
    out.push_back({bs[i]->sum_x / double(bs[i]->n), s / n});
  }
  return out;
}

void Curve::merge(Bucket& a, const Bucket& b) {
  if (a.n == 0) {
    a = b;
    return;
  }
  a.n += b.n;
  a.sum_x += b.sum_x;
  a.sum_y += b.sum_y;
  if (b.lo.y < a.lo.y) a.lo = b.lo;
  if (b.hi.y > a.hi.y) a.hi = b.hi;
}

void Curve::coarsen() {
  std::map<int64_t, Bucket> merged;
  for (const auto& [k, b] : buckets_) merge(merged[floor_half(k)], b);
  buckets_.swap(merged);
  width_ *= 2;
}

void Timeline::add(double step, const std::vector<double>& ratio_E) {
  Column& c = cols[int64_t(std::floor(step / width))];
  if (c.sum.empty()) c.sum.assign(experts, 0.0);
  for (size_t e = 0; e < experts; ++e) c.sum[e] += ratio_E[e];
  ++c.n;
  while (cols.size() > kMaxTimelineColumns) coarsen();
}

void Timeline::coarsen() {
  std::map<int64_t, Column> merged;
  for (auto& [k, c] : cols) {
    Column& m = merged[floor_half(k)];
    if (m.sum.empty()) m.sum.assign(experts, 0.0);
    for (size_t e = 0; e < experts; ++e) m.sum[e] += c.sum[e];
    m.n += c.n;
  }
  cols.swap(merged);
  width *= 2;
}

}  // namespace myriad::report
