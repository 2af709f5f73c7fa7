#include "decode_json.h"
#include "digest.h"
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

struct RuleDeleter {
  void operator()(nftnl_rule* r) const { nftnl_rule_free(r); }
};

// The expressions of a rule message (`list`: its NFTA_RULE_EXPRESSIONS) as a JSON array: each
// typed through the expression table where libnftnl parses it and the IR models it, else raw.
// The caller has checked the message (CheckRule); `parses`: libnftnl can parse it.
void AppendExprsJson(const nlmsghdr* nlh, const nlattr* list, bool parses, std::string* out) {
  std::vector<RawExpr> raw;
  if (list != nullptr) raw = WalkExpressions(list);
  std::unique_ptr<nftnl_rule, RuleDeleter> rule(nftnl_rule_alloc());
  bool parsed = parses && rule && nftnl_rule_nlmsg_parse(nlh, rule.get()) >= 0;
  std::vector<nftnl_expr*> typed;
  if (parsed) {
    nftnl_expr_iter* it = nftnl_expr_iter_create(rule.get());
    for (nftnl_expr* e = nftnl_expr_iter_next(it); e != nullptr; e = nftnl_expr_iter_next(it)) typed.push_back(e);
    nftnl_expr_iter_destroy(it);
    if (typed.size() != raw.size()) typed.clear(), parsed = false;
  }
  out->push_back('[');
  for (size_t i = 0; i < raw.size(); i++) {
    if (i > 0) out->push_back(',');
    const ExprKind* kind = FindExprKind(raw[i].name.c_str());
    if (!parsed || kind == nullptr || !ModelsRawExpr(*kind, raw[i])) {
      UnknownExpr(out, raw[i]);
      continue;
    }
    TypedExpr(out, *kind, typed[i]);
    // a dynset's own statements, from the raw attributes (libnftnl keeps no order for us to trust)
    std::vector<const nlattr*> nested = DynsetExprNests(raw[i]);
    if (!nested.empty()) {
      out->pop_back();
      out->append(",\"exprs\":");
      // (checked with the rule they are part of: never refused here)
      std::string why;
      if (!AppendNestedExprsJson(nested, out, &why)) out->append("[]");
      out->push_back('}');
    }
  }
  out->push_back(']');
}

}  // namespace

const nlmsghdr* NestedExprsMessage(const std::vector<const nlattr*>& nests, std::vector<char>* buf, const nlattr** list) {
  buf->assign(MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)) + 64, 0);
  size_t need = buf->size();
  for (const nlattr* n : nests) need += MNL_ALIGN(n->nla_len) + 8;
  buf->resize(need);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf->data());
  nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE;
  mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg));
  mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, "");
  mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, "");
  nlattr* nest = mnl_attr_nest_start(nlh, NFTA_RULE_EXPRESSIONS);
  for (const nlattr* n : nests) mnl_attr_put(nlh, NFTA_LIST_ELEM | NLA_F_NESTED, mnl_attr_get_payload_len(n), mnl_attr_get_payload(n));
  mnl_attr_nest_end(nlh, nest);
  if (list != nullptr) *list = nest;
  return nlh;
}

bool AppendNestedExprsJson(const std::vector<const nlattr*>& nests, std::string* out, std::string* why) {
  bool parses = false;
  if (!ExprNestsAbiOk(nests, "expression", why, &parses)) return false;
  // As the expressions of a rule message of their own, so that they decode as a rule's do.
  std::vector<char> buf;
  const nlattr* list = nullptr;
  const nlmsghdr* nlh = NestedExprsMessage(nests, &buf, &list);
  // no dynset inside these: the kernel takes stateful expressions only
  AppendExprsJson(nlh, list, parses, out);
  return true;
}


void AppendJsonString(std::string* out, const char* s) { PutStr(out, s); }

bool AppendRuleJson(const nlmsghdr* nlh, std::string* out, std::string* error, bool withDigest) {
  if (!HasNfgenmsg(nlh)) {
    *error = "cannot parse rule message: truncated";
    return false;
  }
  RuleCheck check;
  CheckRule(nlh, &check);
  if (!check.abiOk) {
    *error = "cannot parse rule message: " + check.why;
    return false;
  }
  const nlattr* const* at = check.at;
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

  out->append(",\"exprs\":");
  AppendExprsJson(nlh, at[NFTA_RULE_EXPRESSIONS], check.parses, out);
  out->push_back('}');
  return true;
}

bool AppendSetElemsJson(const nlmsghdr* nlh, std::string* out, bool* first, std::string* error) {
  SetElemsCheck check;
  CheckSetElems(nlh, &check);
  if (!check.parses || !check.abiOk) {
    *error = std::string("cannot parse set element message: ") + (check.parses ? check.why : "malformed attribute");
    return false;
  }
  std::vector<SetElem> elems;
  if (!ParseSetElems(nlh, &elems)) {
    *error = "cannot parse set element message";
    return false;
  }
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
    if (!x.exprs.empty()) PutKey(out, "exprs", &f), AppendNestedExprsJson(x.exprs, out, &check.why);  // (checked above)
    out->push_back('}');
  }
  return true;
}

}  // namespace nfk
