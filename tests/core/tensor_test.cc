#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"

namespace myriad {
namespace {

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(i);
  return t;
}

TEST(Tensor, ContiguousStridesAndNumel) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(Tensor::zeros({}).numel(), 1);
  EXPECT_EQ(Tensor::zeros({2, 0}).numel(), 0);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.storage(), t.storage());
  Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.at({3, 2, 1}), t.at({1, 2, 3}));
  Tensor s = t.slice(1, 1, 3);  // [2, 2, 4]
  EXPECT_EQ(s.at({1, 0, 2}), t.at({1, 1, 2}));
  Tensor sel = t.select(0, 1);  // [3, 4]
  EXPECT_EQ(sel.at({2, 3}), 23.0);
  // writing through a view is visible in the base
  t.view({24}).slice(0, 5, 6).fill(-1.0f);
  EXPECT_EQ(t.at({0, 1, 1}), -1.0);
}

TEST(Tensor, ContiguousCopiesOnlyWhenNeeded) {
  Tensor t = iota({3, 5});
  EXPECT_EQ(t.contiguous().storage(), t.storage());
  Tensor c = t.transpose(0, 1).contiguous();
  EXPECT_NE(c.storage(), t.storage());
  ASSERT_TRUE(c.is_contiguous());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(c.at({i, j}), t.at({j, i}));
  Tensor p = iota({2, 3, 4}).permute({2, 0, 1}).contiguous();
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.at({3, 1, 2}), 1 * 12 + 2 * 4 + 3);
}

TEST(Tensor, ViewErrorsNameBothShapes) {
  Tensor t = iota({2, 3});
  try {
    t.view({4, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.transpose(0, 1).view({6}), Error);
  EXPECT_EQ(t.transpose(0, 1).reshape({6}).at({1}), 3.0);
  EXPECT_EQ(t.view({-1}).shape(), (Shape{6}));
  EXPECT_THROW(t.slice(1, 2, 4), Error);
}

TEST(Tensor, DTypeConversionsRoundTrip) {
  Tensor t = Tensor::from_vector(std::vector<float>{1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.0f}, {6});
  Tensor h = t.to(DType::kF16).to(DType::kF32);
  EXPECT_EQ(h.to_vector(), t.to_vector());  // all exactly representable in f16
  Tensor b = t.to(DType::kBF16).to(DType::kF32);
  EXPECT_EQ(b.at({1}), -2.5);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256.0f), f32_to_bf16(1.0f));  // tie rounds to even
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
}

TEST(Tensor, NegativeOrOverflowingShapesAreErrors) {
  EXPECT_THROW(Tensor::empty({-1, 2}), Error);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}), Error);
}

TEST(Arena, BumpAllocatesAlignedAndTracksPeak) {
  Arena arena(4096);
  void* a = arena.allocate(100);
  void* b = arena.allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_NE(a, b);
  void* big = arena.allocate(10000);  // chains a larger block; earlier pointers stay valid
  EXPECT_NE(big, nullptr);
  const size_t peak = arena.peak();
  EXPECT_GE(peak, 10200u);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.allocate(100), a);  // memory is reused after reset
  EXPECT_EQ(arena.peak(), peak);
  Tensor t = Tensor::empty_in(arena, {3, 4});
  t.fill(2.0f);
  EXPECT_EQ(t.at({2, 3}), 2.0);
}

void throwing_handler(const char* file, int line, const char* cond, const std::string& msg) {
  throw std::logic_error(std::string(file) + ":" + std::to_string(line) + ": " + cond + ": " + msg);
}

TEST(Check, InvariantNamesFileAndLine) {
  CheckHandler prev = set_check_handler(throwing_handler);
  try {
    Tensor::zeros({2}, DType::kI32).data<float>();
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor.h"), std::string::npos) << e.what();
  }
  set_check_handler(prev);
}

}  // namespace
}  // namespace myriad
