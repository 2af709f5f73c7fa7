#include "digest.h"

#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attr.h"
#include "common.h"

namespace nfk {

namespace {

// MurmurHash3 x64 128 (Austin Appleby, public domain), over one buffer.
inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Fmix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}
void Murmur3x64_128(const uint8_t* data, size_t len, uint64_t out[2]) {
  const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
  uint64_t h1 = 0x9e3779b97f4a7c15ULL, h2 = 0x6a09e667f3bcc908ULL;
  size_t nblocks = len / 16;
  for (size_t i = 0; i < nblocks; i++) {
    uint64_t k1, k2;
    std::memcpy(&k1, data + i * 16, 8);
    std::memcpy(&k2, data + i * 16 + 8, 8);
    k1 *= c1; k1 = Rotl(k1, 31); k1 *= c2; h1 ^= k1;
    h1 = Rotl(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
    k2 *= c2; k2 = Rotl(k2, 33); k2 *= c1; h2 ^= k2;
    h2 = Rotl(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
  }
  const uint8_t* tail = data + nblocks * 16;
  uint64_t k1 = 0, k2 = 0;
  switch (len & 15) {
    case 15: k2 ^= uint64_t(tail[14]) << 48; [[fallthrough]];
    case 14: k2 ^= uint64_t(tail[13]) << 40; [[fallthrough]];
    case 13: k2 ^= uint64_t(tail[12]) << 32; [[fallthrough]];
    case 12: k2 ^= uint64_t(tail[11]) << 24; [[fallthrough]];
    case 11: k2 ^= uint64_t(tail[10]) << 16; [[fallthrough]];
    case 10: k2 ^= uint64_t(tail[9]) << 8; [[fallthrough]];
    case 9: k2 ^= uint64_t(tail[8]); k2 *= c2; k2 = Rotl(k2, 33); k2 *= c1; h2 ^= k2; [[fallthrough]];
    case 8: k1 ^= uint64_t(tail[7]) << 56; [[fallthrough]];
    case 7: k1 ^= uint64_t(tail[6]) << 48; [[fallthrough]];
    case 6: k1 ^= uint64_t(tail[5]) << 40; [[fallthrough]];
    case 5: k1 ^= uint64_t(tail[4]) << 32; [[fallthrough]];
    case 4: k1 ^= uint64_t(tail[3]) << 24; [[fallthrough]];
    case 3: k1 ^= uint64_t(tail[2]) << 16; [[fallthrough]];
    case 2: k1 ^= uint64_t(tail[1]) << 8; [[fallthrough]];
    case 1: k1 ^= uint64_t(tail[0]); k1 *= c1; k1 = Rotl(k1, 31); k1 *= c2; h1 ^= k1;
  }
  h1 ^= len; h2 ^= len;
  h1 += h2; h2 += h1;
  h1 = Fmix(h1); h2 = Fmix(h2);
  h1 += h2; h2 += h1;
  out[0] = h1;
  out[1] = h2;
}

// `s` is the literal `lit` (a length test, then the bytes: most names differ in length).
template <size_t N>
inline bool Is(const std::string& s, const char (&lit)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), lit, N - 1) == 0;
}

void PutSegment(std::string* buf, const void* data, size_t len) {
  uint32_t n = static_cast<uint32_t>(len);
  buf->append(reinterpret_cast<const char*>(&n), sizeof(n));
  buf->append(static_cast<const char*>(data), len);
}

// A lookup (or dynset) of an anonymous set: the rule's key depends on the set's elements.
bool LooksUpAnonymousSet(const RawExpr& e) {
  if (e.data == nullptr || (!Is(e.name, "lookup") && !Is(e.name, "dynset"))) return false;
  const nlattr* attr;
  NFK_NESTED_FOR_EACH(attr, e.data) {
    uint16_t type = mnl_attr_get_type(attr);
    bool isSetName = (Is(e.name, "lookup") && type == NFTA_LOOKUP_SET) || (Is(e.name, "dynset") && type == NFTA_DYNSET_SET_NAME);
    if (!isSetName) continue;
    const char* name = static_cast<const char*>(mnl_attr_get_payload(attr));
    size_t len = strnlen(name, mnl_attr_get_payload_len(attr));
    return len >= 2 && name[0] == '_' && name[1] == '_';
  }
  return false;
}

// A jump to a bound chain (`jump { … }`): by the kernel's name for it ("__chain%d") in a dump, by
// NFTA_VERDICT_CHAIN_ID in what a commit would write. The rule's key depends on the chain's rules.
bool JumpsToBoundChain(const RawExpr& e) {
  if (e.data == nullptr || !Is(e.name, "immediate")) return false;
  const nlattr* attr;
  NFK_NESTED_FOR_EACH(attr, e.data) {
    if (mnl_attr_get_type(attr) != NFTA_IMMEDIATE_DATA) continue;
    const nlattr* d;
    NFK_NESTED_FOR_EACH(d, attr) {
      if (mnl_attr_get_type(d) != NFTA_DATA_VERDICT) continue;
      const nlattr* v;
      NFK_NESTED_FOR_EACH(v, d) {
        uint16_t type = mnl_attr_get_type(v);
        if (type == NFTA_VERDICT_CHAIN_ID) return true;
        if (type != NFTA_VERDICT_CHAIN) continue;
        const char* name = static_cast<const char*>(mnl_attr_get_payload(v));
        size_t len = strnlen(name, mnl_attr_get_payload_len(v));
        return len >= 2 && name[0] == '_' && name[1] == '_';
      }
    }
  }
  return false;
}

// A dynset's attribute as the kernel dumps it, for its digest (a rule key holds the same
// normal form, src/rules/compare.ts): the set's id is not dumped; a timeout and flags not sent are
// dumped as 0, and NFT_DYNSET_F_EXPR (its statements sent as a list) is not dumped. Its own
// statements (one NFTA_DYNSET_EXPR, or a NFTA_DYNSET_EXPRESSIONS list) are written apart.
bool DynsetAttrDigested(const nlattr* attr, uint32_t* flags) {
  uint16_t type = mnl_attr_get_type(attr);
  if (type == NFTA_DYNSET_SET_ID || type == NFTA_DYNSET_EXPR || type == NFTA_DYNSET_EXPRESSIONS) return false;
  if (type == NFTA_DYNSET_TIMEOUT) {
    uint64_t v = 0;
    return !AttrU64(attr, &v) || v != 0;
  }
  if (type == NFTA_DYNSET_FLAGS) {
    uint32_t v = 0;
    if (!AttrU32(attr, &v)) return true;
    *flags = v & ~static_cast<uint32_t>(NFT_DYNSET_F_EXPR);
    return *flags != 0;
  }
  return true;
}

}  // namespace

// More attributes than any expression has (nat has 7, payload 8): a rule with more gets no digest.
constexpr size_t kDigestAttrs = 32;

// A dynset's own statements, each as a rule's expression is (a counter's numbers left out).
static bool AppendDynsetExprs(std::string* buf, const RawExpr& e) {
  const nlattr* single = nullptr;
  const nlattr* list = nullptr;
  const nlattr* attr;
  NFK_NESTED_FOR_EACH(attr, e.data) {
    if (mnl_attr_get_type(attr) == NFTA_DYNSET_EXPR) single = attr;
    else if (mnl_attr_get_type(attr) == NFTA_DYNSET_EXPRESSIONS) list = attr;
  }
  std::vector<const nlattr*> nests = ExprNests(single, list);
  uint32_t count = static_cast<uint32_t>(nests.size());
  buf->append(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const nlattr* nest : nests) {
    AttrTable t(NFTA_EXPR_MAX);
    mnl_attr_parse_nested(nest, CollectAttr, &t);
    RawExpr inner;
    const char* name = AttrStr(t.at[NFTA_EXPR_NAME]);
    if (name == nullptr || std::strcmp(name, "dynset") == 0) return false;
    inner.name = name;
    inner.data = t.at[NFTA_EXPR_DATA];
    if (!AppendExprDigestSegment(buf, inner)) return false;
  }
  return true;
}

bool AppendExprDigestSegment(std::string* buf, const RawExpr& e, bool anonymousSetsUnnamed) {
  if (JumpsToBoundChain(e)) return false;
  // (a dynset adding to an anonymous set has no digest either way)
  const bool unnamed = LooksUpAnonymousSet(e);
  if (unnamed && (!anonymousSetsUnnamed || !Is(e.name, "lookup"))) return false;
  PutSegment(buf, e.name.data(), e.name.size());
  if (e.data == nullptr || Is(e.name, "counter")) {
    PutSegment(buf, "", 0);
    return true;
  }
  // The expression's attributes by type, not in the order they came: the kernel dumps some
  // expressions' attributes in another order than libnftnl writes them (bitwise, fib, ct), and
  // the order means nothing to it. So the digest of what a commit would write (ruleDigests)
  // equals the dump's for the same expressions. Nested attributes are the kernel's own order.
  const nlattr* attrs[kDigestAttrs];
  size_t n = 0;
  const nlattr* attr;
  const bool dynset = Is(e.name, "dynset");
  uint32_t dynsetFlags = 0;
  NFK_NESTED_FOR_EACH(attr, e.data) {
    if (dynset && !DynsetAttrDigested(attr, &dynsetFlags)) continue;
    if (unnamed && (mnl_attr_get_type(attr) == NFTA_LOOKUP_SET || mnl_attr_get_type(attr) == NFTA_LOOKUP_SET_ID)) continue;
    // No expression has that many; no digest rather than a partial one.
    if (n == kDigestAttrs) return false;
    size_t i = n++;
    uint16_t type = mnl_attr_get_type(attr);
    for (; i > 0 && mnl_attr_get_type(attrs[i - 1]) > type; i--) attrs[i] = attrs[i - 1];
    attrs[i] = attr;
  }
  uint32_t count = static_cast<uint32_t>(n);
  buf->append(reinterpret_cast<const char*>(&count), sizeof(count));
  for (size_t i = 0; i < n; i++) {
    uint16_t type = mnl_attr_get_type(attrs[i]);
    buf->append(reinterpret_cast<const char*>(&type), sizeof(type));
    if (dynset && type == NFTA_DYNSET_FLAGS) {
      uint32_t be = htonl(dynsetFlags);
      PutSegment(buf, &be, sizeof(be));
    } else {
      PutSegment(buf, mnl_attr_get_payload(attrs[i]), mnl_attr_get_payload_len(attrs[i]));
    }
  }
  return dynset ? AppendDynsetExprs(buf, e) : true;
}

void AppendUserdataDigestSegment(std::string* buf, const void* userdata, size_t len) {
  PutSegment(buf, len > 0 ? userdata : "", len);
}

std::string DigestOf(const std::string& buf) {
  uint64_t h[2];
  Murmur3x64_128(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), h);
  return ToHex(h, sizeof(h));
}

std::string RuleDigest(const nlattr* userdata, const nlattr* expressions, bool anonymousSetsUnnamed) {
  std::string buf;
  // (what a rule of a few expressions hashes, grown once at most)
  buf.reserve(512);
  if (userdata != nullptr) AppendUserdataDigestSegment(&buf, mnl_attr_get_payload(userdata), mnl_attr_get_payload_len(userdata));
  else AppendUserdataDigestSegment(&buf, nullptr, 0);
  std::vector<RawExpr> raw;
  if (expressions != nullptr) raw = WalkExpressions(expressions);
  for (const RawExpr& e : raw) {
    if (!AppendExprDigestSegment(&buf, e, anonymousSetsUnnamed)) return "";
  }
  return DigestOf(buf);
}

}  // namespace nfk
