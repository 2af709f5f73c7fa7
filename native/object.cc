#include "object.h"

#include <cerrno>
#include <libmnl/libmnl.h>
#include <libnftnl/object.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <string>

#include "attr.h"
#include "common.h"
#include "decode.h"
#include "expr_table.h"

namespace nfk {

namespace {

// One field of a stateful object's data: the IR name (NftObj.data in src/netlink/objects.ts)
// and the libnftnl attribute (NFTNL_OBJ_*, 1:1 with the kernel's NFTA_<TYPE>_*).
struct ObjField {
  const char* js;
  uint16_t attr;
  FieldType type;  // U8, U16, U32, U64 or Str
};

struct ObjType {
  const char* name;  // the IR's name of the NFT_OBJECT_* type
  uint32_t type;
  ObjField fields[5];
  size_t count;
};

// A ct timeout's policy (NFTA_CT_TIMEOUT_DATA) is an array of u32 timeouts in seconds, one per
// state of its protocol, carried in the IR as data.policy (a number array). libnftnl 1.2.4 holds
// NFTNL_CTTIMEOUT_ARRAY_MAX of them and puts on the wire as many as it knows states for the
// protocol: TCP's and UDP's, none for the others.
constexpr const char* kPolicy = "policy";

uint32_t PolicyStates(uint8_t l4proto) {
  if (l4proto == IPPROTO_TCP) return NFTNL_CTTIMEOUT_TCP_MAX;
  if (l4proto == IPPROTO_UDP) return NFTNL_CTTIMEOUT_UDP_MAX;
  return 0;
}

// The object types the IR models. Encode and decode both read this one table.
const ObjType kObjTypes[] = {
    {"counter", NFT_OBJECT_COUNTER,
     {{"packets", NFTNL_OBJ_CTR_PKTS, FieldType::U64}, {"bytes", NFTNL_OBJ_CTR_BYTES, FieldType::U64}}, 2},
    {"quota", NFT_OBJECT_QUOTA,
     {{"bytes", NFTNL_OBJ_QUOTA_BYTES, FieldType::U64}, {"consumed", NFTNL_OBJ_QUOTA_CONSUMED, FieldType::U64},
      {"flags", NFTNL_OBJ_QUOTA_FLAGS, FieldType::U32}}, 3},
    {"ct helper", NFT_OBJECT_CT_HELPER,
     {{"name", NFTNL_OBJ_CT_HELPER_NAME, FieldType::Str}, {"l3proto", NFTNL_OBJ_CT_HELPER_L3PROTO, FieldType::U16},
      {"l4proto", NFTNL_OBJ_CT_HELPER_L4PROTO, FieldType::U8}}, 3},
    {"limit", NFT_OBJECT_LIMIT,
     {{"rate", NFTNL_OBJ_LIMIT_RATE, FieldType::U64}, {"unit", NFTNL_OBJ_LIMIT_UNIT, FieldType::U64},
      {"burst", NFTNL_OBJ_LIMIT_BURST, FieldType::U32}, {"type", NFTNL_OBJ_LIMIT_TYPE, FieldType::U32},
      {"flags", NFTNL_OBJ_LIMIT_FLAGS, FieldType::U32}}, 5},
    {"secmark", NFT_OBJECT_SECMARK, {{"ctx", NFTNL_OBJ_SECMARK_CTX, FieldType::Str}}, 1},
    {"ct expectation", NFT_OBJECT_CT_EXPECT,
     {{"l3proto", NFTNL_OBJ_CT_EXPECT_L3PROTO, FieldType::U16}, {"l4proto", NFTNL_OBJ_CT_EXPECT_L4PROTO, FieldType::U8},
      {"dport", NFTNL_OBJ_CT_EXPECT_DPORT, FieldType::U16}, {"timeout", NFTNL_OBJ_CT_EXPECT_TIMEOUT, FieldType::U32},
      {"size", NFTNL_OBJ_CT_EXPECT_SIZE, FieldType::U8}}, 5},
    {"synproxy", NFT_OBJECT_SYNPROXY,
     {{"mss", NFTNL_OBJ_SYNPROXY_MSS, FieldType::U16}, {"wscale", NFTNL_OBJ_SYNPROXY_WSCALE, FieldType::U8},
      {"flags", NFTNL_OBJ_SYNPROXY_FLAGS, FieldType::U32}}, 3},
    // (and its policy: kPolicy)
    {"ct timeout", NFT_OBJECT_CT_TIMEOUT,
     {{"l3proto", NFTNL_OBJ_CT_TIMEOUT_L3PROTO, FieldType::U16}, {"l4proto", NFTNL_OBJ_CT_TIMEOUT_L4PROTO, FieldType::U8}},
     2},
};

const ObjType* TypeByName(const std::string& name) {
  for (const ObjType& t : kObjTypes) if (name == t.name) return &t;
  return nullptr;
}

const ObjType* TypeByNumber(uint32_t type) {
  for (const ObjType& t : kObjTypes) if (t.type == type) return &t;
  return nullptr;
}

struct ObjDeleter {
  void operator()(nftnl_obj* o) const { nftnl_obj_free(o); }
};

// NFT_OBJECT_CT_HELPER_NAME_LEN (the kernel's limit on a helper name, NUL included).
constexpr size_t kHelperNameLen = 16;
// The kernel's limit on a secmark context (NFT_SECMARK_CTX_MAXLEN).
constexpr size_t kSecmarkCtxLen = 256;

void SetField(nftnl_obj* o, const ObjField& f, const Napi::Value& v) {
  switch (f.type) {
    case FieldType::U8: {
      uint32_t x = U32Of(v, f.js);
      if (x > 0xff) throw Napi::RangeError::New(v.Env(), std::string("'") + f.js + "' must fit in 8 bits");
      nftnl_obj_set_u8(o, f.attr, static_cast<uint8_t>(x));
      break;
    }
    case FieldType::U16: {
      uint32_t x = U32Of(v, f.js);
      if (x > 0xffff) throw Napi::RangeError::New(v.Env(), std::string("'") + f.js + "' must fit in 16 bits");
      nftnl_obj_set_u16(o, f.attr, static_cast<uint16_t>(x));
      break;
    }
    case FieldType::U32: nftnl_obj_set_u32(o, f.attr, U32Of(v, f.js)); break;
    case FieldType::U64: {
      int64_t x = I64Of(v, f.js);
      if (x < 0) throw Napi::RangeError::New(v.Env(), std::string("'") + f.js + "' must not be negative");
      nftnl_obj_set_u64(o, f.attr, static_cast<uint64_t>(x));
      break;
    }
    case FieldType::Str: {
      std::string s = StringOf(v, f.js);
      size_t max = f.attr == NFTNL_OBJ_CT_HELPER_NAME ? kHelperNameLen - 1 : kSecmarkCtxLen - 1;
      if (s.size() > max || s.find('\0') != std::string::npos) {
        throw Napi::RangeError::New(v.Env(), std::string("'") + f.js + "' must be at most " + std::to_string(max) +
                                                 " bytes without NUL");
      }
      nftnl_obj_set_str(o, f.attr, s.c_str());
      break;
    }
    default: break;
  }
}

void SetPolicy(nftnl_obj* o, const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!Present(v)) return;
  if (!v.IsArray()) throw Napi::TypeError::New(env, "'policy' must be an array of u32 timeouts");
  Napi::Array a = v.As<Napi::Array>();
  if (a.Length() > NFTNL_CTTIMEOUT_ARRAY_MAX) {
    throw Napi::RangeError::New(env, "'policy' holds at most " + std::to_string(NFTNL_CTTIMEOUT_ARRAY_MAX) + " timeouts");
  }
  uint32_t timeouts[NFTNL_CTTIMEOUT_ARRAY_MAX] = {};
  for (uint32_t i = 0; i < a.Length(); i++) timeouts[i] = U32Of(a.Get(i), kPolicy);
  nftnl_obj_set_data(o, NFTNL_OBJ_CT_TIMEOUT_ARRAY, timeouts, sizeof(timeouts));
}

}  // namespace

void EncodeObject(std::vector<uint8_t>* out, char* buf, const std::string& verb, const Napi::Object& op,
                  uint16_t family, uint32_t seq) {
  Napi::Env env = op.Env();
  uint16_t type, flags = NLM_F_ACK;
  if (verb == "add") type = NFT_MSG_NEWOBJ, flags |= NLM_F_CREATE;
  else if (verb == "create") type = NFT_MSG_NEWOBJ, flags |= NLM_F_CREATE | NLM_F_EXCL;
  else if (verb == "delete") type = NFT_MSG_DELOBJ;
  else throw Napi::TypeError::New(env, "objects take add, create or delete, not '" + verb + "'");
  const ObjType* t = TypeByName(StringOf(op.Get("type"), "type"));
  if (t == nullptr) throw Napi::TypeError::New(env, "unknown object type '" + StringOf(op.Get("type"), "type") + "'");
  std::unique_ptr<nftnl_obj, ObjDeleter> owned(nftnl_obj_alloc());
  nftnl_obj* o = owned.get();
  if (o == nullptr) throw Napi::Error::New(env, "out of memory");
  nftnl_obj_set_u32(o, NFTNL_OBJ_FAMILY, family);
  nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, StringOf(op.Get("table"), "table").c_str());
  nftnl_obj_set_str(o, NFTNL_OBJ_NAME, StringOf(op.Get("name"), "name").c_str());
  nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, t->type);
  if (Present(op.Get("handle"))) nftnl_obj_set_u64(o, NFTNL_OBJ_HANDLE, I64Of(op.Get("handle"), "handle"));
  if (type == NFT_MSG_NEWOBJ) {
    Napi::Value ud = op.Get("userdata");
    if (Present(ud)) {
      std::vector<uint8_t> d = FromHex(env, StringOf(ud, "userdata"), "userdata");
      if (d.size() > 256) throw Napi::RangeError::New(env, "'userdata' must be at most 256 bytes");
      nftnl_obj_set_data(o, NFTNL_OBJ_USERDATA, d.data(), d.size());
    }
    Napi::Value data = op.Get("data");
    if (!data.IsObject()) throw Napi::TypeError::New(env, "'data' must be an object");
    Napi::Object d = data.As<Napi::Object>();
    for (size_t i = 0; i < t->count; i++) {
      Napi::Value v = d.Get(t->fields[i].js);
      if (Present(v)) SetField(o, t->fields[i], v);
    }
    if (t->type == NFT_OBJECT_CT_TIMEOUT) SetPolicy(o, d.Get(kPolicy));
  }
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq);
  nftnl_obj_nlmsg_build_payload(nlh, o);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(buf);
  out->insert(out->end(), p, p + MNL_ALIGN(nlh->nlmsg_len));
}

Napi::Object DecodeObject(Napi::Env env, const nlmsghdr* nlh) {
  if (!HasNfgenmsg(nlh)) {
    throw MakeNetlinkError(env, "cannot parse object message: truncated", EBADMSG, "decode object");
  }
  if (!ObjOkForLibnftnl(nlh)) {
    throw MakeNetlinkError(env, "cannot parse object message: malformed attribute", EBADMSG, "decode object");
  }
  // A message libnftnl would exit() on is refused, never parsed (attr.h).
  std::string why;
  if (!ObjAbiOk(nlh, &why)) throw MakeNetlinkError(env, "cannot parse object message: " + why, EBADMSG, "decode object");
  std::unique_ptr<nftnl_obj, ObjDeleter> owned(nftnl_obj_alloc());
  nftnl_obj* o = owned.get();
  if (o == nullptr) throw Napi::Error::New(env, "out of memory");
  if (nftnl_obj_nlmsg_parse(nlh, o) < 0) {
    throw MakeNetlinkError(env, "cannot parse object message", errno, "decode object");
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("family", FamilyValue(env, nftnl_obj_get_u32(o, NFTNL_OBJ_FAMILY)));
  out.Set("table", nftnl_obj_get_str(o, NFTNL_OBJ_TABLE));
  out.Set("name", nftnl_obj_get_str(o, NFTNL_OBJ_NAME));
  if (nftnl_obj_is_set(o, NFTNL_OBJ_HANDLE)) out.Set("handle", static_cast<double>(nftnl_obj_get_u64(o, NFTNL_OBJ_HANDLE)));
  if (nftnl_obj_is_set(o, NFTNL_OBJ_USE)) out.Set("use", nftnl_obj_get_u32(o, NFTNL_OBJ_USE));
  if (nftnl_obj_is_set(o, NFTNL_OBJ_USERDATA)) {
    uint32_t len = 0;
    const void* d = nftnl_obj_get_data(o, NFTNL_OBJ_USERDATA, &len);
    out.Set("userdata", ToHex(d, len));
  }
  uint32_t typeNum = nftnl_obj_get_u32(o, NFTNL_OBJ_TYPE);
  const ObjType* t = TypeByNumber(typeNum);
  Napi::Object data = Napi::Object::New(env);
  if (t == nullptr) {
    // A type the IR does not model (tunnel, connlimit): by number, without its data.
    out.Set("type", typeNum);
  } else {
    out.Set("type", t->name);
    for (size_t i = 0; i < t->count; i++) {
      const ObjField& f = t->fields[i];
      if (!nftnl_obj_is_set(o, f.attr)) continue;
      switch (f.type) {
        case FieldType::U8: data.Set(f.js, nftnl_obj_get_u8(o, f.attr)); break;
        case FieldType::U16: data.Set(f.js, nftnl_obj_get_u16(o, f.attr)); break;
        case FieldType::U32: data.Set(f.js, nftnl_obj_get_u32(o, f.attr)); break;
        case FieldType::U64: data.Set(f.js, static_cast<double>(nftnl_obj_get_u64(o, f.attr))); break;
        case FieldType::Str: data.Set(f.js, nftnl_obj_get_str(o, f.attr)); break;
        default: break;
      }
    }
    if (t->type == NFT_OBJECT_CT_TIMEOUT && nftnl_obj_is_set(o, NFTNL_OBJ_CT_TIMEOUT_ARRAY)) {
      uint32_t len = 0;
      const uint32_t* timeouts = static_cast<const uint32_t*>(nftnl_obj_get_data(o, NFTNL_OBJ_CT_TIMEOUT_ARRAY, &len));
      uint32_t n = PolicyStates(nftnl_obj_get_u8(o, NFTNL_OBJ_CT_TIMEOUT_L4PROTO));
      if (n * sizeof(uint32_t) > len) n = len / sizeof(uint32_t);
      Napi::Array policy = Napi::Array::New(env, n);
      for (uint32_t i = 0; i < n; i++) policy.Set(i, timeouts[i]);
      data.Set(kPolicy, policy);
    }
  }
  out.Set("data", data);
  return out;
}

}  // namespace nfk
