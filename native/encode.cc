#include "encode.h"

#include <cstdio>
#include <cstring>
#include <arpa/inet.h>
#include <cerrno>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "common.h"
#include "digest.h"
#include "expr_table.h"
#include "object.h"

namespace nfk {

namespace {

Napi::Value Prop(const Napi::Object& o, const char* key) {
  Keys* k = Keys::current;
  if (k == nullptr) return o.Get(key);
  return o.Get(Napi::Value(o.Env(), k->Of(key)));
}

bool HasKey(const Napi::Object& o, const char* key) { return Present(Prop(o, key)); }
std::string Str(const Napi::Object& o, const char* key) { return StringOf(Prop(o, key), key); }
int64_t I64(const Napi::Object& o, const char* key) { return I64Of(Prop(o, key), key); }
uint32_t U32(const Napi::Object& o, const char* key) { return U32Of(Prop(o, key), key); }

// Largest single message we build. Set elements are split to stay below it.
constexpr size_t kMaxMessage = 4 << 20;

// Messages are built in a scratch buffer and then appended, so a big batch
// costs one copy per message, not a clear of the whole buffer per message.
// libmnl 1.0.4 leaves an attribute's padding as the buffer had it, so what the
// last message wrote is cleared first: the bytes sent pad with zeros, as nft's do.
// The scratch buffer comes zeroed from calloc, which takes a block this big from mmap (M_MMAP_THRESHOLD,
// addon.cc) and so does not write it: only the pages messages touch become resident, per thread
// that encodes (new char[]() wrote all of it, in the JS thread and each libuv worker alike).
struct FreeScratch {
  void operator()(char* p) const { std::free(p); }
};
char* Reserve(std::vector<uint8_t>* /*out*/) {
  static thread_local std::unique_ptr<char, FreeScratch> scratch(static_cast<char*>(std::calloc(kMaxMessage, 1)));
  char* buf = scratch.get();
  if (buf == nullptr) throw std::bad_alloc();
  // The last message's length, also when its build threw half-way: libmnl grows
  // nlmsg_len with every attribute it puts.
  const uint32_t used = reinterpret_cast<const nlmsghdr*>(buf)->nlmsg_len;
  if (used > 0) memset(buf, 0, used <= kMaxMessage ? MNL_ALIGN(used) : kMaxMessage);
  return buf;
}

// Appends the message just built in the scratch buffer to `out`.
void Commit(std::vector<uint8_t>* out, char* start) {
  const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(start);
  if (nlh->nlmsg_len > kMaxMessage) abort();  // would have overrun: a bug, not input
  const uint8_t* p = reinterpret_cast<const uint8_t*>(start);
  out->insert(out->end(), p, p + MNL_ALIGN(nlh->nlmsg_len));
}

void PutBatchMarker(std::vector<uint8_t>* out, uint16_t type, uint32_t seq, bool hasGen,
                    uint32_t gen) {
  char* buf = Reserve(out);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  nlh->nlmsg_seq = seq;
  nfgenmsg* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = AF_UNSPEC;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(NFNL_SUBSYS_NFTABLES);
  // libnftnl 1.2.4's nftnl_batch_begin() cannot carry a generation, hence by hand.
  if (hasGen) mnl_attr_put_u32(nlh, NFNL_BATCH_GENID, htonl(gen));
  Commit(out, buf);
}

uint16_t FamilyOf(const Napi::Object& o) {
  Napi::Value v = Prop(o, "family");
  if (v.IsNumber()) return static_cast<uint16_t>(v.As<Napi::Number>().Uint32Value());
  if (!v.IsString()) throw Napi::TypeError::New(o.Env(), "'family' must be a family name");
  int64_t f;
  std::string name = v.As<Napi::String>().Utf8Value();
  if (!EnumFromName(kFamilyMap, name.c_str(), &f)) {
    throw Napi::TypeError::New(o.Env(), "unknown family '" + name + "'");
  }
  return static_cast<uint16_t>(f);
}

int64_t EnumOfValue(const Napi::Value& v, const char* key, const EnumMap& map) {
  if (v.IsNumber()) return v.As<Napi::Number>().Int64Value();
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), std::string("'") + key + "' must be a name");
  std::string name = v.As<Napi::String>().Utf8Value();
  int64_t value;
  if (!EnumFromName(map, name.c_str(), &value)) {
    throw Napi::TypeError::New(v.Env(), std::string("'") + key + "': unknown value '" + name + "'");
  }
  return value;
}

// A netlink attribute's length is 16 bits; anything longer would corrupt the
// message (and overrun the scratch buffer), so it is refused here.
constexpr size_t kMaxAttrPayload = 0xff00;

std::vector<uint8_t> HexOfValue(const Napi::Value& v, const char* key, size_t max = kMaxAttrPayload) {
  std::vector<uint8_t> d = FromHex(v.Env(), StringOf(v, key), key);
  if (d.size() > max) {
    throw Napi::TypeError::New(v.Env(), std::string("'") + key + "' is " + std::to_string(d.size()) +
                                            " bytes, more than the " + std::to_string(max) + " allowed");
  }
  return d;
}

std::vector<uint8_t> HexOf(const Napi::Object& o, const char* key, size_t max = kMaxAttrPayload) {
  return HexOfValue(Prop(o, key), key, max);
}

// --- expressions -------------------------------------------------------------

nftnl_expr* BuildTypedExpr(const ExprKind& kind, const Napi::Object& e) {
  nftnl_expr* x = nftnl_expr_alloc(kind.name);
  if (x == nullptr) throw Napi::Error::New(e.Env(), std::string("libnftnl lacks expression ") + kind.name);
  try {
    for (size_t i = 0; i < kind.count; i++) {
      const Field& f = kind.fields[i];
      Napi::Value v = Prop(e, f.js);
      if (!Present(v)) continue;
      switch (f.type) {
        case FieldType::U8:
          nftnl_expr_set_u8(x, f.attr, static_cast<uint8_t>(U32Of(v, f.js)));
          break;
        case FieldType::U16:
          nftnl_expr_set_u16(x, f.attr, static_cast<uint16_t>(U32Of(v, f.js)));
          break;
        case FieldType::U32:
          nftnl_expr_set_u32(x, f.attr, U32Of(v, f.js));
          break;
        case FieldType::I32:
          nftnl_expr_set_u32(x, f.attr, static_cast<uint32_t>(I64Of(v, f.js)));
          break;
        case FieldType::U64:
          nftnl_expr_set_u64(x, f.attr, static_cast<uint64_t>(I64Of(v, f.js)));
          break;
        case FieldType::Str: {
          std::string str = StringOf(v, f.js);
          // libnftnl would silently truncate (xt names) or the kernel refuse.
          if (f.max != 0 && str.size() > f.max) {
            throw Napi::TypeError::New(e.Env(), std::string("'") + f.js + "' of a " + kind.name + " is at most " +
                                                    std::to_string(f.max) + " bytes");
          }
          nftnl_expr_set_str(x, f.attr, str.c_str());
          break;
        }
        case FieldType::Data: {
          // libnftnl 1.2.4 memcpy()s these into a 64-byte register unchecked.
          std::vector<uint8_t> d = HexOfValue(v, f.js, f.max != 0 ? f.max : kMaxDataLen);
          nftnl_expr_set(x, f.attr, d.data(), d.size());
          break;
        }
        case FieldType::Blob: {
          // libnftnl keeps this pointer and free()s it with the expression.
          std::vector<uint8_t> d = HexOfValue(v, f.js, f.max != 0 ? f.max : kMaxAttrPayload);
          void* copy = std::malloc(d.size() > 0 ? d.size() : 1);
          if (copy == nullptr) throw Napi::Error::New(e.Env(), "out of memory");
          if (!d.empty()) std::memcpy(copy, d.data(), d.size());
          nftnl_expr_set(x, f.attr, copy, d.size());
          break;
        }
        case FieldType::Enum:
          nftnl_expr_set_u32(x, f.attr, static_cast<uint32_t>(EnumOfValue(v, f.js, *f.map)));
          break;
      }
    }
  } catch (...) {
    nftnl_expr_free(x);
    throw;
  }
  return x;
}

// NFT_SET_EXPR_MAX: the most expressions a set, an element or a dynset carries.
constexpr uint32_t kMaxStatefulExprs = 2;

// Builds each of `o.exprs` (a set's, an element's or a dynset's expressions: counter, limit,
// quota, ...; validated in TypeScript) and hands it to `add`, which takes ownership.
template <typename Add>
void ForEachStatefulExpr(const Napi::Object& o, Add add) {
  Napi::Value v = Prop(o, "exprs");
  if (!Present(v)) return;
  if (!v.IsArray()) throw Napi::TypeError::New(o.Env(), "'exprs' must be an array");
  Napi::Array a = v.As<Napi::Array>();
  if (a.Length() > kMaxStatefulExprs) throw Napi::RangeError::New(o.Env(), "'exprs' holds at most 2 expressions");
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value ev = a.Get(i);
    if (!ev.IsObject()) throw Napi::TypeError::New(o.Env(), "exprs[" + std::to_string(i) + "] must be an object");
    std::string k = Str(ev.As<Napi::Object>(), "kind");
    const ExprKind* kind = FindExprKind(k.c_str());
    if (kind == nullptr || k == "dynset") throw Napi::TypeError::New(o.Env(), "exprs[" + std::to_string(i) + "]: '" + k + "' is not a stateful expression");
    add(BuildTypedExpr(*kind, ev.As<Napi::Object>()));
  }
}

// One NFTA_LIST_ELEM of a rule's expression list; `i` names it in errors.
void PutExpression(nlmsghdr* nlh, const Napi::Value& v, uint32_t i) {
  Napi::Env env = v.Env();
  if (!v.IsObject()) throw Napi::TypeError::New(env, "exprs[" + std::to_string(i) + "] must be an object");
  Napi::Object e = v.As<Napi::Object>();
  std::string kindName = Str(e, "kind");
  nlattr* elem = mnl_attr_nest_start(nlh, NFTA_LIST_ELEM);
  if (kindName == "unknown") {
    // Replays what the kernel gave us, byte for byte.
    std::string name = Str(e, "name");
    std::vector<uint8_t> data = HexOf(e, "data");
    if (data.size() > 0xff00) throw Napi::TypeError::New(env, "unknown expression data exceeds 64 KiB");
    mnl_attr_put_strz(nlh, NFTA_EXPR_NAME, name.c_str());
    mnl_attr_put(nlh, NFTA_EXPR_DATA | NLA_F_NESTED, data.size(), data.data());
  } else {
    const ExprKind* kind = FindExprKind(kindName.c_str());
    if (kind == nullptr) {
      throw Napi::TypeError::New(env, "exprs[" + std::to_string(i) + "]: unknown kind '" + kindName + "'");
    }
    nftnl_expr* x = BuildTypedExpr(*kind, e);
    try {
      // a dynset's statements (NFTA_DYNSET_EXPR, or EXPRESSIONS for more than one): libnftnl owns them
      if (kindName == "dynset") ForEachStatefulExpr(e, [x](nftnl_expr* s) { nftnl_expr_add_expr(x, NFTNL_EXPR_DYNSET_EXPRESSIONS, s); });
    } catch (...) {
      nftnl_expr_free(x);
      throw;
    }
    nftnl_expr_build_payload(nlh, x);
    nftnl_expr_free(x);
  }
  mnl_attr_nest_end(nlh, elem);
}

// EncodeBatch's `hints` (encodeHints): one word per op, then the ids of the rules' expressions;
// and each id's bytes once an expression of it was encoded in this batch. The keeper's desired
// rules share identical expressions (one frozen object, src/model/compact.ts), within a chain and
// across chains: an id met again is copied, its expression not read.
struct Hints {
  const uint32_t* words = nullptr;
  size_t length = 0;
  size_t ops = 0;
  // Per id (1 up to the number of expressions the array can hold), where its bytes are in `known`
  // and how many (0: not encoded yet).
  std::vector<std::pair<uint32_t, uint32_t>> at;
  std::vector<char> known;

  // Takes `v` only when it is a Uint32Array of a word per op and more (else no hints at all).
  Hints(const Napi::Value& v, size_t opCount) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) return;
    Napi::Uint32Array a = v.As<Napi::Uint32Array>();
    if (a.ElementLength() < opCount) return;
    words = a.Data();
    length = a.ElementLength();
    ops = opCount;
    at.resize(length - ops + 1);
  }
  bool SamePlace(uint32_t index) const { return words != nullptr && index < ops && (words[index] & kHintSamePlace) != 0; }
  bool Plain(uint32_t index) const { return words != nullptr && index < ops && (words[index] & kHintPlain) != 0; }
  // The ids of op `index`'s `n` expressions, or nullptr.
  const uint32_t* IdsOf(int64_t index, uint32_t n) const {
    if (words == nullptr || index < 0 || static_cast<size_t>(index) >= ops) return nullptr;
    size_t from = words[index] & ~(kHintSamePlace | kHintPlain);
    if (from < ops || from > length || n > length - from) return nullptr;
    return words + from;
  }
  // An id's slot, or nullptr for none (0) or one past what the array can name.
  std::pair<uint32_t, uint32_t>* Slot(uint32_t id) { return id != 0 && id < at.size() ? &at[id] : nullptr; }
};

// With `hints`, op `index`'s expressions named by id: one whose id was encoded before in the call
// is copied from there, the others encoded from their objects (and kept by id).
void PutExpressions(nlmsghdr* nlh, const Napi::Array& exprs, Hints* hints = nullptr, int64_t index = -1) {
  Napi::Env env = exprs.Env();
  // NFT_RULE_MAXEXPRS is 128; an attribute length is 16 bits.
  uint32_t n = exprs.Length();
  if (n > 128) throw Napi::TypeError::New(env, "a rule holds at most 128 expressions");
  nlattr* list = mnl_attr_nest_start(nlh, NFTA_RULE_EXPRESSIONS);
  const uint32_t* ids = hints != nullptr ? hints->IdsOf(index, n) : nullptr;
  for (uint32_t i = 0; i < n; i++) {
    char* at = static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh));
    std::pair<uint32_t, uint32_t>* slot = ids != nullptr ? hints->Slot(ids[i]) : nullptr;
    if (slot != nullptr && slot->second != 0) {
      std::memcpy(at, hints->known.data() + slot->first, slot->second);
      nlh->nlmsg_len += slot->second;
    } else {
      PutExpression(nlh, exprs.Get(i), i);
    }
    char* end = static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh));
    if (end - reinterpret_cast<char*>(list) > 0xffff) {
      throw Napi::TypeError::New(env, "the rule's expressions exceed 64 KiB");
    }
    if (slot != nullptr && slot->second == 0) {
      *slot = {static_cast<uint32_t>(hints->known.size()), static_cast<uint32_t>(end - at)};
      hints->known.insert(hints->known.end(), at, end);
    }
  }
  mnl_attr_nest_end(nlh, list);
}

// --- objects ----------------------------------------------------------------

struct Verb {
  bool isNew;        // NEW* vs DEL*
  uint16_t nlFlags;  // NLM_F_* beyond REQUEST|ACK
};

void EncodeTable(std::vector<uint8_t>* out, const std::string& verb, const Napi::Object& op,
                 uint32_t seq, bool* owner) {
  uint16_t family = FamilyOf(op);
  if (verb == "flush") {
    // nft's "flush table": delete every rule of every chain in the table.
    std::vector<std::pair<uint16_t, std::string>> attrs = {{NFTA_RULE_TABLE, Str(op, "name")}};
    EncodeRequest(out, NFT_MSG_DELRULE, family, NLM_F_ACK, seq, attrs);
    return;
  }
  uint16_t type, flags = NLM_F_ACK;
  if (verb == "add") type = NFT_MSG_NEWTABLE, flags |= NLM_F_CREATE;
  else if (verb == "create") type = NFT_MSG_NEWTABLE, flags |= NLM_F_CREATE | NLM_F_EXCL;
  else if (verb == "delete") type = NFT_MSG_DELTABLE;
  else throw Napi::TypeError::New(op.Env(), "tables take add, create, delete or flush, not '" + verb + "'");

  nftnl_table* t = nftnl_table_alloc();
  if (HasKey(op, "name")) nftnl_table_set_str(t, NFTNL_TABLE_NAME, Str(op, "name").c_str());
  if (HasKey(op, "handle")) nftnl_table_set_u64(t, NFTNL_TABLE_HANDLE, I64(op, "handle"));
  if (HasKey(op, "flags")) {
    uint32_t f = U32(op, "flags");
    if (f & NFT_TABLE_F_OWNER) *owner = true;
    nftnl_table_set_u32(t, NFTNL_TABLE_FLAGS, f);
  }
  if (HasKey(op, "userdata")) {
    std::vector<uint8_t> d = HexOf(op, "userdata");
    nftnl_table_set_data(t, NFTNL_TABLE_USERDATA, d.data(), d.size());
  }
  char* buf = Reserve(out);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq);
  nftnl_table_nlmsg_build_payload(nlh, t);
  nftnl_table_free(t);
  Commit(out, buf);
}

void EncodeChain(std::vector<uint8_t>* out, const std::string& verb, const Napi::Object& op,
                 uint32_t seq) {
  uint16_t family = FamilyOf(op);
  if (verb == "flush") {
    std::vector<std::pair<uint16_t, std::string>> attrs = {
        {NFTA_RULE_TABLE, Str(op, "table")}, {NFTA_RULE_CHAIN, Str(op, "name")}};
    EncodeRequest(out, NFT_MSG_DELRULE, family, NLM_F_ACK, seq, attrs);
    return;
  }
  uint16_t type, flags = NLM_F_ACK;
  if (verb == "add") type = NFT_MSG_NEWCHAIN, flags |= NLM_F_CREATE;
  else if (verb == "create") type = NFT_MSG_NEWCHAIN, flags |= NLM_F_CREATE | NLM_F_EXCL;
  else if (verb == "delete") type = NFT_MSG_DELCHAIN;
  else throw Napi::TypeError::New(op.Env(), "chains take add, create, delete or flush, not '" + verb + "'");

  nftnl_chain* c = nftnl_chain_alloc();
  try {
    // Each field read once (an install has thousands of chains).
    nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, Str(op, "table").c_str());
    Napi::Value f = Prop(op, "name");
    if (Present(f)) nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, StringOf(f, "name").c_str());
    f = Prop(op, "handle");
    if (Present(f)) nftnl_chain_set_u64(c, NFTNL_CHAIN_HANDLE, I64Of(f, "handle"));
    if (type == NFT_MSG_NEWCHAIN) {
      f = Prop(op, "hook");
      if (Present(f)) {
        const EnumMap& hooks = family == NFPROTO_NETDEV ? kNetdevHookMap : kInetHookMap;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, static_cast<uint32_t>(EnumOfValue(f, "hook", hooks)));
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, static_cast<int32_t>(I64(op, "priority")));
        nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, Str(op, "type").c_str());
        f = Prop(op, "device");
        if (Present(f)) nftnl_chain_set_str(c, NFTNL_CHAIN_DEV, StringOf(f, "device").c_str());
      }
      f = Prop(op, "policy");
      if (Present(f)) nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, static_cast<uint32_t>(EnumOfValue(f, "policy", kPolicyMap)));
    }
    f = Prop(op, "flags");
    if (Present(f)) nftnl_chain_set_u32(c, NFTNL_CHAIN_FLAGS, U32Of(f, "flags"));
    // NFTA_CHAIN_ID: a chain of this batch that rules and jumps name by id (a bound chain has no name).
    f = Prop(op, "id");
    if (Present(f)) nftnl_chain_set_u32(c, NFTNL_CHAIN_ID, U32Of(f, "id"));
    f = Prop(op, "userdata");
    if (Present(f)) {
      std::vector<uint8_t> d = HexOfValue(f, "userdata");
      nftnl_chain_set_data(c, NFTNL_CHAIN_USERDATA, d.data(), d.size());
    }
  } catch (...) {
    nftnl_chain_free(c);
    throw;
  }
  char* buf = Reserve(out);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq);
  nftnl_chain_nlmsg_build_payload(nlh, c);
  nftnl_chain_free(c);
  Commit(out, buf);
}

// Where the rule op encoded last was added (its op index, family, table and chain): a rule that
// EncodeHints says is added the same way, at the end of the same chain, takes these from here.
struct RulePlace {
  int64_t op = -1;
  uint16_t family = 0;
  std::string table, chain;
  bool hasChain = false;
  // The op at `index` may take this place (kHintSamePlace): the rule op just before it had one.
  bool Follows(uint32_t index) const { return op >= 0 && hasChain && op + 1 == static_cast<int64_t>(index); }
};

// `exprsIn`, when given, is told where in the message its NFTA_RULE_EXPRESSIONS attribute is
// (offset, length; left as it was for a rule without one: a delete).
void EncodeRule(std::vector<uint8_t>* out, const std::string& verb, const Napi::Object& op,
                uint32_t seq, const Napi::Value& exprBytes, Hints* hints, RulePlace* place, uint32_t index,
                std::pair<uint32_t, uint32_t>* exprsIn) {
  // The hint holds only where the place is the op's just before (else every field is read).
  const bool samePlace = hints->SamePlace(index) && place->Follows(index);
  // No field placing it but its chain (kHintPlain): those fields are not read.
  const bool plain = samePlace || hints->Plain(index);
  uint16_t family = samePlace ? place->family : FamilyOf(op);
  uint16_t type = NFT_MSG_NEWRULE, flags = NLM_F_ACK;
  if (verb == "add") flags |= NLM_F_CREATE | NLM_F_APPEND;  // after `position`, or at the end
  else if (verb == "insert") flags |= NLM_F_CREATE;         // before `position`, or at the start
  else if (verb == "replace") flags |= NLM_F_REPLACE;       // the rule `handle`
  else if (verb == "delete") type = NFT_MSG_DELRULE;
  else throw Napi::TypeError::New(op.Env(), "rules take add, insert, replace or delete, not '" + verb + "'");

  // Each field read once; of a plain op, only its place, expressions and userdata (encodeHints).
  Napi::Value chainV, handleV, positionV, idV, positionIdV, compatV, chainIdV;
  if (!plain) handleV = Prop(op, "handle");
  if ((verb == "replace" || verb == "delete") && !Present(handleV)) {
    throw Napi::TypeError::New(op.Env(), verb + " rule needs a 'handle'");
  }
  std::string table = samePlace ? place->table : Str(op, "table");
  if (!samePlace) chainV = Prop(op, "chain");
  if (!plain) {
    positionV = Prop(op, "position");
    idV = Prop(op, "id");
    positionIdV = Prop(op, "positionId");
    compatV = Prop(op, "compat");
    chainIdV = Prop(op, "chainId");
  }
  const bool hasChain = samePlace || Present(chainV);
  std::string chain = samePlace ? place->chain : hasChain ? StringOf(chainV, "chain") : std::string();

  nftnl_rule* r = nftnl_rule_alloc();
  char* buf;
  nlmsghdr* nlh;
  try {
    nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table.c_str());
    if (hasChain) nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain.c_str());
    if (Present(handleV)) nftnl_rule_set_u64(r, NFTNL_RULE_HANDLE, I64Of(handleV, "handle"));
    if (Present(positionV)) nftnl_rule_set_u64(r, NFTNL_RULE_POSITION, I64Of(positionV, "position"));
    // NFTA_RULE_ID names a rule added in this batch; NFTA_RULE_POSITION_ID places a rule next to
    // such a rule, which has no handle until the commit.
    if (Present(idV)) nftnl_rule_set_u32(r, NFTNL_RULE_ID, U32Of(idV, "id"));
    if (Present(positionIdV)) nftnl_rule_set_u32(r, NFTNL_RULE_POSITION_ID, U32Of(positionIdV, "positionId"));
    Napi::Value userdataV = Prop(op, "userdata");
    if (Present(userdataV)) {
      std::vector<uint8_t> d = HexOfValue(userdataV, "userdata");
      nftnl_rule_set_data(r, NFTNL_RULE_USERDATA, d.data(), d.size());
    }
    if (Present(compatV)) {
      // NFTA_RULE_COMPAT: the l4 protocol xt matches such as "tcp" check against.
      Napi::Object compat = compatV.As<Napi::Object>();
      nftnl_rule_set_u32(r, NFTNL_RULE_COMPAT_PROTO, U32(compat, "proto"));
      nftnl_rule_set_u32(r, NFTNL_RULE_COMPAT_FLAGS, HasKey(compat, "flags") ? U32(compat, "flags") : 0);
    }
    buf = Reserve(out);
    nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    // NFTA_RULE_CHAIN_ID (libnftnl 1.2.4 has no setter for it): a rule of a chain added in this
    // batch by id, as nft adds a bound chain's rules.
    if (Present(chainIdV)) mnl_attr_put_u32(nlh, NFTA_RULE_CHAIN_ID, htonl(U32Of(chainIdV, "chainId")));
    char* from = static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh));
    if (type == NFT_MSG_NEWRULE && exprBytes.IsBuffer()) {
      // Encoded before (encodeExprs) from the same, frozen, expressions: the attribute as it was.
      Napi::Buffer<uint8_t> b = exprBytes.As<Napi::Buffer<uint8_t>>();
      if (b.Length() < sizeof(nlattr) || b.Length() > 0xffff) throw Napi::TypeError::New(op.Env(), "encoded expressions of a wrong size");
      std::memcpy(from, b.Data(), b.Length());
      nlh->nlmsg_len += MNL_ALIGN(b.Length());
      if (exprsIn != nullptr) *exprsIn = {static_cast<uint32_t>(from - buf), static_cast<uint32_t>(b.Length())};
    } else if (type == NFT_MSG_NEWRULE) {
      Napi::Value exprs = Prop(op, "exprs");
      if (!exprs.IsArray()) throw Napi::TypeError::New(op.Env(), "'exprs' must be an array");
      PutExpressions(nlh, exprs.As<Napi::Array>(), hints, index);
      // (the attribute is the message's last: its end is the message's, padded as its elements are)
      if (exprsIn != nullptr) *exprsIn = {static_cast<uint32_t>(from - buf), static_cast<uint32_t>(static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh)) - from)};
    }
  } catch (...) {
    nftnl_rule_free(r);
    throw;
  }
  nftnl_rule_free(r);
  Commit(out, buf);
  place->op = index;
  place->family = family;
  place->hasChain = hasChain;
  if (!samePlace) {
    place->table = std::move(table);
    place->chain = std::move(chain);
  }
}

// NFT_USERDATA_MAXLEN
constexpr size_t kMaxUserdata = 256;
// NFTA_SET_ELEM_LIST_ELEMENTS is one attribute, so its 16-bit length bounds
// the elements of one message; stay well below it.
constexpr size_t kElemBytesPerMessage = 48 * 1024;
// A set created without an `id` still needs NFTA_SET_ID (nf_tables_newset
// refuses NEWSET without one); these never collide with small caller ids.
constexpr uint32_t kAutoSetIdBase = 0x80000000u;

nftnl_set* BuildSet(const Napi::Object& op, uint16_t family, uint32_t setId) {
  nftnl_set* s = nftnl_set_alloc();
  try {
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, family);
    nftnl_set_set_str(s, NFTNL_SET_TABLE, Str(op, "table").c_str());
    nftnl_set_set_str(s, NFTNL_SET_NAME, Str(op, "name").c_str());
    nftnl_set_set_u32(s, NFTNL_SET_ID, setId);
    if (HasKey(op, "handle")) nftnl_set_set_u64(s, NFTNL_SET_HANDLE, I64(op, "handle"));
    if (HasKey(op, "flags")) nftnl_set_set_u32(s, NFTNL_SET_FLAGS, U32(op, "flags"));
    if (HasKey(op, "keyType")) nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, U32(op, "keyType"));
    if (HasKey(op, "keyLen")) nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, U32(op, "keyLen"));
    if (HasKey(op, "dataType")) nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, U32(op, "dataType"));
    if (HasKey(op, "dataLen")) nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, U32(op, "dataLen"));
    if (HasKey(op, "policy")) nftnl_set_set_u32(s, NFTNL_SET_POLICY, U32(op, "policy"));
    if (HasKey(op, "size")) nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, U32(op, "size"));
    if (HasKey(op, "fieldLen")) {
      // NFTA_SET_DESC_CONCAT: one byte length per part (validated in TypeScript: 1-15 parts of 1-255).
      // libnftnl counts the parts up to the first zero, so the array stays zero-terminated.
      Napi::Value v = Prop(op, "fieldLen");
      if (!v.IsArray()) throw Napi::TypeError::New(op.Env(), "'fieldLen' must be an array");
      Napi::Array a = v.As<Napi::Array>();
      uint8_t lens[16] = {0};
      uint32_t n = a.Length();
      if (n == 0 || n > 15) throw Napi::RangeError::New(op.Env(), "'fieldLen' must have 1 to 15 parts");
      for (uint32_t i = 0; i < n; i++) {
        uint32_t l = a.Get(i).As<Napi::Number>().Uint32Value();
        if (l == 0 || l > 255) throw Napi::RangeError::New(op.Env(), "'fieldLen' parts must be 1-255 bytes");
        lens[i] = static_cast<uint8_t>(l);
      }
      nftnl_set_set_data(s, NFTNL_SET_DESC_CONCAT, lens, n);
    }
    if (HasKey(op, "timeout")) nftnl_set_set_u64(s, NFTNL_SET_TIMEOUT, I64(op, "timeout"));
    if (HasKey(op, "gcInterval")) nftnl_set_set_u32(s, NFTNL_SET_GC_INTERVAL, U32(op, "gcInterval"));
    if (HasKey(op, "objType")) nftnl_set_set_u32(s, NFTNL_SET_OBJ_TYPE, U32(op, "objType"));
    if (HasKey(op, "userdata")) {
      std::vector<uint8_t> d = HexOf(op, "userdata", kMaxUserdata);
      nftnl_set_set_data(s, NFTNL_SET_USERDATA, d.data(), d.size());
    }
    // NFTA_SET_EXPR, or NFTA_SET_EXPRESSIONS for more than one: what each element gets
    ForEachStatefulExpr(op, [s](nftnl_expr* x) { nftnl_set_add_expr(s, x); });
  } catch (...) {
    nftnl_set_free(s);
    throw;
  }
  return s;
}

// One element, read and checked before anything is handed to libnftnl (whose
// 1.2.4 element setters memcpy keys into fixed 64-byte registers unchecked).
struct ElemIn {
  std::vector<uint8_t> key, keyEnd, data, userdata;
  std::string objref;  // NFTA_SET_ELEM_OBJREF: the object an object map's element maps to
  bool hasKey = false, hasKeyEnd = false, hasData = false, hasUserdata = false, hasObjref = false;
  bool hasFlags = false, hasVerdict = false, hasChain = false, hasTimeout = false, hasExpiration = false;
  uint32_t flags = 0;
  uint64_t timeout = 0, expiration = 0;
  int32_t verdict = 0;
  std::string chain;
  // NFTA_SET_ELEM_EXPR(ESSIONS): the element's own counter, limit, quota, ... (built when encoded)
  std::optional<Napi::Object> exprsOf;
  uint32_t exprCount = 0;

  size_t WireSize() const {
    auto attr = [](size_t n) { return 4 + MNL_ALIGN(n); };
    size_t n = 4;  // NFTA_LIST_ELEM
    if (hasKey) n += 4 + attr(key.size());
    if (hasKeyEnd) n += 4 + attr(keyEnd.size());
    if (hasData) n += 4 + attr(data.size());
    if (hasUserdata) n += attr(userdata.size());
    if (hasObjref) n += attr(objref.size() + 1);
    if (hasFlags) n += attr(4);
    if (hasTimeout) n += attr(8);
    if (hasExpiration) n += attr(8);
    if (hasVerdict || hasChain) n += 4 + 4 + attr(4) + attr(chain.size() + 1);
    // more than any stateful expression's attributes (a limit is 64 bytes with its name)
    n += 8 + exprCount * 128;
    return n;
  }
};

ElemIn ReadElement(const Napi::Value& v, uint32_t i) {
  Napi::Env env = v.Env();
  if (!v.IsObject()) throw Napi::TypeError::New(env, "elements[" + std::to_string(i) + "] must be an object");
  Napi::Object eo = v.As<Napi::Object>();
  ElemIn e;
  // Each field read once (an element map's install has thousands of elements).
  Napi::Value f = Prop(eo, "key");
  if ((e.hasKey = Present(f))) e.key = HexOfValue(f, "key", kMaxDataLen);
  f = Prop(eo, "keyEnd");
  if ((e.hasKeyEnd = Present(f))) e.keyEnd = HexOfValue(f, "keyEnd", kMaxDataLen);
  f = Prop(eo, "data");
  if ((e.hasData = Present(f))) e.data = HexOfValue(f, "data", kMaxDataLen);
  f = Prop(eo, "userdata");
  if ((e.hasUserdata = Present(f))) e.userdata = HexOfValue(f, "userdata", kMaxUserdata);
  f = Prop(eo, "flags");
  if ((e.hasFlags = Present(f))) e.flags = U32Of(f, "flags");
  f = Prop(eo, "verdict");
  if ((e.hasVerdict = Present(f))) e.verdict = static_cast<int32_t>(EnumOfValue(f, "verdict", kVerdictMap));
  f = Prop(eo, "chain");
  if ((e.hasChain = Present(f))) e.chain = StringOf(f, "chain");
  f = Prop(eo, "objref");
  if ((e.hasObjref = Present(f))) {
    e.objref = StringOf(f, "objref");
    if (e.objref.empty() || e.objref.size() > 255 || e.objref.find('\0') != std::string::npos) {
      throw Napi::RangeError::New(env, "elements[" + std::to_string(i) + "].objref must be an object name of 1-255 bytes");
    }
  }
  f = Prop(eo, "timeout");
  if ((e.hasTimeout = Present(f))) e.timeout = static_cast<uint64_t>(I64Of(f, "timeout"));
  f = Prop(eo, "expiration");
  if ((e.hasExpiration = Present(f))) e.expiration = static_cast<uint64_t>(I64Of(f, "expiration"));
  Napi::Value x = Prop(eo, "exprs");
  if (Present(x)) {
    if (!x.IsArray()) throw Napi::TypeError::New(env, "elements[" + std::to_string(i) + "].exprs must be an array");
    e.exprsOf = eo;
    e.exprCount = x.As<Napi::Array>().Length();
  }
  return e;
}

// NEWSETELEM/DELSETELEM messages for `elems`, split so that each message's
// element list stays within one attribute. An empty DELSETELEM (no elements
// at all) flushes the set. `setId`, when non-zero, lets the kernel find a set
// created earlier in the same batch (anonymous sets are renamed on creation).
// Returns the number of messages written.
size_t EncodeElements(std::vector<uint8_t>* out, uint16_t type, uint16_t family,
                      const std::string& table, const std::string& set, uint32_t setId,
                      const std::vector<ElemIn>& elems, uint32_t seq) {
  size_t messages = 0;
  size_t i = 0;
  do {
    nftnl_set* s = nftnl_set_alloc();
    std::unique_ptr<nftnl_set, void (*)(const nftnl_set*)> owned(s, nftnl_set_free);
    nftnl_set_set_str(s, NFTNL_SET_TABLE, table.c_str());
    nftnl_set_set_str(s, NFTNL_SET_NAME, set.c_str());
    if (setId != 0) nftnl_set_set_u32(s, NFTNL_SET_ID, setId);
    size_t bytes = 0;
    for (; i < elems.size(); i++) {
      const ElemIn& in = elems[i];
      size_t w = in.WireSize();
      if (bytes > 0 && bytes + w > kElemBytesPerMessage) break;
      bytes += w;
      nftnl_set_elem* e = nftnl_set_elem_alloc();
      nftnl_set_elem_add(s, e);  // owned by the set from here on
      if (in.hasKey) nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, in.key.data(), in.key.size());
      if (in.hasKeyEnd) nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, in.keyEnd.data(), in.keyEnd.size());
      if (in.hasFlags) nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, in.flags);
      if (in.hasData) nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, in.data.data(), in.data.size());
      if (in.hasVerdict) nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, static_cast<uint32_t>(in.verdict));
      if (in.hasChain) nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, in.chain.c_str());
      if (in.hasObjref) nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_OBJREF, in.objref.c_str());
      if (in.hasTimeout) nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, in.timeout);
      if (in.hasExpiration) nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_EXPIRATION, in.expiration);
      if (in.hasUserdata) nftnl_set_elem_set(e, NFTNL_SET_ELEM_USERDATA, in.userdata.data(), in.userdata.size());
      if (in.exprsOf) ForEachStatefulExpr(*in.exprsOf, [e](nftnl_expr* x) { nftnl_set_elem_add_expr(e, x); });
    }
    char* buf = Reserve(out);
    uint16_t flags = NLM_F_ACK | (type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0);
    nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq + messages);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    owned.reset();
    Commit(out, buf);
    messages++;
  } while (i < elems.size());
  return messages;
}

std::vector<ElemIn> ReadElements(const Napi::Object& op) {
  std::vector<ElemIn> out;
  Napi::Value v = Prop(op, "elements");
  if (v.IsUndefined() || v.IsNull()) return out;
  if (!v.IsArray()) throw Napi::TypeError::New(op.Env(), "'elements' must be an array");
  Napi::Array arr = v.As<Napi::Array>();
  out.reserve(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) out.push_back(ReadElement(arr.Get(i), i));
  return out;
}

// Returns the number of messages written for this op.
size_t EncodeSet(std::vector<uint8_t>* out, const std::string& verb, const Napi::Object& op,
                 uint32_t seq) {
  uint16_t family = FamilyOf(op);
  std::string table = Str(op, "table"), name = Str(op, "name");
  uint32_t givenId = HasKey(op, "id") ? U32(op, "id") : 0;
  if (verb == "flush") {
    return EncodeElements(out, NFT_MSG_DELSETELEM, family, table, name, givenId, {}, seq);
  }
  uint16_t type, flags = NLM_F_ACK;
  if (verb == "add") type = NFT_MSG_NEWSET, flags |= NLM_F_CREATE;
  else if (verb == "create") type = NFT_MSG_NEWSET, flags |= NLM_F_CREATE | NLM_F_EXCL;
  else if (verb == "delete") type = NFT_MSG_DELSET;
  else throw Napi::TypeError::New(op.Env(), "sets take add, create, delete or flush, not '" + verb + "'");
  uint32_t setId = givenId;
  if (type == NFT_MSG_NEWSET && !HasKey(op, "id")) setId = kAutoSetIdBase | (seq & 0x7fffffffu);
  std::vector<ElemIn> elems;
  if (type == NFT_MSG_NEWSET) elems = ReadElements(op);
  nftnl_set* s = BuildSet(op, family, setId);
  if (type == NFT_MSG_DELSET && !HasKey(op, "id")) nftnl_set_unset(s, NFTNL_SET_ID);
  char* buf = Reserve(out);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, family, flags, seq);
  nftnl_set_nlmsg_build_payload(nlh, s);
  nftnl_set_free(s);
  Commit(out, buf);
  size_t messages = 1;
  if (!elems.empty()) {
    messages += EncodeElements(out, NFT_MSG_NEWSETELEM, family, table, name, setId, elems, seq + 1);
  }
  return messages;
}

size_t EncodeElementOp(std::vector<uint8_t>* out, const std::string& verb, const Napi::Object& op,
                       uint32_t seq) {
  uint16_t family = FamilyOf(op);
  uint16_t type;
  if (verb == "add") type = NFT_MSG_NEWSETELEM;
  else if (verb == "delete") type = NFT_MSG_DELSETELEM;
  else throw Napi::TypeError::New(op.Env(), "elements take add or delete, not '" + verb + "'");
  if (!Prop(op, "elements").IsArray()) throw Napi::TypeError::New(op.Env(), "'elements' must be an array");
  std::vector<ElemIn> elems = ReadElements(op);
  // An empty DELSETELEM would flush the whole set: an empty list means "nothing".
  if (elems.empty()) return 0;
  return EncodeElements(out, type, family, Str(op, "table"), Str(op, "set"),
                        HasKey(op, "setId") ? U32(op, "setId") : 0, elems, seq);
}

}  // namespace

void EncodeRequest(std::vector<uint8_t>* out, uint16_t msgType, uint16_t family, uint16_t flags,
                   uint32_t seq, const std::vector<std::pair<uint16_t, std::string>>& attrs) {
  char* buf = Reserve(out);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, msgType, family, flags, seq);
  for (const auto& a : attrs) mnl_attr_put_strz(nlh, a.first, a.second.c_str());
  Commit(out, buf);
}

Napi::Value EncodeExpressions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "encodeExprs takes an array of expressions");
  Keys keys(env);
  char* buf = Reserve(nullptr);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_IPV4, 0, 0);
  const uint8_t* start = static_cast<const uint8_t*>(mnl_nlmsg_get_payload_tail(nlh));
  PutExpressions(nlh, info[0].As<Napi::Array>());
  const uint8_t* end = static_cast<const uint8_t*>(mnl_nlmsg_get_payload_tail(nlh));
  return Napi::Buffer<uint8_t>::Copy(env, start, static_cast<size_t>(end - start));
}

// libmnl marks every nest it opens NLA_F_NESTED; nf_tables dumps nests without the flag. It is
// undone here, recursively (every nest of ours carries the flag), so that the bytes are the ones
// the kernel's dump gives for the same expressions (the padding is zero already: see Reserve).
void AsTheKernelDumps(uint8_t* p, size_t len) {
  size_t off = 0;
  while (off + sizeof(nlattr) <= len) {
    nlattr* a = reinterpret_cast<nlattr*>(p + off);
    if (a->nla_len < sizeof(nlattr) || off + a->nla_len > len) return;
    if (a->nla_type & NLA_F_NESTED) {
      a->nla_type &= ~NLA_F_NESTED;
      AsTheKernelDumps(p + off + sizeof(nlattr), a->nla_len - sizeof(nlattr));
    }
    off += MNL_ALIGN(a->nla_len);
  }
}

// ruleDigests(exprs, rules, userdata) -> string[]: each rule's RuleDigest (digest.h) of the
// bytes a commit would write for it (its userdata and NFTA_RULE_EXPRESSIONS). Where the kernel
// dumps the same bytes, the digest its dump gives is equal, so a keeper adopting a ruleset it wrote
// before recognises its rules without decoding them. `exprs` are the distinct expressions (the
// keeper's desired rules share identical ones, compact.ts), each encoded once; `rules` is, per
// rule, its expression count then their indexes into `exprs`; `userdata` per rule a hex string or
// undefined. '' where a rule has no digest (it looks up an anonymous set, as in a dump) or an
// expression cannot be encoded (the commit's own encoding would say why).
Napi::Value DigestRules(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray() || !info[1].IsTypedArray() || !info[2].IsArray()) {
    throw Napi::TypeError::New(env, "ruleDigests takes (exprs[], Uint32Array, userdata[])");
  }
  Napi::Array exprs = info[0].As<Napi::Array>();
  Napi::Uint32Array rules = info[1].As<Napi::Uint32Array>();
  Napi::Array userdata = info[2].As<Napi::Array>();
  Keys keys(env);
  // Each distinct expression's share of the hashed bytes; absent: no digest for its rules.
  uint32_t ne = exprs.Length();
  std::vector<std::string> segment(ne);
  std::vector<bool> ok(ne, false);
  for (uint32_t i = 0; i < ne; i++) {
    try {
      char* buf = Reserve(nullptr);
      nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_IPV4, 0, 0);
      uint8_t* start = static_cast<uint8_t*>(mnl_nlmsg_get_payload_tail(nlh));
      nlattr* list = mnl_attr_nest_start(nlh, NFTA_RULE_EXPRESSIONS);
      PutExpression(nlh, exprs.Get(i), i);
      mnl_attr_nest_end(nlh, list);
      size_t len = static_cast<size_t>(static_cast<uint8_t*>(mnl_nlmsg_get_payload_tail(nlh)) - start);
      AsTheKernelDumps(start, len);
      std::vector<RawExpr> raw = WalkExpressions(reinterpret_cast<const nlattr*>(start));
      ok[i] = raw.size() == 1 && AppendExprDigestSegment(&segment[i], raw[0]);
    } catch (const Napi::Error&) {
      ok[i] = false;
    }
  }
  uint32_t nr = userdata.Length();
  Napi::Array out = Napi::Array::New(env, nr);
  size_t at = 0, end = rules.ElementLength();
  std::string hashed;
  for (uint32_t r = 0; r < nr; r++) {
    if (at >= end) throw Napi::TypeError::New(env, "ruleDigests: fewer rules than userdata entries");
    uint32_t count = rules[at++];
    if (count > end - at) throw Napi::TypeError::New(env, "ruleDigests: a rule's expression indexes run past the end");
    hashed.clear();
    bool digest = true;
    Napi::Value ud = userdata.Get(r);
    try {
      if (ud.IsString()) {
        std::vector<uint8_t> b = HexOfValue(ud, "userdata");
        AppendUserdataDigestSegment(&hashed, b.data(), b.size());
      } else {
        AppendUserdataDigestSegment(&hashed, nullptr, 0);
      }
    } catch (const Napi::Error&) {
      digest = false;
    }
    for (uint32_t k = 0; k < count; k++) {
      uint32_t x = rules[at + k];
      if (x >= ne || !ok[x]) {
        digest = false;
        break;
      }
      hashed.append(segment[x]);
    }
    at += count;
    out.Set(r, Napi::String::New(env, digest ? DigestOf(hashed) : std::string()));
  }
  return out;
}

namespace {

// The RuleDigest of the NEWRULE message at `msg`, just encoded: of its userdata and of its
// expressions as the kernel will dump them (AsTheKernelDumps, on a copy: the message goes out as it is).
std::string DigestOfRuleMessage(const uint8_t* msg, bool anonymousSetsUnnamed = false) {
  const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(msg);
  const nlattr* userdata = nullptr;
  const nlattr* exprs = nullptr;
  const nlattr* attr;
  NFK_ATTR_FOR_EACH(attr, nlh, sizeof(nfgenmsg)) {
    uint16_t type = mnl_attr_get_type(attr);
    if (type == NFTA_RULE_USERDATA) userdata = attr;
    else if (type == NFTA_RULE_EXPRESSIONS) exprs = attr;
  }
  if (exprs == nullptr) return RuleDigest(userdata, nullptr);
  const uint8_t* from = reinterpret_cast<const uint8_t*>(exprs);
  std::vector<uint8_t> copy(from, from + MNL_ALIGN(exprs->nla_len));
  AsTheKernelDumps(copy.data(), copy.size());
  return RuleDigest(userdata, reinterpret_cast<const nlattr*>(copy.data()), anonymousSetsUnnamed);
}

}  // namespace

namespace {
// A big batch's buffer (an install's) is written once from start to end, each 4 KiB page faulted
// in on first touch; in huge pages that is one fault per 2 MiB (where the kernel's transparent
// huge pages are on "madvise"). Only fresh memory is advised: the buffer is given back after.
void AdviseHugePages(std::vector<uint8_t>* bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes->capacity() < 4 * kHuge || !bytes->empty()) return;
  const uintptr_t at = reinterpret_cast<uintptr_t>(bytes->data());
  const uintptr_t from = (at + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t to = (at + bytes->capacity()) & ~(kHuge - 1);
  if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
}
}  // namespace

void EncodeBatch(Napi::Env env, Napi::Array ops, uint32_t seq, bool hasGeneration,
                 uint32_t generation, EncodedBatch* out, Napi::Value exprBytes, bool digests,
                 Napi::Value hints, bool keepExprs) {
  out->bytes.clear();
  out->wantExprs = keepExprs;
  out->exprsAt.clear();
  if (keepExprs) out->exprsAt.assign(2 * size_t{ops.Length()}, 0);
  out->messageOp.clear();
  out->wantDigests = digests;
  out->digests.clear();
  out->unnamed.clear();
  out->toDigest.clear();
  if (digests) out->digests.resize(ops.Length());
  out->beginSeq = seq;
  // A rule of a few expressions is 200-400 bytes.
  const size_t had = out->bytes.capacity();
  out->bytes.reserve(4096 + ops.Length() * 384);
  if (out->bytes.capacity() != had) AdviseHugePages(&out->bytes);
  PutBatchMarker(&out->bytes, NFNL_MSG_BATCH_BEGIN, seq, hasGeneration, generation);
  uint32_t next = seq + 1;
  // The handles an op's fields and expressions take are let go every kOpsPerScope ops (the
  // cached keys with them): held to the end of the call, a big install's handle blocks were a
  // large part of its peak.
  constexpr uint32_t kOpsPerScope = 256;
  std::optional<Napi::HandleScope> scope;
  std::optional<Keys> keys;
  RulePlace place;
  Hints hint(hints, ops.Length());
  for (uint32_t i = 0; i < ops.Length(); i++) {
    if (i % kOpsPerScope == 0) {
      keys.reset();
      scope.reset();
      scope.emplace(env);
      keys.emplace(env);
    }
    size_t messages = 1;
    try {
      Napi::Value v = ops.Get(i);
      if (!v.IsObject()) throw Napi::TypeError::New(env, "an operation must be an object");
      Napi::Object op = v.As<Napi::Object>();
      // A rule added at the end of the chain the rule op before it went to (encodeHints): its verb
      // and object are known.
      const bool samePlace = hint.SamePlace(i) && place.Follows(i);
      std::string verb = samePlace ? std::string("add") : Str(op, "verb");
      std::string object = samePlace ? std::string("rule") : Str(op, "object");
      if (object == "table") EncodeTable(&out->bytes, verb, op, next, &out->claimsTable);
      else if (object == "chain") EncodeChain(&out->bytes, verb, op, next);
      else if (object == "rule") {
        Napi::Value pre = exprBytes.IsArray() ? exprBytes.As<Napi::Array>().Get(i) : Napi::Value();
        size_t at = out->bytes.size();
        std::pair<uint32_t, uint32_t> in{0, 0};
        EncodeRule(&out->bytes, verb, op, next, pre, &hint, &place, i, keepExprs ? &in : nullptr);
        if (in.second != 0) {
          out->exprsAt[2 * size_t{i}] = static_cast<uint32_t>(at + in.first);
          out->exprsAt[2 * size_t{i} + 1] = static_cast<uint32_t>(at + in.first + in.second);
        }
        if (digests && verb != "delete") out->toDigest.emplace_back(i, at);
      }
      else if (object == "set") messages = EncodeSet(&out->bytes, verb, op, next);
      else if (object == "element") messages = EncodeElementOp(&out->bytes, verb, op, next);
      else if (object == "obj") EncodeObject(&out->bytes, Reserve(&out->bytes), verb, op, FamilyOf(op), next);
      else throw Napi::TypeError::New(env, "unknown object '" + object + "'");
    } catch (const Napi::Error& e) {
      throw MakeNetlinkError(env, "operation " + std::to_string(i) + ": " + e.Message(), EINVAL,
                             "encode", static_cast<int>(i));
    }
    for (size_t m = 0; m < messages; m++) out->messageOp.push_back(static_cast<int32_t>(i));
    next += messages;
  }
  PutBatchMarker(&out->bytes, NFNL_MSG_BATCH_END, next, false, 0);
}

void DigestEncodedRules(EncodedBatch* out) {
  for (const auto& [i, at] : out->toDigest) {
    out->digests[i] = DigestOfRuleMessage(out->bytes.data() + at);
    if (out->digests[i].empty()) {
      std::string d = DigestOfRuleMessage(out->bytes.data() + at, true);
      if (!d.empty()) {
        if (out->unnamed.empty()) out->unnamed.resize(out->digests.size());
        out->unnamed[i] = std::move(d);
      }
    }
  }
  out->toDigest.clear();
}

}  // namespace nfk
