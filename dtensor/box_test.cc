#include "meshflow/dtensor/box.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

TEST(IntervalTest, Basics) {
  constexpr Interval iv{2, 5};
  static_assert(iv.size() == 3);
  static_assert(!iv.empty());
  static_assert(Interval{4, 4}.empty());
  EXPECT_EQ(iv, (Interval{2, 5}));
  EXPECT_FALSE(iv == (Interval{2, 6}));
}

// Reference torch.chunk on [b, e) into k parts.
Interval RefChunk(int64_t b, int64_t e, int64_t k, int64_t i) {
  const int64_t n = e - b;
  const int64_t chunk = n == 0 ? 0 : (n + k - 1) / k;
  const int64_t lo = std::min(n, i * chunk);
  const int64_t hi = std::min(n, (i + 1) * chunk);
  return Interval{b + lo, b + hi};
}

TEST(ChunkOfTest, HandPicked) {
  // n=5 over 4 -> sizes 2,2,1,0.
  EXPECT_EQ(ChunkOf({0, 5}, 4, 0), (Interval{0, 2}));
  EXPECT_EQ(ChunkOf({0, 5}, 4, 1), (Interval{2, 4}));
  EXPECT_EQ(ChunkOf({0, 5}, 4, 2), (Interval{4, 5}));
  EXPECT_EQ(ChunkOf({0, 5}, 4, 3).size(), 0);
  // n=2 over 4 -> 1,1,0,0.
  EXPECT_EQ(ChunkOf({0, 2}, 4, 0), (Interval{0, 1}));
  EXPECT_EQ(ChunkOf({0, 2}, 4, 1), (Interval{1, 2}));
  EXPECT_EQ(ChunkOf({0, 2}, 4, 2).size(), 0);
  EXPECT_EQ(ChunkOf({0, 2}, 4, 3).size(), 0);
  // n=6 over 4 -> chunk 2: 2,2,2,0 (torch.chunk, not "balanced" 2,2,1,1).
  EXPECT_EQ(ChunkOf({0, 6}, 4, 2), (Interval{4, 6}));
  EXPECT_EQ(ChunkOf({0, 6}, 4, 3).size(), 0);
  // Offset interval.
  EXPECT_EQ(ChunkOf({10, 17}, 3, 0), (Interval{10, 13}));
  EXPECT_EQ(ChunkOf({10, 17}, 3, 1), (Interval{13, 16}));
  EXPECT_EQ(ChunkOf({10, 17}, 3, 2), (Interval{16, 17}));
  // Empty input gives empty parts that stay inside the interval.
  for (int i = 0; i < 3; ++i) {
    const Interval c = ChunkOf({4, 4}, 3, i);
    EXPECT_TRUE(c.empty());
    EXPECT_EQ(c.begin, 4);
    EXPECT_EQ(c.end, 4);
  }
  // k = 1 is the identity.
  EXPECT_EQ(ChunkOf({3, 9}, 1, 0), (Interval{3, 9}));
  static_assert(ChunkOf({0, 5}, 4, 1) == Interval{2, 4});
}

TEST(ChunkOfTest, ExhaustiveAgainstReference) {
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t n = 0; n <= 20; ++n) {
      for (int64_t k = 1; k <= 9; ++k) {
        int64_t covered = b;
        for (int64_t i = 0; i < k; ++i) {
          const Interval c = ChunkOf({b, b + n}, k, i);
          const Interval want = RefChunk(b, b + n, k, i);
          ASSERT_EQ(c.size(), want.size()) << "b=" << b << " n=" << n << " k=" << k << " i=" << i;
          ASSERT_EQ(c, want);
          ASSERT_GE(c.size(), 0);
          ASSERT_GE(c.begin, b);
          ASSERT_LE(c.end, b + n);
          // Parts are consecutive and cover the interval.
          if (!c.empty()) {
            ASSERT_EQ(c.begin, covered);
            covered = c.end;
          }
        }
        ASSERT_EQ(covered, b + n);
      }
    }
  }
}

TEST(BoxTest, Basics) {
  const Box b{{1, 2}, {3, 4}};
  EXPECT_EQ(b.rank(), 2);
  EXPECT_EQ(b.NumElements(), 12);
  EXPECT_FALSE(b.empty());
  EXPECT_EQ(b.dim(0), (Interval{1, 4}));
  EXPECT_EQ(b.dim(1), (Interval{2, 6}));
  EXPECT_EQ(b.ToString(), "[1:4, 2:6]");
  const Box e{{0, 5}, {3, 0}};
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.NumElements(), 0);
  EXPECT_EQ(e.ToString(), "[0:3, 5:5]");
  const Box scalar{{}, {}};
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_FALSE(scalar.empty());
  EXPECT_EQ(scalar.ToString(), "[]");
  EXPECT_TRUE(scalar.Contains(std::vector<int64_t>{}));
  EXPECT_EQ(b, (Box{{1, 2}, {3, 4}}));
  EXPECT_FALSE(b == (Box{{1, 2}, {3, 5}}));
}

TEST(BoxTest, Contains) {
  const Box b{{1, 2}, {3, 4}};
  EXPECT_TRUE(b.Contains(std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(b.Contains(std::vector<int64_t>{3, 5}));
  EXPECT_FALSE(b.Contains(std::vector<int64_t>{4, 5}));
  EXPECT_FALSE(b.Contains(std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(b.Contains(std::vector<int64_t>{1, 6}));
  EXPECT_FALSE(b.Contains(std::vector<int64_t>{1}));
  EXPECT_FALSE(b.Contains(std::vector<int64_t>{1, 2, 0}));
  const Box e{{0, 0}, {0, 4}};
  EXPECT_FALSE(e.Contains(std::vector<int64_t>{0, 0}));
}

TEST(BoxTest, FullBox) {
  const std::vector<int64_t> shape = {2, 0, 3};
  const Box f = FullBox(shape);
  EXPECT_EQ(f, (Box{{0, 0, 0}, {2, 0, 3}}));
  EXPECT_TRUE(f.empty());
  EXPECT_EQ(FullBox(std::vector<int64_t>{}), (Box{{}, {}}));
}

TEST(BoxTest, Intersect) {
  const Box a{{0, 0}, {4, 4}};
  const Box b{{2, 1}, {4, 2}};
  EXPECT_EQ(Intersect(a, b), (Box{{2, 1}, {2, 2}}));
  EXPECT_EQ(Intersect(b, a), (Box{{2, 1}, {2, 2}}));
  EXPECT_EQ(Intersect(a, a), a);
  // Disjoint in one dim: empty.
  const Box c{{5, 0}, {2, 4}};
  EXPECT_TRUE(Intersect(a, c).empty());
  EXPECT_EQ(Intersect(a, c).shape[0], 0);
  EXPECT_EQ(Intersect(a, c).shape[1], 4);
  // Touching boxes do not overlap.
  EXPECT_TRUE(Intersect(Box{{0}, {2}}, Box{{2}, {2}}).empty());
  // Rank 0.
  EXPECT_EQ(Intersect(Box{{}, {}}, Box{{}, {}}).NumElements(), 1);
}

TEST(BoxTest, IntersectMatchesElementwiseCount) {
  // 1-D and 2-D boxes with small offsets and sizes: |A ∩ B| counted element by element.
  for (int64_t ao = 0; ao < 3; ++ao)
    for (int64_t as = 0; as < 4; ++as)
      for (int64_t bo = 0; bo < 4; ++bo)
        for (int64_t bs = 0; bs < 4; ++bs) {
          const Box a{{ao, bo}, {as, bs}};
          const Box b{{bo, ao}, {bs, as}};
          const Box x = Intersect(a, b);
          int64_t count = 0;
          for (int64_t i = 0; i < 8; ++i)
            for (int64_t j = 0; j < 8; ++j) {
              const std::vector<int64_t> idx = {i, j};
              const bool in = a.Contains(idx) && b.Contains(idx);
              count += in;
              if (in) {
                ASSERT_TRUE(x.Contains(idx));
              }
            }
          ASSERT_EQ(x.NumElements(), count) << a.ToString() << " " << b.ToString();
        }
}

TEST(BoxTest, ExtremeValuesDoNotOverflow) {
  // Boxes read from crafted checkpoint metadata: offset + extent past INT64_MAX was signed
  // overflow (UB) in ToString, Contains and Intersect, and the extent product in NumElements.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const Box far{{kMax, 0}, {2, 3}};
  EXPECT_EQ(far.ToString(), "[9223372036854775807:9223372036854775809, 0:3]");
  EXPECT_EQ(far.End(0), std::nullopt);
  EXPECT_EQ(far.End(1), std::optional<int64_t>(3));
  EXPECT_EQ((Box{{0}, {kMax}}).End(0), std::optional<int64_t>(kMax));
  EXPECT_TRUE(far.Contains(std::vector<int64_t>{kMax, 2}));
  EXPECT_FALSE(far.Contains(std::vector<int64_t>{kMax - 1, 2}));
  EXPECT_FALSE(far.Contains(std::vector<int64_t>{kMax, 3}));
  // A negative offset with a huge extent: index - offset does not fit in int64.
  const Box wide{{std::numeric_limits<int64_t>::min()}, {kMax}};
  EXPECT_EQ(wide.ToString(), "[-9223372036854775808:-1]");
  EXPECT_FALSE(wide.Contains(std::vector<int64_t>{kMax}));
  EXPECT_TRUE(wide.Contains(std::vector<int64_t>{-2}));
  EXPECT_FALSE(wide.Contains(std::vector<int64_t>{-1}));
  // Intersect of boxes ending past INT64_MAX.
  const Box a{{kMax - 1}, {kMax}};
  const Box b{{kMax - 4}, {10}};
  EXPECT_EQ(Intersect(a, b), (Box{{kMax - 1}, {7}}));  // [kMax-1, kMax+6)
  EXPECT_EQ(Intersect(a, Box{{0}, {5}}), (Box{{kMax - 1}, {0}}));
  // NumElements saturates, keeps the sign, and an empty dim still gives 0.
  EXPECT_EQ((Box{{0, 0}, {int64_t{1} << 40, int64_t{1} << 40}}).NumElements(), kMax);
  EXPECT_EQ((Box{{0, 0, 0}, {int64_t{1} << 40, int64_t{1} << 40, 0}}).NumElements(), 0);
  EXPECT_EQ((Box{{0, 0}, {int64_t{1} << 40, -(int64_t{1} << 40)}}).NumElements(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ((Box{{0, 0}, {int64_t{1} << 31, int64_t{1} << 31}}).NumElements(), int64_t{1} << 62);
}

}  // namespace
}  // namespace meshflow
