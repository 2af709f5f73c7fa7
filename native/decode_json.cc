#include "decode_json.h"
#include "element.h"

#include <arpa/inet.h>
#include <endian.h>
#include <libmnl/libmnl.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "attr.h"
#include "common.h"
#include "expr_table.h"

namespace nfk {

namespace {

void PutStr(std::string* out, const char* s) {
  static const char hex[] = "0123456789abcdef";
  out->push_back('"');
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p != 0; p++) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      out->append("\\u00");
      out->push_back(hex[c >> 4]);
      out->push_back(hex[c & 0xf]);
    } else {
      out->push_back(static_cast<char>(c));  // UTF-8 passes through, as with NewFromUtf8
    }
  }
  out->push_back('"');
}

void PutHex(std::string* out, const void* data, size_t len) {
  out->push_back('"');
  out->append(ToHex(data, len));
  out->push_back('"');
}

// A string that needs no escaping (hex).
void PutQuoted(std::string* out, const std::string& s) {
  out->push_back('"');
  out->append(s);
  out->push_back('"');
}

template <typename T>
void PutInt(std::string* out, T v) {
  // A u64 above 2^53 is rounded by JSON.parse exactly as static_cast<double> rounds it.
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void PutEnum(std::string* out, const EnumMap& map, int64_t v) {
  const char* name = EnumToName(map, v);
  if (name != nullptr) PutStr(out, name);
  else PutInt(out, v);
}

void PutKey(std::string* out, const char* key, bool* first) {
  if (!*first) out->push_back(',');
  *first = false;
  out->push_back('"');
  out->append(key);  // field names are plain identifiers
  out->append("\":");
}

void UnknownExpr(std::string* out, const RawExpr& raw) {
  out->append("{\"kind\":\"unknown\",\"name\":");
  PutStr(out, raw.name.c_str());
  out->append(",\"data\":");
  if (raw.data != nullptr) PutHex(out, mnl_attr_get_payload(raw.data), mnl_attr_get_payload_len(raw.data));
  else out->append("\"\"");
  out->push_back('}');
}

void TypedExpr(std::string* out, const ExprKind& kind, const nftnl_expr* e) {
  out->append("{\"kind\":");
  PutStr(out, kind.name);
  bool first = false;
  for (size_t i = 0; i < kind.count; i++) {
    const Field& f = kind.fields[i];
    if (!nftnl_expr_is_set(e, f.attr)) continue;
    PutKey(out, f.js, &first);
    switch (f.type) {
      case FieldType::U8: PutInt(out, nftnl_expr_get_u8(e, f.attr)); break;
      case FieldType::U16: PutInt(out, nftnl_expr_get_u16(e, f.attr)); break;
      case FieldType::U32: PutInt(out, nftnl_expr_get_u32(e, f.attr)); break;
      case FieldType::I32: PutInt(out, static_cast<int32_t>(nftnl_expr_get_u32(e, f.attr))); break;
      case FieldType::U64: PutInt(out, nftnl_expr_get_u64(e, f.attr)); break;
      case FieldType::Str: PutStr(out, nftnl_expr_get_str(e, f.attr)); break;
      case FieldType::Data:
      case FieldType::Blob: {
        uint32_t len = 0;
        const void* d = nftnl_expr_get(e, f.attr, &len);
        PutHex(out, d, len);
        break;
      }
      case FieldType::Enum:
        // Enums are u32 on the wire; verdict codes are negative numbers.
        PutEnum(out, *f.map, static_cast<int32_t>(nftnl_expr_get_u32(e, f.attr)));
        break;
    }
  }
  out->push_back('}');
}

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

void PutSegment(std::string* buf, const void* data, size_t len) {
  uint32_t n = static_cast<uint32_t>(len);
  buf->append(reinterpret_cast<const char*>(&n), sizeof(n));
  buf->append(static_cast<const char*>(data), len);
}

// A lookup (or dynset) of an anonymous set: the rule's key depends on the set's elements.
bool LooksUpAnonymousSet(const RawExpr& e) {
  if (e.data == nullptr || (e.name != "lookup" && e.name != "dynset")) return false;
  const nlattr* attr;
  NFK_NESTED_FOR_EACH(attr, e.data) {
    uint16_t type = mnl_attr_get_type(attr);
    bool isSetName = (e.name == "lookup" && type == NFTA_LOOKUP_SET) || (e.name == "dynset" && type == NFTA_DYNSET_SET_NAME);
    if (!isSetName) continue;
    const char* name = static_cast<const char*>(mnl_attr_get_payload(attr));
    size_t len = strnlen(name, mnl_attr_get_payload_len(attr));
    return len >= 2 && name[0] == '_' && name[1] == '_';
  }
  return false;
}

struct RuleDeleter {
  void operator()(nftnl_rule* r) const { nftnl_rule_free(r); }
};

}  // namespace

void AppendJsonString(std::string* out, const char* s) { PutStr(out, s); }

// More attributes than any expression has (nat has 7, payload 8): a rule with more gets no digest.
constexpr size_t kDigestAttrs = 32;

bool AppendExprDigestSegment(std::string* buf, const RawExpr& e) {
  if (LooksUpAnonymousSet(e)) return false;
  PutSegment(buf, e.name.data(), e.name.size());
  if (e.data == nullptr || e.name == "counter") {
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
  NFK_NESTED_FOR_EACH(attr, e.data) {
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
    PutSegment(buf, mnl_attr_get_payload(attrs[i]), mnl_attr_get_payload_len(attrs[i]));
  }
  return true;
}

void AppendUserdataDigestSegment(std::string* buf, const void* userdata, size_t len) {
  PutSegment(buf, len > 0 ? userdata : "", len);
}

std::string DigestOf(const std::string& buf) {
  uint64_t h[2];
  Murmur3x64_128(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), h);
  return ToHex(h, sizeof(h));
}

std::string RuleDigest(const nlattr* userdata, const nlattr* expressions) {
  std::string buf;
  if (userdata != nullptr) AppendUserdataDigestSegment(&buf, mnl_attr_get_payload(userdata), mnl_attr_get_payload_len(userdata));
  else AppendUserdataDigestSegment(&buf, nullptr, 0);
  std::vector<RawExpr> raw;
  if (expressions != nullptr) raw = WalkExpressions(expressions);
  for (const RawExpr& e : raw) {
    if (!AppendExprDigestSegment(&buf, e)) return "";
  }
  return DigestOf(buf);
}

// The same object, field for field and in the same order, as DecodeRule;
// false (and nothing appended) for a message too short to be a rule, which
// DecodeRule refuses too.
bool AppendRuleJson(const nlmsghdr* nlh, std::string* out, bool withDigest) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_RULE_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  const std::vector<const nlattr*>& at = t.at;
  out->append("{\"family\":");
  PutEnum(out, kFamilyMap, MsgFamily(nlh));
  if (const char* table = AttrStr(at[NFTA_RULE_TABLE])) {
    out->append(",\"table\":");
    PutStr(out, table);
  }
  if (const char* chain = AttrStr(at[NFTA_RULE_CHAIN])) {
    out->append(",\"chain\":");
    PutStr(out, chain);
  }
  uint64_t u64 = 0;
  if (AttrU64(at[NFTA_RULE_HANDLE], &u64)) {
    out->append(",\"handle\":");
    PutInt(out, u64);
  }
  if (AttrU64(at[NFTA_RULE_POSITION], &u64)) {
    out->append(",\"position\":");
    PutInt(out, u64);
  }
  if (at[NFTA_RULE_USERDATA]) {
    out->append(",\"userdata\":");
    PutHex(out, mnl_attr_get_payload(at[NFTA_RULE_USERDATA]), mnl_attr_get_payload_len(at[NFTA_RULE_USERDATA]));
  }

  if (withDigest) {
    std::string d = RuleDigest(at[NFTA_RULE_USERDATA], at[NFTA_RULE_EXPRESSIONS]);
    if (!d.empty()) {
      out->append(",\"digest\":\"");
      out->append(d);
      out->push_back('"');
    }
  }

  std::vector<RawExpr> raw;
  if (at[NFTA_RULE_EXPRESSIONS]) raw = WalkExpressions(at[NFTA_RULE_EXPRESSIONS]);
  std::unique_ptr<nftnl_rule, RuleDeleter> rule(nftnl_rule_alloc());
  bool parsed = rule && RuleOkForLibnftnl(nlh) && nftnl_rule_nlmsg_parse(nlh, rule.get()) >= 0;
  std::vector<nftnl_expr*> typed;
  if (parsed) {
    nftnl_expr_iter* it = nftnl_expr_iter_create(rule.get());
    for (nftnl_expr* e = nftnl_expr_iter_next(it); e != nullptr; e = nftnl_expr_iter_next(it)) typed.push_back(e);
    nftnl_expr_iter_destroy(it);
    if (typed.size() != raw.size()) typed.clear(), parsed = false;
  }
  out->append(",\"exprs\":[");
  for (size_t i = 0; i < raw.size(); i++) {
    if (i > 0) out->push_back(',');
    const ExprKind* kind = FindExprKind(raw[i].name.c_str());
    if (parsed && kind != nullptr && ModelsRawExpr(*kind, raw[i])) TypedExpr(out, *kind, typed[i]);
    else UnknownExpr(out, raw[i]);
  }
  out->append("]}");
  return true;
}

bool AppendSetElemsJson(const nlmsghdr* nlh, std::string* out, bool* first) {
  std::vector<SetElem> elems;
  if (!ParseSetElems(nlh, &elems)) return false;
  for (const SetElem& x : elems) {
    if (!*first) out->push_back(',');
    *first = false;
    bool f = true;
    out->push_back('{');
    if (!x.key.empty()) PutKey(out, "key", &f), PutQuoted(out, x.key);
    if (!x.keyEnd.empty()) PutKey(out, "keyEnd", &f), PutQuoted(out, x.keyEnd);
    PutKey(out, "flags", &f);
    PutInt(out, x.flags);
    if (!x.data.empty()) PutKey(out, "data", &f), PutQuoted(out, x.data);
    if (x.hasVerdict) PutKey(out, "verdict", &f), PutEnum(out, kVerdictMap, x.verdict);
    if (!x.chain.empty()) PutKey(out, "chain", &f), PutStr(out, x.chain.c_str());
    if (!x.objref.empty()) PutKey(out, "objref", &f), PutStr(out, x.objref.c_str());
    if (x.hasTimeout) PutKey(out, "timeout", &f), PutInt(out, x.timeout);
    if (x.hasExpiration) PutKey(out, "expiration", &f), PutInt(out, x.expiration);
    if (!x.userdata.empty()) PutKey(out, "userdata", &f), PutQuoted(out, x.userdata);
    out->push_back('}');
  }
  return true;
}

}  // namespace nfk
