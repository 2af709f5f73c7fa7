#include "decode.h"

#include <cstdio>
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "expr_table.h"

namespace nfk {

namespace {

uint32_t MsgFamily(const nlmsghdr* nlh) {
  const nfgenmsg* nfg = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh));
  return nfg->nfgen_family;
}

Napi::Value EnumValue(Napi::Env env, const EnumMap& map, int64_t v) {
  const char* name = EnumToName(map, v);
  if (name != nullptr) return Napi::String::New(env, name);
  return Napi::Number::New(env, static_cast<double>(v));
}

// Top-level attributes of one nested attribute, indexed by type.
struct AttrTable {
  std::vector<const nlattr*> at;
  explicit AttrTable(size_t max) : at(max + 1, nullptr) {}
};

int CollectAttr(const nlattr* attr, void* data) {
  AttrTable* t = static_cast<AttrTable*>(data);
  uint16_t type = mnl_attr_get_type(attr);
  if (type < t->at.size()) t->at[type] = attr;
  return MNL_CB_OK;
}

// One raw expression: its kernel name and the bytes of NFTA_EXPR_DATA.
struct RawExpr {
  std::string name;
  const nlattr* data = nullptr;
};

std::vector<RawExpr> WalkExpressions(const nlattr* list) {
  std::vector<RawExpr> out;
  for (nlattr* elem = static_cast<nlattr*>(mnl_attr_get_payload(list));
       mnl_attr_ok(elem, static_cast<int>(static_cast<const char*>(mnl_attr_get_payload(list)) +
                                          mnl_attr_get_payload_len(list) - reinterpret_cast<const char*>(elem)));
       elem = mnl_attr_next(elem)) {
    if (mnl_attr_get_type(elem) != NFTA_LIST_ELEM) continue;
    AttrTable t(NFTA_EXPR_MAX);
    mnl_attr_parse_nested(elem, CollectAttr, &t);
    RawExpr r;
    if (t.at[NFTA_EXPR_NAME] != nullptr) r.name = mnl_attr_get_str(t.at[NFTA_EXPR_NAME]);
    r.data = t.at[NFTA_EXPR_DATA];
    out.push_back(std::move(r));
  }
  return out;
}

Napi::Object UnknownExpr(Napi::Env env, const RawExpr& raw) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("kind", "unknown");
  o.Set("name", raw.name);
  o.Set("data", raw.data != nullptr
                    ? ToHex(mnl_attr_get_payload(raw.data), mnl_attr_get_payload_len(raw.data))
                    : std::string());
  return o;
}

Napi::Object TypedExpr(Napi::Env env, const ExprKind& kind, const nftnl_expr* e) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("kind", kind.name);
  for (size_t i = 0; i < kind.count; i++) {
    const Field& f = kind.fields[i];
    if (!nftnl_expr_is_set(e, f.attr)) continue;
    switch (f.type) {
      case FieldType::U8:
        o.Set(f.js, nftnl_expr_get_u8(e, f.attr));
        break;
      case FieldType::U16:
        o.Set(f.js, nftnl_expr_get_u16(e, f.attr));
        break;
      case FieldType::U32:
        o.Set(f.js, nftnl_expr_get_u32(e, f.attr));
        break;
      case FieldType::I32:
        o.Set(f.js, static_cast<int32_t>(nftnl_expr_get_u32(e, f.attr)));
        break;
      case FieldType::U64:
        o.Set(f.js, static_cast<double>(nftnl_expr_get_u64(e, f.attr)));
        break;
      case FieldType::Str:
        o.Set(f.js, nftnl_expr_get_str(e, f.attr));
        break;
      case FieldType::Data:
      case FieldType::Blob: {
        uint32_t len = 0;
        const void* d = nftnl_expr_get(e, f.attr, &len);
        o.Set(f.js, ToHex(d, len));
        break;
      }
      case FieldType::Enum: {
        // Enums are u32 on the wire; verdict codes are negative numbers.
        int32_t v = static_cast<int32_t>(nftnl_expr_get_u32(e, f.attr));
        o.Set(f.js, EnumValue(env, *f.map, v));
        break;
      }
    }
  }
  return o;
}

struct RuleDeleter {
  void operator()(nftnl_rule* r) const { nftnl_rule_free(r); }
};

}  // namespace

Napi::Value FamilyValue(Napi::Env env, uint32_t family) {
  return EnumValue(env, kFamilyMap, family);
}

Napi::Object DecodeTable(Napi::Env env, const nlmsghdr* nlh) {
  AttrTable t(NFTA_TABLE_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", FamilyValue(env, MsgFamily(nlh)));
  if (t.at[NFTA_TABLE_NAME]) o.Set("name", mnl_attr_get_str(t.at[NFTA_TABLE_NAME]));
  o.Set("flags", t.at[NFTA_TABLE_FLAGS] ? ntohl(mnl_attr_get_u32(t.at[NFTA_TABLE_FLAGS])) : 0);
  if (t.at[NFTA_TABLE_USE]) o.Set("use", ntohl(mnl_attr_get_u32(t.at[NFTA_TABLE_USE])));
  if (t.at[NFTA_TABLE_HANDLE]) {
    o.Set("handle", static_cast<double>(be64toh(mnl_attr_get_u64(t.at[NFTA_TABLE_HANDLE]))));
  }
  if (t.at[NFTA_TABLE_OWNER]) o.Set("owner", ntohl(mnl_attr_get_u32(t.at[NFTA_TABLE_OWNER])));
  if (t.at[NFTA_TABLE_USERDATA]) {
    o.Set("userdata", ToHex(mnl_attr_get_payload(t.at[NFTA_TABLE_USERDATA]),
                            mnl_attr_get_payload_len(t.at[NFTA_TABLE_USERDATA])));
  }
  return o;
}

Napi::Object DecodeChain(Napi::Env env, const nlmsghdr* nlh) {
  nftnl_chain* c = nftnl_chain_alloc();
  if (c == nullptr) throw Napi::Error::New(env, "out of memory");
  if (nftnl_chain_nlmsg_parse(nlh, c) < 0) {
    nftnl_chain_free(c);
    throw MakeNetlinkError(env, "cannot parse chain message", errno, "decode chain");
  }
  Napi::Object o = Napi::Object::New(env);
  uint32_t family = nftnl_chain_get_u32(c, NFTNL_CHAIN_FAMILY);
  o.Set("family", FamilyValue(env, family));
  o.Set("table", nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE));
  o.Set("name", nftnl_chain_get_str(c, NFTNL_CHAIN_NAME));
  o.Set("handle", static_cast<double>(nftnl_chain_get_u64(c, NFTNL_CHAIN_HANDLE)));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_USE)) o.Set("use", nftnl_chain_get_u32(c, NFTNL_CHAIN_USE));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_TYPE)) o.Set("type", nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_HOOKNUM)) {
    const EnumMap& hooks = family == NFPROTO_NETDEV ? kNetdevHookMap : kInetHookMap;
    o.Set("hook", EnumValue(env, hooks, nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM)));
  }
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_PRIO)) o.Set("priority", nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_POLICY)) {
    o.Set("policy", EnumValue(env, kPolicyMap, nftnl_chain_get_u32(c, NFTNL_CHAIN_POLICY)));
  }
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_DEV)) o.Set("device", nftnl_chain_get_str(c, NFTNL_CHAIN_DEV));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_FLAGS)) o.Set("flags", nftnl_chain_get_u32(c, NFTNL_CHAIN_FLAGS));
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_USERDATA)) {
    uint32_t len = 0;
    const void* d = nftnl_chain_get_data(c, NFTNL_CHAIN_USERDATA, &len);
    o.Set("userdata", ToHex(d, len));
  }
  nftnl_chain_free(c);
  return o;
}

// Top-level attributes are read straight off the message so that a rule
// whose expressions libnftnl cannot parse (a kind newer than libnftnl) still
// decodes, with every expression kept raw.
Napi::Object DecodeRule(Napi::Env env, const nlmsghdr* nlh) {
  AttrTable t(NFTA_RULE_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", FamilyValue(env, MsgFamily(nlh)));
  if (t.at[NFTA_RULE_TABLE]) o.Set("table", mnl_attr_get_str(t.at[NFTA_RULE_TABLE]));
  if (t.at[NFTA_RULE_CHAIN]) o.Set("chain", mnl_attr_get_str(t.at[NFTA_RULE_CHAIN]));
  if (t.at[NFTA_RULE_HANDLE]) {
    o.Set("handle", static_cast<double>(be64toh(mnl_attr_get_u64(t.at[NFTA_RULE_HANDLE]))));
  }
  if (t.at[NFTA_RULE_POSITION]) {
    o.Set("position", static_cast<double>(be64toh(mnl_attr_get_u64(t.at[NFTA_RULE_POSITION]))));
  }
  if (t.at[NFTA_RULE_USERDATA]) {
    o.Set("userdata", ToHex(mnl_attr_get_payload(t.at[NFTA_RULE_USERDATA]),
                            mnl_attr_get_payload_len(t.at[NFTA_RULE_USERDATA])));
  }

  std::vector<RawExpr> raw;
  if (t.at[NFTA_RULE_EXPRESSIONS]) raw = WalkExpressions(t.at[NFTA_RULE_EXPRESSIONS]);

  std::unique_ptr<nftnl_rule, RuleDeleter> rule(nftnl_rule_alloc());
  bool parsed = rule && nftnl_rule_nlmsg_parse(nlh, rule.get()) >= 0;
  std::vector<nftnl_expr*> typed;
  if (parsed) {
    nftnl_expr_iter* it = nftnl_expr_iter_create(rule.get());
    for (nftnl_expr* e = nftnl_expr_iter_next(it); e != nullptr; e = nftnl_expr_iter_next(it)) {
      typed.push_back(e);
    }
    nftnl_expr_iter_destroy(it);
    if (typed.size() != raw.size()) typed.clear(), parsed = false;
  }

  Napi::Array exprs = Napi::Array::New(env, raw.size());
  for (size_t i = 0; i < raw.size(); i++) {
    const ExprKind* kind = FindExprKind(raw[i].name.c_str());
    if (parsed && kind != nullptr) {
      exprs.Set(i, TypedExpr(env, *kind, typed[i]));
    } else {
      exprs.Set(i, UnknownExpr(env, raw[i]));
    }
  }
  o.Set("exprs", exprs);
  return o;
}

Napi::Object DecodeSet(Napi::Env env, const nlmsghdr* nlh) {
  nftnl_set* s = nftnl_set_alloc();
  if (s == nullptr) throw Napi::Error::New(env, "out of memory");
  if (nftnl_set_nlmsg_parse(nlh, s) < 0) {
    nftnl_set_free(s);
    throw MakeNetlinkError(env, "cannot parse set message", errno, "decode set");
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", FamilyValue(env, nftnl_set_get_u32(s, NFTNL_SET_FAMILY)));
  o.Set("table", nftnl_set_get_str(s, NFTNL_SET_TABLE));
  o.Set("name", nftnl_set_get_str(s, NFTNL_SET_NAME));
  if (nftnl_set_is_set(s, NFTNL_SET_HANDLE)) {
    o.Set("handle", static_cast<double>(nftnl_set_get_u64(s, NFTNL_SET_HANDLE)));
  }
  o.Set("flags", nftnl_set_is_set(s, NFTNL_SET_FLAGS) ? nftnl_set_get_u32(s, NFTNL_SET_FLAGS) : 0);
  o.Set("keyType", nftnl_set_get_u32(s, NFTNL_SET_KEY_TYPE));
  o.Set("keyLen", nftnl_set_get_u32(s, NFTNL_SET_KEY_LEN));
  if (nftnl_set_is_set(s, NFTNL_SET_DATA_TYPE)) o.Set("dataType", nftnl_set_get_u32(s, NFTNL_SET_DATA_TYPE));
  if (nftnl_set_is_set(s, NFTNL_SET_DATA_LEN)) o.Set("dataLen", nftnl_set_get_u32(s, NFTNL_SET_DATA_LEN));
  if (nftnl_set_is_set(s, NFTNL_SET_POLICY)) o.Set("policy", nftnl_set_get_u32(s, NFTNL_SET_POLICY));
  if (nftnl_set_is_set(s, NFTNL_SET_DESC_SIZE)) o.Set("size", nftnl_set_get_u32(s, NFTNL_SET_DESC_SIZE));
  if (nftnl_set_is_set(s, NFTNL_SET_TIMEOUT)) {
    o.Set("timeout", static_cast<double>(nftnl_set_get_u64(s, NFTNL_SET_TIMEOUT)));
  }
  if (nftnl_set_is_set(s, NFTNL_SET_USERDATA)) {
    uint32_t len = 0;
    const void* d = nftnl_set_get_data(s, NFTNL_SET_USERDATA, &len);
    o.Set("userdata", ToHex(d, len));
  }
  nftnl_set_free(s);
  return o;
}

void DecodeSetElems(Napi::Env env, const nlmsghdr* nlh, Napi::Array out) {
  nftnl_set* s = nftnl_set_alloc();
  if (s == nullptr) throw Napi::Error::New(env, "out of memory");
  if (nftnl_set_elems_nlmsg_parse(nlh, s) < 0) {
    nftnl_set_free(s);
    throw MakeNetlinkError(env, "cannot parse set element message", errno, "decode set elements");
  }
  nftnl_set_elems_iter* it = nftnl_set_elems_iter_create(s);
  uint32_t n = out.Length();
  for (nftnl_set_elem* e = nftnl_set_elems_iter_next(it); e != nullptr;
       e = nftnl_set_elems_iter_next(it)) {
    Napi::Object o = Napi::Object::New(env);
    uint32_t len = 0;
    const void* d;
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_KEY)) {
      d = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &len);
      o.Set("key", ToHex(d, len));
    }
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_KEY_END)) {
      d = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY_END, &len);
      o.Set("keyEnd", ToHex(d, len));
    }
    o.Set("flags", nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_FLAGS)
                       ? nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_FLAGS) : 0);
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_DATA)) {
      d = nftnl_set_elem_get(e, NFTNL_SET_ELEM_DATA, &len);
      o.Set("data", ToHex(d, len));
    }
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_VERDICT)) {
      int32_t v = static_cast<int32_t>(nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_VERDICT));
      o.Set("verdict", EnumValue(env, kVerdictMap, v));
    }
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN)) {
      o.Set("chain", nftnl_set_elem_get_str(e, NFTNL_SET_ELEM_CHAIN));
    }
    if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_USERDATA)) {
      d = nftnl_set_elem_get(e, NFTNL_SET_ELEM_USERDATA, &len);
      o.Set("userdata", ToHex(d, len));
    }
    out.Set(n++, o);
  }
  nftnl_set_elems_iter_destroy(it);
  nftnl_set_free(s);
}

bool DecodeGeneration(const nlmsghdr* nlh, uint32_t* id) {
  AttrTable t(NFTA_GEN_MAX);
  if (mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t) < 0) return false;
  if (t.at[NFTA_GEN_ID] == nullptr) return false;
  *id = ntohl(mnl_attr_get_u32(t.at[NFTA_GEN_ID]));
  return true;
}

}  // namespace nfk
