#include "base/json_fields.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

using nlohmann::json;

// What nlohmann's get<int64_t>() would convert without a check -- a float far outside the
// range (undefined behaviour), a fraction (truncated), a huge unsigned (wrapped) -- is
// refused with the field's name and range.
TEST(JsonFieldsTest, IntegersAreWholeAndInRange) {
  json j = json::parse(R"({"a": 5, "b": 6.0, "c": 6.6666e81, "d": 2.5, "e": 18446744073709551615,
                           "f": -3, "g": "7", "h": null, "i": 1e300})");
  EXPECT_EQ(*json_int(j, "a", 0, 0, 10), 5);
  EXPECT_EQ(*json_int(j, "b", 0, 0, 10), 6);
  EXPECT_EQ(*json_int(j, "missing", 42, 0, 10), 42);
  for (const char* k : {"c", "d", "e", "f", "g", "h", "i"}) {
    auto r = json_int(j, k, 0, 0, 10);
    ASSERT_FALSE(r.ok()) << k;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().message(), std::string(k) + " must be a whole number 0..10");
  }
  EXPECT_FALSE(json_int(j, "e", 0, 0, INT64_MAX).ok());  // 2^64 - 1 is past int64_t
  EXPECT_EQ(*json_int(j, "f", 0, -5, 0), -3);
  EXPECT_EQ(*json_int(json::array(), "a", 7, 0, 10), 7);  // not an object: the default
}

TEST(JsonFieldsTest, NumbersAreFiniteAndInRange) {
  json j = json::parse(R"({"a": 0.5, "b": 3, "c": 1e300, "d": "x", "e": -1})");
  EXPECT_EQ(*json_number(j, "a", 0, 0, 1), 0.5);
  EXPECT_EQ(*json_number(j, "b", 0, 0, 10), 3.0);
  EXPECT_EQ(*json_number(j, "z", 9, 0, 10), 9.0);
  for (const char* k : {"c", "d", "e"}) EXPECT_FALSE(json_number(j, k, 0, 0, 10).ok()) << k;
}

}  // namespace
}  // namespace pfsnet
