#include "transport/tls_records.h"

// (Without the library's pre-0.53 names: its SHA1, MD5, ... macros break OpenSSL's headers.)
#define NO_COMPAT_IMB_API_053
#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>

namespace pfsnet {
namespace {

constexpr uint8_t kApplicationData = 23;
constexpr uint8_t kAlert = 21;
constexpr uint8_t kHandshake = 22;
constexpr uint8_t kKeyUpdate = 24;
constexpr uint8_t kNewSessionTicket = 4;
// TLSCiphertext.length at most (RFC 8446 5.2): 2^14 + 256.
constexpr size_t kMaxCiphertext = kTlsMaxPlain + 256;

// The library's function table for this CPU, chosen once (AVX-512 with VAES here).
IMB_MGR* mgr() {
  static IMB_MGR* m = [] {
    IMB_MGR* p = alloc_mb_mgr(0);
    if (p != nullptr) init_mb_mgr_auto(p, nullptr);
    return p;
  }();
  return m;
}

// Calls f(pointer, length) over bytes [skip, skip + n) of the buffers.
template <typename F>
void for_each_span(std::span<const iovec> v, size_t skip, size_t n, F&& f) {
  for (const iovec& b : v) {
    if (n == 0) return;
    if (skip >= b.iov_len) {
      skip -= b.iov_len;
      continue;
    }
    size_t k = std::min(b.iov_len - skip, n);
    f(static_cast<uint8_t*>(b.iov_base) + skip, k);
    n -= k;
    skip = 0;
  }
}

size_t total_of(std::span<const iovec> v) {
  size_t t = 0;
  for (const iovec& b : v) t += b.iov_len;
  return t;
}

}  // namespace

std::vector<uint8_t> hkdf_expand_label(std::span<const uint8_t> secret, const std::string& label,
                                       size_t n) {
  // HkdfLabel: uint16 length, opaque label<7..255> = "tls13 " + label, opaque context<0..255>
  // (empty); one block of HKDF-Expand: HMAC(secret, info || 0x01).
  std::string full = "tls13 " + label;
  std::vector<uint8_t> info = {static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n),
                               static_cast<uint8_t>(full.size())};
  info.insert(info.end(), full.begin(), full.end());
  info.push_back(0);  // context
  info.push_back(1);  // the block's counter
  uint8_t out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), info.data(), info.size(), out,
       &len);
  return std::vector<uint8_t>(out, out + std::min<size_t>(n, len));
}

TrafficKey::TrafficKey(const TrafficSecret& secret)
    : secret_(secret), key_(std::make_unique<gcm_key_data>()) {
  derive();
}

TrafficKey::~TrafficKey() {
  OPENSSL_cleanse(secret_.data(), secret_.size());
  OPENSSL_cleanse(key_.get(), sizeof(gcm_key_data));
}

void TrafficKey::derive() {
  std::vector<uint8_t> key = hkdf_expand_label(secret_, "key", 16);
  std::vector<uint8_t> iv = hkdf_expand_label(secret_, "iv", 12);
  IMB_AES128_GCM_PRE(mgr(), key.data(), key_.get());
  std::copy(iv.begin(), iv.end(), iv_.begin());
  OPENSSL_cleanse(key.data(), key.size());
  seq_ = 0;
}

void TrafficKey::update() {
  std::vector<uint8_t> next = hkdf_expand_label(secret_, "traffic upd", secret_.size());
  std::copy(next.begin(), next.end(), secret_.begin());
  OPENSSL_cleanse(next.data(), next.size());
  derive();
}

std::array<uint8_t, 12> TrafficKey::next_nonce() {
  std::array<uint8_t, 12> nonce = iv_;
  for (int i = 0; i < 8; ++i) nonce[4 + i] ^= static_cast<uint8_t>(seq_ >> (56 - 8 * i));
  ++seq_;
  return nonce;
}

// ---- sealing ----

RecordSealer::RecordSealer(const TrafficSecret& secret, UpdateRequest& requested,
                           uint64_t max_records)
    : key_(secret), requested_(requested), max_records_(std::max<uint64_t>(max_records, 2)) {}

size_t RecordSealer::sealed_size(size_t plain) {
  size_t records = (plain + kTlsMaxPlain - 1) / kTlsMaxPlain;
  // Each record's header, type byte and tag, and room for a KeyUpdate per record.
  return plain + records * 2 * (kTlsHeader + 1 + kTlsTag + 4);
}

void RecordSealer::seal_record(uint8_t type, std::span<const iovec> from, size_t skip, size_t n,
                               uint8_t* out) {
  size_t len = n + 1 + kTlsTag;
  out[0] = kApplicationData;  // every protected record's outer type
  out[1] = 0x03;
  out[2] = 0x03;
  out[3] = static_cast<uint8_t>(len >> 8);
  out[4] = static_cast<uint8_t>(len);
  std::array<uint8_t, 12> nonce = key_.next_nonce();
  gcm_context_data ctx;
  IMB_MGR* m = mgr();
  IMB_AES128_GCM_INIT(m, &key_.key(), &ctx, nonce.data(), out, kTlsHeader);
  uint8_t* dst = out + kTlsHeader;
  for_each_span(from, skip, n, [&](const uint8_t* p, size_t k) {
    IMB_AES128_GCM_ENC_UPDATE(m, &key_.key(), &ctx, dst, p, k);
    dst += k;
  });
  IMB_AES128_GCM_ENC_UPDATE(m, &key_.key(), &ctx, dst, &type, 1);
  IMB_AES128_GCM_ENC_FINALIZE(m, &key_.key(), &ctx, dst + 1, kTlsTag);
}

size_t RecordSealer::seal(std::span<const iovec> from, size_t skip, size_t max_plain, uint8_t* out,
                          size_t& out_len, std::vector<RecordEnd>& ends) {
  size_t avail = total_of(from);
  avail = avail > skip ? avail - skip : 0;
  size_t want = std::min(avail, max_plain), sealed = 0;
  while (sealed < want) {
    if (requested_.exchange(false, std::memory_order_relaxed) || key_.seq() + 1 >= max_records_) {
      // KeyUpdate, update_not_requested, under the old key; then the next key.
      uint8_t msg[5] = {kKeyUpdate, 0, 0, 1, 0};
      iovec v{msg, sizeof(msg)};
      seal_record(kHandshake, {&v, 1}, 0, sizeof(msg), out + out_len);
      out_len += kTlsHeader + sizeof(msg) + 1 + kTlsTag;
      ends.push_back(RecordEnd{out_len, sealed});
      key_.update();
      ++updates_;
    }
    size_t n = std::min(kTlsMaxPlain, want - sealed);
    seal_record(kApplicationData, from, skip + sealed, n, out + out_len);
    out_len += kTlsHeader + n + 1 + kTlsTag;
    sealed += n;
    ends.push_back(RecordEnd{out_len, sealed});
  }
  return sealed;
}

// ---- opening ----

RecordOpener::RecordOpener(const TrafficSecret& secret, UpdateRequest& requested)
    : key_(secret), requested_(requested), plain_(new uint8_t[kMaxCiphertext]) {}

size_t RecordOpener::record_size(std::span<const uint8_t> in) {
  if (in.size() < kTlsHeader) return 0;
  size_t len = (size_t{in[3]} << 8) | in[4];
  if (in.size() < kTlsHeader + len) return 0;
  return kTlsHeader + len;
}

bool RecordOpener::decrypt(const uint8_t* header, std::span<const uint8_t> body,
                           const std::array<uint8_t, 12>& nonce, std::span<const iovec> dst,
                           OpenResult& r) {
  size_t inner = body.size() - kTlsTag;
  gcm_context_data ctx;
  IMB_MGR* m = mgr();
  IMB_AES128_GCM_INIT(m, &key_.key(), &ctx, nonce.data(), header, kTlsHeader);
  const uint8_t* src = body.data();
  for_each_span(dst, 0, inner, [&](uint8_t* p, size_t k) {
    IMB_AES128_GCM_DEC_UPDATE(m, &key_.key(), &ctx, p, src, k);
    src += k;
  });
  uint8_t tag[kTlsTag];
  IMB_AES128_GCM_DEC_FINALIZE(m, &key_.key(), &ctx, tag, kTlsTag);
  if (CRYPTO_memcmp(tag, body.data() + inner, kTlsTag) != 0) {
    r.bad_mac = true;
    r.error = "decryption failed or bad record mac";
    return false;
  }
  return true;
}

bool RecordOpener::handle_control(uint8_t type, std::span<const uint8_t> c, OpenResult& r) {
  if (type == kAlert) {
    if (c.size() != 2) {
      r.error = "malformed alert";
      return false;
    }
    if (c[1] == SSL_AD_CLOSE_NOTIFY) {
      r.closed = true;
      return false;
    }
    r.alert = true;
    r.error = std::string("peer sent alert: ") + SSL_alert_desc_string_long(c[1]);
    return false;
  }
  if (type != kHandshake) {
    r.error = "unexpected record type " + std::to_string(type) + " after the handshake";
    return false;
  }
  while (!c.empty()) {  // handshake messages: type, 24-bit length, body
    if (c.size() < 4) break;
    size_t len = (size_t{c[1]} << 16) | (size_t{c[2]} << 8) | c[3];
    if (c.size() < 4 + len) break;
    if (c[0] == kKeyUpdate) {
      if (len != 1 || c[4] > 1 || c.size() != 5) {
        r.error = "malformed KeyUpdate";
        return false;
      }
      key_.update();  // the records after this one are under the next key
      ++updates_;
      if (c[4] == 1) requested_.store(true, std::memory_order_relaxed);
    } else if (c[0] != kNewSessionTicket) {
      r.error = "unexpected handshake message " + std::to_string(c[0]) + " after the handshake";
      return false;
    }
    c = c.subspan(4 + len);
  }
  if (!c.empty()) {
    r.error = "handshake message cut across records";
    return false;
  }
  return true;
}

OpenResult RecordOpener::open(std::span<const uint8_t> in, size_t& used,
                              std::span<const iovec> into) {
  OpenResult r;
  used = 0;
  size_t room = total_of(into);
  auto give_aside = [&] {
    size_t k = std::min(room - r.n, plain_len_ - plain_off_);
    for_each_span(into, r.n, k, [&](uint8_t* p, size_t n) {
      std::memcpy(p, plain_.get() + plain_off_, n);
      plain_off_ += n;
    });
    r.n += k;
  };
  if (has_plain()) give_aside();
  while (r.n < room && !has_plain()) {
    std::span<const uint8_t> rest = in.subspan(used);
    if (rest.size() >= kTlsHeader) {
      size_t len = (size_t{rest[3]} << 8) | rest[4];
      if (rest[0] != kApplicationData || len < 1 + kTlsTag || len > kMaxCiphertext) {
        r.error = "malformed record (type " + std::to_string(rest[0]) + ", length " +
                  std::to_string(len) + ")";
        return r;
      }
    }
    size_t size = record_size(rest);
    if (size == 0) break;
    const uint8_t* header = rest.data();
    std::span<const uint8_t> body = rest.subspan(kTlsHeader, size - kTlsHeader);
    size_t inner = body.size() - kTlsTag;
    std::array<uint8_t, 12> nonce = key_.next_nonce();
    used += size;
    // Straight into the caller's buffers when the record fits and is application data
    // without padding (the last byte its type); else aside, from where it is given out.
    if (inner <= room - r.n) {
      std::vector<iovec> dst;
      size_t skip = r.n;
      for (const iovec& b : into) {
        if (skip >= b.iov_len) {
          skip -= b.iov_len;
          continue;
        }
        dst.push_back(iovec{static_cast<uint8_t*>(b.iov_base) + skip, b.iov_len - skip});
        skip = 0;
      }
      if (!decrypt(header, body, nonce, dst, r)) return r;
      uint8_t type = 0;
      for_each_span(into, r.n + inner - 1, 1, [&](uint8_t* p, size_t) { type = *p; });
      if (type == kApplicationData) {
        r.n += inner - 1;
        continue;
      }
    }
    iovec aside{plain_.get(), inner};
    if (!decrypt(header, body, nonce, {&aside, 1}, r)) return r;
    size_t end = inner;
    while (end > 0 && plain_[end - 1] == 0) --end;  // padding
    if (end == 0) {
      r.error = "record without a content type";
      return r;
    }
    uint8_t type = plain_[end - 1];
    if (type != kApplicationData) {
      plain_len_ = plain_off_ = 0;
      if (!handle_control(type, {plain_.get(), end - 1}, r)) return r;
      continue;
    }
    plain_off_ = 0;
    plain_len_ = end - 1;
    give_aside();
  }
  return r;
}

}  // namespace pfsnet
