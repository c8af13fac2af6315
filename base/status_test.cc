#include "meshflow/base/status.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgumentError("mesh dim 1 has size 0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: mesh dim 1 has size 0");
  EXPECT_EQ(s.WithContext("Create").message(), "Create: mesh dim 1 has size 0");
  EXPECT_TRUE(Status().WithContext("x").ok());
  // A message that already starts with the context is not prefixed twice ("rank 0: rank 0:").
  const Status agreed = UnavailableError("rank 0: disk full");
  EXPECT_EQ(agreed.WithContext("rank 0").message(), "rank 0: disk full");
  EXPECT_EQ(agreed.WithContext("rank 1").message(), "rank 1: rank 0: disk full");
  EXPECT_EQ(UnavailableError("rank 01: x").WithContext("rank 0").message(), "rank 0: rank 01: x");
  EXPECT_EQ(UnavailableError("rank 0").WithContext("rank 0").message(), "rank 0: rank 0");
}

TEST(StatusOrTest, ValueAndError) {
  StatusOr<int> v = 3;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 3);
  StatusOr<int> e = OutOfRangeError("rank 9");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
}

TEST(StatusOrTest, OkStatusWithoutValueBecomesInternal) {
  StatusOr<int> e = Status();
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

// value() on an error aborts with the status in every build mode (it was an assert, i.e.
// undefined behaviour in opt builds); so do operator* and operator->.
TEST(StatusOrDeathTest, ValueOfErrorAbortsWithTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const StatusOr<int> e = OutOfRangeError("rank 9 of 4");
  EXPECT_DEATH((void)e.value(), "StatusOr::value\\(\\) on an error: OUT_OF_RANGE: rank 9 of 4");
  StatusOr<std::string> s = NotFoundError("no file /x");
  EXPECT_DEATH((void)*s, "on an error: NOT_FOUND: no file /x");
  EXPECT_DEATH((void)s->size(), "on an error: NOT_FOUND: no file /x");
  EXPECT_DEATH((void)std::move(s).value(), "on an error: NOT_FOUND: no file /x");
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> q = std::move(p).value();
  EXPECT_EQ(*q, 7);
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  MF_ASSIGN_OR_RETURN(int h, Half(x));
  MF_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckQuarter(int x) {
  MF_RETURN_IF_ERROR(Quarter(x));
  return Status();
}

TEST(StatusMacrosTest, PropagateErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd value 3");
  EXPECT_TRUE(CheckQuarter(4).ok());
  EXPECT_EQ(CheckQuarter(2).message(), "odd value 1");
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

StatusOr<std::string> MakeTemporary(bool ok) {
  if (!ok) return DataLossError("temporary failed");
  return std::string("value");
}

Status CheckTemporaryStatus(bool ok) {
  // status() of a temporary StatusOr: the macro must not keep a reference past the expression.
  MF_RETURN_IF_ERROR(MakeTemporary(ok).status());
  return Status();
}

TEST(StatusMacrosTest, StatusOfTemporaryIsCopied) {
  EXPECT_TRUE(CheckTemporaryStatus(true).ok());
  EXPECT_EQ(CheckTemporaryStatus(false).message(), "temporary failed");
}

}  // namespace
}  // namespace meshflow
