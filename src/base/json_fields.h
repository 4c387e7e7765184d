// Numbers from JSON that came from outside (admin requests, HTTP query parameters, a
// peer's JSON payload), read with their type and range checked. nlohmann's own
// conversions do not check: get<int64_t>() of 6.7e81 is undefined behaviour (a float
// cast out of range), found by fuzz/admin_fuzz.
// Header-only: for the libraries that link nlohmann_json (base itself does not).
// Thread safety: pure functions.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pfsnet {

// `v` as a whole number in [lo, hi] (an integer, or a float with no fraction); anything
// else is kInvalidArgument: "<what> must be a whole number LO..HI".
inline Result<int64_t> json_int_value(const nlohmann::json& v, const std::string& what, int64_t lo,
                                      int64_t hi) {
  auto bad = [&] {
    return Status(Code::kInvalidArgument, what + " must be a whole number " + std::to_string(lo) +
                                              ".." + std::to_string(hi));
  };
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return bad();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return bad();
    return i;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // |d| < 2^62: in range of int64_t whatever lo and hi round to as doubles.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 4.6e18 ||
        d < static_cast<double>(lo) || d > static_cast<double>(hi))
      return bad();
    return static_cast<int64_t>(d);
  }
  return bad();
}

// Field `key` of `obj` (json_int_value); `def` when it is absent.
inline Result<int64_t> json_int(const nlohmann::json& obj, const char* key, int64_t def, int64_t lo,
                                int64_t hi) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end()) return def;
  return json_int_value(*it, key, lo, hi);
}

// Field `key` of `obj` as a finite number in [lo, hi]; `def` when it is absent.
inline Result<double> json_number(const nlohmann::json& obj, const char* key, double def, double lo,
                                  double hi) {
  if (!obj.is_object()) return def;
  auto it = obj.find(key);
  if (it == obj.end()) return def;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < lo ||
      it->get<double>() > hi)
    return Status(Code::kInvalidArgument, std::string(key) + " must be a number " +
                                              std::to_string(lo) + ".." + std::to_string(hi));
  return it->get<double>();
}

// `j` as a non-empty list of NIDs; otherwise kInvalidArgument naming `what`.
inline Result<std::vector<Nid>> json_nids(const nlohmann::json& j, const std::string& what) {
  std::vector<Nid> v;
  if (!j.is_array() || j.empty())
    return Status(Code::kInvalidArgument, what + ": a non-empty list of NIDs");
  for (const nlohmann::json& x : j) {
    if (!x.is_string()) return Status(Code::kInvalidArgument, what + ": NIDs only");
    auto n = Nid::parse(x.get<std::string>());
    if (!n.ok()) return Status(Code::kInvalidArgument, what + ": " + n.status().message());
    v.push_back(*n);
  }
  return v;
}

}  // namespace pfsnet
