#include "decode.h"
#include "decode_json.h"
#include "element.h"

#include <cerrno>
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

#include "attr.h"
#include "common.h"
#include "expr_table.h"

namespace nfk {

namespace {

void RequireNfgenmsg(Napi::Env env, const nlmsghdr* nlh, const char* what) {
  if (!HasNfgenmsg(nlh)) {
    throw MakeNetlinkError(env, std::string("cannot parse ") + what + " message: truncated", EBADMSG,
                           std::string("decode ") + what);
  }
}

Napi::Value EnumValue(Napi::Env env, const EnumMap& map, int64_t v) {
  const char* name = EnumToName(map, v);
  if (name != nullptr) return Napi::String::New(env, name);
  return Napi::Number::New(env, static_cast<double>(v));
}

void RefuseMalformed(Napi::Env env, bool ok, const char* what) {
  if (!ok) {
    throw MakeNetlinkError(env, std::string("cannot parse ") + what + " message: malformed attribute", EBADMSG,
                           std::string("decode ") + what);
  }
}

// A message libnftnl would exit() on (attr.h CheckRule and the rest): refused, never parsed.
void RefuseAbi(Napi::Env env, bool ok, const char* what, const std::string& why) {
  if (!ok) {
    throw MakeNetlinkError(env, std::string("cannot parse ") + what + " message: " + why, EBADMSG,
                           std::string("decode ") + what);
  }
}

struct ChainDeleter {
  void operator()(nftnl_chain* c) const { nftnl_chain_free(c); }
};
struct SetDeleter {
  void operator()(nftnl_set* s) const { nftnl_set_free(s); }
};

// Expression nests as IR expressions, through the one JSON decoder of expressions.
Napi::Value ExprsValue(Napi::Env env, const std::vector<const nlattr*>& nests, const char* what) {
  std::string json, why;
  RefuseAbi(env, AppendNestedExprsJson(nests, &json, &why), what, why);
  Napi::Object JSON = env.Global().Get("JSON").As<Napi::Object>();
  return JSON.Get("parse").As<Napi::Function>().Call(JSON, {Napi::String::New(env, json)});
}

}  // namespace

Napi::Value FamilyValue(Napi::Env env, uint32_t family) {
  return EnumValue(env, kFamilyMap, family);
}

Napi::Object DecodeTable(Napi::Env env, const nlmsghdr* nlh) {
  RequireNfgenmsg(env, nlh, "table");
  AttrTable t(NFTA_TABLE_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", FamilyValue(env, MsgFamily(nlh)));
  if (const char* name = AttrStr(t.at[NFTA_TABLE_NAME])) o.Set("name", name);
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  o.Set("flags", AttrU32(t.at[NFTA_TABLE_FLAGS], &u32) ? u32 : 0);
  if (AttrU32(t.at[NFTA_TABLE_USE], &u32)) o.Set("use", u32);
  if (AttrU64(t.at[NFTA_TABLE_HANDLE], &u64)) o.Set("handle", static_cast<double>(u64));
  if (AttrU32(t.at[NFTA_TABLE_OWNER], &u32)) o.Set("owner", u32);
  if (t.at[NFTA_TABLE_USERDATA]) {
    o.Set("userdata", ToHex(mnl_attr_get_payload(t.at[NFTA_TABLE_USERDATA]),
                            mnl_attr_get_payload_len(t.at[NFTA_TABLE_USERDATA])));
  }
  return o;
}

Napi::Object DecodeChain(Napi::Env env, const nlmsghdr* nlh) {
  RequireNfgenmsg(env, nlh, "chain");
  RefuseMalformed(env, ChainOkForLibnftnl(nlh), "chain");
  std::string why;
  RefuseAbi(env, ChainAbiOk(nlh, &why), "chain", why);
  std::unique_ptr<nftnl_chain, ChainDeleter> owned(nftnl_chain_alloc());
  nftnl_chain* c = owned.get();
  if (c == nullptr) throw Napi::Error::New(env, "out of memory");
  if (nftnl_chain_nlmsg_parse(nlh, c) < 0) {
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
  return o;
}

Napi::Object DecodeSet(Napi::Env env, const nlmsghdr* nlh) {
  RequireNfgenmsg(env, nlh, "set");
  // (the message's attributes once: the checks, the copy for libnftnl and the expressions below read them)
  SetCheck check;
  CheckSet(nlh, &check);
  RefuseMalformed(env, check.parses, "set");
  RefuseAbi(env, check.abiOk, "set", check.why);
  std::unique_ptr<nftnl_set, SetDeleter> owned(nftnl_set_alloc());
  nftnl_set* s = owned.get();
  if (s == nullptr) throw Napi::Error::New(env, "out of memory");
  std::vector<uint8_t> stripped;
  if (nftnl_set_nlmsg_parse(SetForLibnftnl(nlh, check, &stripped), s) < 0) {
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
  if (nftnl_set_is_set(s, NFTNL_SET_DESC_CONCAT)) {
    uint32_t n = 0;
    const uint8_t* lens = static_cast<const uint8_t*>(nftnl_set_get_data(s, NFTNL_SET_DESC_CONCAT, &n));
    Napi::Array a = Napi::Array::New(env);
    for (uint32_t i = 0; i < n && i < 16 && lens[i] != 0; i++) a.Set(i, lens[i]);
    if (a.Length() > 0) o.Set("fieldLen", a);
  }
  if (nftnl_set_is_set(s, NFTNL_SET_TIMEOUT)) {
    o.Set("timeout", static_cast<double>(nftnl_set_get_u64(s, NFTNL_SET_TIMEOUT)));
  }
  if (nftnl_set_is_set(s, NFTNL_SET_GC_INTERVAL)) o.Set("gcInterval", nftnl_set_get_u32(s, NFTNL_SET_GC_INTERVAL));
  if (nftnl_set_is_set(s, NFTNL_SET_OBJ_TYPE)) o.Set("objType", nftnl_set_get_u32(s, NFTNL_SET_OBJ_TYPE));
  if (nftnl_set_is_set(s, NFTNL_SET_USERDATA)) {
    uint32_t len = 0;
    const void* d = nftnl_set_get_data(s, NFTNL_SET_USERDATA, &len);
    o.Set("userdata", ToHex(d, len));
  }
  // NFTA_SET_EXPR(ESSIONS): the expressions each element gets
  std::vector<const nlattr*> nests = ExprNests(check.at[NFTA_SET_EXPR], check.at[NFTA_SET_EXPRESSIONS]);
  if (!nests.empty()) o.Set("exprs", ExprsValue(env, nests, "set"));
  return o;
}

void DecodeSetElems(Napi::Env env, const nlmsghdr* nlh, Napi::Array out) {
  RequireNfgenmsg(env, nlh, "set element");
  SetElemsCheck check;
  CheckSetElems(nlh, &check);
  RefuseMalformed(env, check.parses, "set element");
  RefuseAbi(env, check.abiOk, "set element", check.why);
  std::vector<SetElem> elems;
  if (!ParseSetElems(nlh, &elems)) {
    throw MakeNetlinkError(env, "cannot parse set element message", EBADMSG, "decode set elements");
  }
  uint32_t n = out.Length();
  for (const SetElem& x : elems) {
    Napi::Object o = Napi::Object::New(env);
    if (!x.key.empty()) o.Set("key", x.key);
    if (!x.keyEnd.empty()) o.Set("keyEnd", x.keyEnd);
    o.Set("flags", x.flags);
    if (!x.data.empty()) o.Set("data", x.data);
    if (x.hasVerdict) o.Set("verdict", EnumValue(env, kVerdictMap, x.verdict));
    if (!x.chain.empty()) o.Set("chain", x.chain);
    if (!x.objref.empty()) o.Set("objref", x.objref);
    if (x.hasTimeout) o.Set("timeout", static_cast<double>(x.timeout));
    if (x.hasExpiration) o.Set("expiration", static_cast<double>(x.expiration));
    if (!x.userdata.empty()) o.Set("userdata", x.userdata);
    if (!x.exprs.empty()) o.Set("exprs", ExprsValue(env, x.exprs, "set element"));
    out.Set(n++, o);
  }
}

bool DecodeGeneration(const nlmsghdr* nlh, uint32_t* id, uint32_t* pid, std::string* comm) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_GEN_MAX);
  if (mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t) < 0) return false;
  if (pid != nullptr && !AttrU32(t.at[NFTA_GEN_PROC_PID], pid)) *pid = 0;
  if (comm != nullptr) {
    const char* name = AttrStr(t.at[NFTA_GEN_PROC_NAME]);
    comm->assign(name != nullptr ? name : "");
  }
  return AttrU32(t.at[NFTA_GEN_ID], id);
}

}  // namespace nfk
