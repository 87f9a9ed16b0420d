#include "runtime/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace attnkit {
namespace {

Status FailIfNegative(int x) {
  if (x < 0) return Status::InvalidArgument("x=" + std::to_string(x));
  return Status::Ok();
}

Status Chain(int x, int* reached) {
  ATTNKIT_RETURN_IF_ERROR(FailIfNegative(x));
  *reached = 1;
  return Status::Ok();
}

StatusOr<std::unique_ptr<int>> MakeBox(int x) {
  ATTNKIT_RETURN_IF_ERROR(FailIfNegative(x));
  return std::make_unique<int>(x);
}

StatusOr<int> Unbox(int x) {
  ATTNKIT_ASSIGN_OR_RETURN(auto box, MakeBox(x));
  return *box + 1;
}

TEST(StatusTest, OkAndErrorToString) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  const Status s = Status::OutOfRange("sequence 2 has length 8");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.ToString(), "OUT_OF_RANGE: sequence 2 has length 8");
}

TEST(StatusTest, ReturnIfErrorStopsAtTheError) {
  int reached = 0;
  EXPECT_EQ(Chain(-3, &reached).message(), "x=-3");
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(Chain(3, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusTest, StatusOrCarriesMoveOnlyValuesAndErrors) {
  StatusOr<int> good = Unbox(41);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  StatusOr<int> bad = Unbox(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "x=-1");
}

}  // namespace
}  // namespace attnkit
