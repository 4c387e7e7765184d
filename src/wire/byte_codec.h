// ByteWriter / ByteReader: the little-endian field codec of the RPC payloads that are not
// frames (membership, mesh, netverify): integers, finite non-negative figures, short
// strings, NID lists and counted lists, with limits. A reader never reads past its span:
// a short or malformed field clears ok() and every later read returns zero/empty; the
// caller checks done() (all bytes used, none missing) once at the end.
// Thread safety: plain values.
#pragma once

#include <pfsnet/buffer.h>
#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wire/nid_form.h"

namespace pfsnet {

inline constexpr size_t kMaxFieldString = 255;  // a string field: one length byte
inline constexpr size_t kMaxFieldNids = 64;     // a NID list: one count byte, at most this
inline constexpr size_t kMaxFieldList = 1 << 16;

class ByteWriter {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { raw(&v, 2); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  // Longer strings are cut at kMaxFieldString bytes.
  void str(const std::string& s) {
    size_t n = std::min(s.size(), kMaxFieldString);
    u8(static_cast<uint8_t>(n));
    out_.append(s.data(), n);
  }
  // A NID in its wire form (wire/nid_form.h): 8 bytes, or 24 for an IPv6 one.
  void nid(const Nid& n) {
    uint8_t b[8 + Nid::kMaxAddrBytes];
    put_nid(b, n);
    out_.append(reinterpret_cast<const char*>(b), nid_wire_size(n));
  }
  void nids(const std::vector<Nid>& v) {
    size_t n = std::min(v.size(), kMaxFieldNids);
    u8(static_cast<uint8_t>(n));
    for (size_t i = 0; i < n; ++i) nid(v[i]);
  }
  size_t size() const { return out_.size(); }
  Buffer take() { return Buffer::copy_of(std::string_view(out_)); }
  const std::string& bytes() const { return out_; }

 private:
  void raw(const void* p, size_t n) {  // little-endian hosts only (x86-64, aarch64)
    out_.append(static_cast<const char*>(p), n);
  }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == b_.size(); }
  void fail() { ok_ = false; }
  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  int64_t i64() { return get<int64_t>(); }
  // A figure: finite and not negative, or the message is malformed.
  double f64() {
    double v = get<double>();
    if (!std::isfinite(v) || v < 0) ok_ = false;
    return v;
  }
  std::string str() {
    size_t n = u8();
    if (!need(n)) return {};
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // A NID (wire/nid_form.h); a malformed one clears ok() and reads as Nid().
  Nid nid() { return try_nid().value_or(Nid()); }
  // The same, saying what was wrong with a malformed one.
  Result<Nid> try_nid() {
    if (!ok_) return Status(Code::kProtocol, "NID truncated");
    size_t used = 0;
    auto n = get_nid(b_.subspan(pos_), &used);
    if (!n.ok()) {
      ok_ = false;
      return n;
    }
    pos_ += used;
    return n;
  }
  // A NID or none: none is written as a u64 0 (which no NID's form begins with).
  std::optional<Nid> nid_or_none() {
    if (ok_ && b_.size() - pos_ >= 8 && le::get<uint64_t>(b_.data() + pos_) == 0) {
      pos_ += 8;
      return std::nullopt;
    }
    return nid();
  }
  std::vector<Nid> nids() {
    size_t n = u8();
    std::vector<Nid> v;
    if (n > kMaxFieldNids || !need(n * 8)) {
      ok_ = false;
      return v;
    }
    for (size_t i = 0; i < n && ok_; ++i) v.push_back(nid());
    if (!ok_) v.clear();
    return v;
  }
  // A list count (u32) that the remaining bytes can hold at `min_each` bytes per item.
  size_t count(size_t min_each) {
    size_t n = u32();
    if (n > kMaxFieldList || !need(n * min_each)) {
      ok_ = false;
      return 0;
    }
    return n;
  }

 protected:
  bool need(size_t n) {
    if (!ok_ || b_.size() - pos_ < n) ok_ = false;
    return ok_;
  }

 private:
  template <class T>
  T get() {
    T v{};
    if (!need(sizeof(T))) return v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// `v` when the reader used every byte and missed none, else "malformed WHAT message".
template <class T>
Result<T> finish_decode(const ByteReader& r, T v, const char* what) {
  if (!r.done()) return Status(Code::kProtocol, std::string("malformed ") + what + " message");
  return v;
}

}  // namespace pfsnet
