#include "attr.h"
#include <algorithm>
#include <iterator>
#include <type_traits>
#include <cstring>

#include <arpa/inet.h>
#include <endian.h>
#include <libnftnl/expr.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nf_tables_compat.h>
#include <netinet/in.h>
#include <linux/netfilter/nfnetlink.h>

#include "common.h"

namespace nfk {

bool HasNfgenmsg(const nlmsghdr* nlh) {
  return nlh->nlmsg_len >= MNL_NLMSG_HDRLEN + sizeof(nfgenmsg);
}

uint32_t MsgFamily(const nlmsghdr* nlh) {
  const nfgenmsg* nfg = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh));
  return nfg->nfgen_family;
}

const char* AttrStr(const nlattr* a) {
  return a != nullptr && mnl_attr_validate(a, MNL_TYPE_NUL_STRING) >= 0 ? mnl_attr_get_str(a) : nullptr;
}

bool AttrU32(const nlattr* a, uint32_t* v) {
  if (a == nullptr || mnl_attr_get_payload_len(a) < sizeof(uint32_t)) return false;
  *v = ntohl(mnl_attr_get_u32(a));
  return true;
}

bool AttrU64(const nlattr* a, uint64_t* v) {
  if (a == nullptr || mnl_attr_get_payload_len(a) < sizeof(uint64_t)) return false;
  *v = be64toh(mnl_attr_get_u64(a));
  return true;
}

int CollectAttr(const nlattr* attr, void* data) {
  AttrTable* t = static_cast<AttrTable*>(data);
  uint16_t type = mnl_attr_get_type(attr);
  if (type < t->at.size()) t->at[type] = attr;
  return MNL_CB_OK;
}

bool NameOk(const nlattr* a) {
  return a == nullptr || mnl_attr_validate(a, MNL_TYPE_NUL_STRING) >= 0;
}

std::vector<RawExpr> WalkExpressions(const nlattr* list) {
  std::vector<RawExpr> out;
  // (a rule has a few expressions: one allocation; every rule of a digest dump or an echo comes here)
  out.reserve(16);
  for (nlattr* elem = static_cast<nlattr*>(mnl_attr_get_payload(list));
       mnl_attr_ok(elem, static_cast<int>(static_cast<const char*>(mnl_attr_get_payload(list)) +
                                          mnl_attr_get_payload_len(list) - reinterpret_cast<const char*>(elem)));
       elem = mnl_attr_next(elem)) {
    if (mnl_attr_get_type(elem) != NFTA_LIST_ELEM) continue;
    // The last NFTA_EXPR_NAME and NFTA_EXPR_DATA, as mnl_attr_parse_nested into an AttrTable
    // gives them, without the table's allocation per expression.
    const nlattr* name = nullptr;
    const nlattr* data = nullptr;
    const nlattr* a;
    NFK_NESTED_FOR_EACH(a, elem) {
      uint16_t type = mnl_attr_get_type(a);
      if (type == NFTA_EXPR_NAME) name = a;
      else if (type == NFTA_EXPR_DATA) data = a;
    }
    RawExpr& r = out.emplace_back();
    if (const char* n = AttrStr(name)) r.name = n;
    r.data = data;
  }
  return out;
}

std::vector<const nlattr*> ExprNests(const nlattr* single, const nlattr* list) {
  std::vector<const nlattr*> out;
  if (single != nullptr) out.push_back(single);
  if (list != nullptr) {
    const nlattr* a;
    NFK_NESTED_FOR_EACH(a, list) if (mnl_attr_get_type(a) == NFTA_LIST_ELEM) out.push_back(a);
  }
  return out;
}

bool ChainOkForLibnftnl(const nlmsghdr* nlh) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_CHAIN_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  bool ok = NameOk(t.at[NFTA_CHAIN_TABLE]) && NameOk(t.at[NFTA_CHAIN_NAME]) && NameOk(t.at[NFTA_CHAIN_TYPE]);
  if (ok && t.at[NFTA_CHAIN_HOOK] != nullptr) {
    AttrTable h(NFTA_HOOK_MAX);
    mnl_attr_parse_nested(t.at[NFTA_CHAIN_HOOK], CollectAttr, &h);
    ok = NameOk(h.at[NFTA_HOOK_DEV]);
    if (ok && h.at[NFTA_HOOK_DEVS] != nullptr) {
      const nlattr* d;
      NFK_NESTED_FOR_EACH(d, h.at[NFTA_HOOK_DEVS]) ok = ok && NameOk(d);
    }
  }
  return ok;
}

const nlmsghdr* SetForLibnftnl(const nlmsghdr* nlh, const SetCheck& s, std::vector<uint8_t>* storage) {
  if (s.at[NFTA_SET_EXPR] == nullptr && s.at[NFTA_SET_EXPRESSIONS] == nullptr) return nlh;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(nlh);
  const uint8_t* end = base + nlh->nlmsg_len;
  storage->assign(base, base + MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)));
  const char* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  for (const nlattr* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
       mnl_attr_ok(a, static_cast<int>(tail - reinterpret_cast<const char*>(a))); a = mnl_attr_next(a)) {
    uint16_t type = mnl_attr_get_type(a);
    if (type == NFTA_SET_EXPR || type == NFTA_SET_EXPRESSIONS) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(a);
    // The last attribute's padding may lie past the message's end: copied as zeros.
    size_t n = std::min<size_t>(a->nla_len, static_cast<size_t>(end - p));
    storage->insert(storage->end(), p, p + n);
    storage->resize(storage->size() + (MNL_ALIGN(n) - n), 0);
  }
  reinterpret_cast<nlmsghdr*>(storage->data())->nlmsg_len = static_cast<uint32_t>(storage->size());
  return reinterpret_cast<const nlmsghdr*>(storage->data());
}

bool ObjOkForLibnftnl(const nlmsghdr* nlh) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_OBJ_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  if (!NameOk(t.at[NFTA_OBJ_TABLE]) || !NameOk(t.at[NFTA_OBJ_NAME])) return false;
  uint32_t type = 0;
  if (t.at[NFTA_OBJ_DATA] == nullptr || !AttrU32(t.at[NFTA_OBJ_TYPE], &type)) return true;
  if (type != NFT_OBJECT_CT_HELPER && type != NFT_OBJECT_SECMARK) return true;
  // a helper's name and a secmark's context are copied up to their NUL (attribute 1 of both)
  static_assert(static_cast<int>(NFTA_CT_HELPER_NAME) == 1 && static_cast<int>(NFTA_SECMARK_CTX) == 1, "attribute 1 of both");
  AttrTable d(1);
  mnl_attr_parse_nested(t.at[NFTA_OBJ_DATA], CollectAttr, &d);
  return NameOk(d.at[1]);
}

}  // namespace nfk

// ---- libnftnl's attribute type checks (CheckRule and the rest, attr.h), and what it can parse ----
//
// A table per parse callback of libnftnl 1.2.4 that exits on a failed check: which attribute
// types it validates, as which libmnl type (mnl_attr_validate with the same type gives the same
// verdict), and which nests it then parses with checks of their own. Attributes libnftnl takes as
// MNL_TYPE_BINARY pass any length and are listed only where a nest is parsed from them.

namespace nfk {

namespace {

enum class Then : uint8_t {
  None,
  Nest,      // the attribute's nest, with `policy`
  Expr,      // one expression (NFTA_EXPR_NAME, NFTA_EXPR_DATA)
  ExprList,  // NFTA_LIST_ELEM expressions
  Statement,      // a dynset's expression: libnftnl must also know its kind
  StatementList,  // a dynset's expressions: NFTA_LIST_ELEMs only, each a Statement
  DataReg,   // a data register (NFTA_DATA_*), which may hold a verdict
  Concat,    // a set's NFTA_SET_DESC_CONCAT: NFTA_LIST_ELEM nests of NFTA_SET_FIELD_LEN
  ElemList,  // a set element list: the expressions of each element
};

constexpr int kAny = -1;  // not checked by libnftnl; only the nest below is

struct Policy;
struct Check {
  uint16_t type;
  const char* name;
  int want;  // an mnl_attr_data_type, or kAny
  Then then = Then::None;
  const Policy* policy = nullptr;
  uint16_t below = 0;  // when not 0: the payload must be shorter (a string libnftnl copies into an array)
};
struct Policy {
  const Check* checks;
  size_t count;
};
template <size_t N>
constexpr Policy P(const Check (&c)[N]) { return {c, N}; }

#define NFK_U8(a) {a, #a, MNL_TYPE_U8}
#define NFK_U16(a) {a, #a, MNL_TYPE_U16}
#define NFK_U32(a) {a, #a, MNL_TYPE_U32}
#define NFK_U64(a) {a, #a, MNL_TYPE_U64}
#define NFK_STR(a) {a, #a, MNL_TYPE_STRING}
#define NFK_NULSTR(a) {a, #a, MNL_TYPE_NUL_STRING}
#define NFK_NEST(a) {a, #a, MNL_TYPE_NESTED}

constexpr Check kVerdictChecks[] = {NFK_U32(NFTA_VERDICT_CODE), NFK_U32(NFTA_VERDICT_CHAIN_ID), NFK_STR(NFTA_VERDICT_CHAIN)};
constexpr Policy kVerdict = P(kVerdictChecks);
constexpr Check kDataChecks[] = {{NFTA_DATA_VERDICT, "NFTA_DATA_VERDICT", MNL_TYPE_NESTED, Then::Nest, &kVerdict}};
constexpr Policy kData = P(kDataChecks);

// Expressions, by the name libnftnl knows them by.
constexpr Check kBitwise[] = {NFK_U32(NFTA_BITWISE_SREG), NFK_U32(NFTA_BITWISE_DREG), NFK_U32(NFTA_BITWISE_OP),
                              NFK_U32(NFTA_BITWISE_LEN),
                              {NFTA_BITWISE_MASK, "NFTA_BITWISE_MASK", kAny, Then::DataReg},
                              {NFTA_BITWISE_XOR, "NFTA_BITWISE_XOR", kAny, Then::DataReg},
                              {NFTA_BITWISE_DATA, "NFTA_BITWISE_DATA", kAny, Then::DataReg}};
constexpr Check kByteorder[] = {NFK_U32(NFTA_BYTEORDER_SREG), NFK_U32(NFTA_BYTEORDER_DREG), NFK_U32(NFTA_BYTEORDER_OP),
                                NFK_U32(NFTA_BYTEORDER_LEN), NFK_U32(NFTA_BYTEORDER_SIZE)};
constexpr Check kCmp[] = {NFK_U32(NFTA_CMP_SREG), NFK_U32(NFTA_CMP_OP), {NFTA_CMP_DATA, "NFTA_CMP_DATA", kAny, Then::DataReg}};
constexpr Check kConnlimit[] = {NFK_U32(NFTA_CONNLIMIT_COUNT), NFK_U32(NFTA_CONNLIMIT_FLAGS)};
constexpr Check kCounter[] = {NFK_U64(NFTA_COUNTER_BYTES), NFK_U64(NFTA_COUNTER_PACKETS)};
constexpr Check kCt[] = {NFK_U32(NFTA_CT_KEY), NFK_U32(NFTA_CT_DREG), NFK_U32(NFTA_CT_SREG), NFK_U8(NFTA_CT_DIRECTION)};
constexpr Check kDup[] = {NFK_U32(NFTA_DUP_SREG_ADDR), NFK_U32(NFTA_DUP_SREG_DEV)};
constexpr Check kDynset[] = {NFK_U32(NFTA_DYNSET_SREG_KEY), NFK_U32(NFTA_DYNSET_SREG_DATA), NFK_U32(NFTA_DYNSET_SET_ID),
                             NFK_U32(NFTA_DYNSET_OP), NFK_U32(NFTA_DYNSET_FLAGS), NFK_U64(NFTA_DYNSET_TIMEOUT),
                             NFK_STR(NFTA_DYNSET_SET_NAME),
                             {NFTA_DYNSET_EXPR, "NFTA_DYNSET_EXPR", MNL_TYPE_NESTED, Then::Statement},
                             {NFTA_DYNSET_EXPRESSIONS, "NFTA_DYNSET_EXPRESSIONS", kAny, Then::StatementList}};
constexpr Check kExthdr[] = {NFK_U8(NFTA_EXTHDR_TYPE), NFK_U32(NFTA_EXTHDR_DREG), NFK_U32(NFTA_EXTHDR_SREG),
                             NFK_U32(NFTA_EXTHDR_OFFSET), NFK_U32(NFTA_EXTHDR_LEN), NFK_U32(NFTA_EXTHDR_OP),
                             NFK_U32(NFTA_EXTHDR_FLAGS)};
constexpr Check kFib[] = {NFK_U32(NFTA_FIB_RESULT), NFK_U32(NFTA_FIB_DREG), NFK_U32(NFTA_FIB_FLAGS)};
constexpr Check kFlow[] = {NFK_STR(NFTA_FLOW_TABLE_NAME)};
constexpr Check kFwd[] = {NFK_U32(NFTA_FWD_SREG_DEV), NFK_U32(NFTA_FWD_SREG_ADDR), NFK_U32(NFTA_FWD_NFPROTO)};
constexpr Check kHash[] = {NFK_U32(NFTA_HASH_SREG), NFK_U32(NFTA_HASH_DREG), NFK_U32(NFTA_HASH_LEN),
                           NFK_U32(NFTA_HASH_MODULUS), NFK_U32(NFTA_HASH_SEED), NFK_U32(NFTA_HASH_OFFSET),
                           NFK_U32(NFTA_HASH_TYPE)};
constexpr Check kImmediate[] = {NFK_U32(NFTA_IMMEDIATE_DREG), {NFTA_IMMEDIATE_DATA, "NFTA_IMMEDIATE_DATA", kAny, Then::DataReg}};
constexpr Check kLast[] = {NFK_U64(NFTA_LAST_MSECS), NFK_U32(NFTA_LAST_SET)};
constexpr Check kLimit[] = {NFK_U64(NFTA_LIMIT_RATE), NFK_U64(NFTA_LIMIT_UNIT), NFK_U32(NFTA_LIMIT_BURST),
                            NFK_U32(NFTA_LIMIT_TYPE), NFK_U32(NFTA_LIMIT_FLAGS)};
constexpr Check kLog[] = {NFK_STR(NFTA_LOG_PREFIX), NFK_U16(NFTA_LOG_GROUP), NFK_U16(NFTA_LOG_QTHRESHOLD),
                          NFK_U32(NFTA_LOG_SNAPLEN), NFK_U32(NFTA_LOG_LEVEL), NFK_U32(NFTA_LOG_FLAGS)};
constexpr Check kLookup[] = {NFK_U32(NFTA_LOOKUP_SREG), NFK_U32(NFTA_LOOKUP_DREG), NFK_U32(NFTA_LOOKUP_SET_ID),
                             NFK_U32(NFTA_LOOKUP_FLAGS), NFK_STR(NFTA_LOOKUP_SET)};
constexpr Check kMasq[] = {NFK_U32(NFTA_MASQ_REG_PROTO_MIN), NFK_U32(NFTA_MASQ_REG_PROTO_MAX), NFK_U32(NFTA_MASQ_FLAGS)};
constexpr Check kMatch[] = {NFK_NULSTR(NFTA_MATCH_NAME), NFK_U32(NFTA_MATCH_REV)};
constexpr Check kMeta[] = {NFK_U32(NFTA_META_KEY), NFK_U32(NFTA_META_DREG), NFK_U32(NFTA_META_SREG)};
constexpr Check kNat[] = {NFK_U32(NFTA_NAT_TYPE), NFK_U32(NFTA_NAT_FAMILY), NFK_U32(NFTA_NAT_REG_ADDR_MIN),
                          NFK_U32(NFTA_NAT_REG_ADDR_MAX), NFK_U32(NFTA_NAT_REG_PROTO_MIN),
                          NFK_U32(NFTA_NAT_REG_PROTO_MAX), NFK_U32(NFTA_NAT_FLAGS)};
constexpr Check kNumgen[] = {NFK_U32(NFTA_NG_DREG), NFK_U32(NFTA_NG_MODULUS), NFK_U32(NFTA_NG_TYPE), NFK_U32(NFTA_NG_OFFSET)};
constexpr Check kObjref[] = {NFK_U32(NFTA_OBJREF_IMM_TYPE), NFK_STR(NFTA_OBJREF_IMM_NAME), NFK_STR(NFTA_OBJREF_SET_NAME),
                             NFK_U32(NFTA_OBJREF_SET_SREG), NFK_U32(NFTA_OBJREF_SET_ID)};
constexpr Check kOsf[] = {NFK_U32(NFTA_OSF_DREG), NFK_U32(NFTA_OSF_FLAGS), NFK_U8(NFTA_OSF_TTL)};
constexpr Check kPayload[] = {NFK_U32(NFTA_PAYLOAD_SREG), NFK_U32(NFTA_PAYLOAD_DREG), NFK_U32(NFTA_PAYLOAD_BASE),
                              NFK_U32(NFTA_PAYLOAD_OFFSET), NFK_U32(NFTA_PAYLOAD_LEN), NFK_U32(NFTA_PAYLOAD_CSUM_TYPE),
                              NFK_U32(NFTA_PAYLOAD_CSUM_OFFSET), NFK_U32(NFTA_PAYLOAD_CSUM_FLAGS)};
constexpr Check kQueue[] = {NFK_U16(NFTA_QUEUE_NUM), NFK_U16(NFTA_QUEUE_TOTAL), NFK_U16(NFTA_QUEUE_FLAGS),
                            NFK_U32(NFTA_QUEUE_SREG_QNUM)};
constexpr Check kQuota[] = {NFK_U64(NFTA_QUOTA_BYTES), NFK_U64(NFTA_QUOTA_CONSUMED), NFK_U32(NFTA_QUOTA_FLAGS)};
constexpr Check kRange[] = {NFK_U32(NFTA_RANGE_SREG), NFK_U32(NFTA_RANGE_OP),
                            {NFTA_RANGE_FROM_DATA, "NFTA_RANGE_FROM_DATA", kAny, Then::DataReg},
                            {NFTA_RANGE_TO_DATA, "NFTA_RANGE_TO_DATA", kAny, Then::DataReg}};
constexpr Check kRedir[] = {NFK_U32(NFTA_REDIR_REG_PROTO_MIN), NFK_U32(NFTA_REDIR_REG_PROTO_MAX), NFK_U32(NFTA_REDIR_FLAGS)};
constexpr Check kReject[] = {NFK_U32(NFTA_REJECT_TYPE), NFK_U8(NFTA_REJECT_ICMP_CODE)};
constexpr Check kRt[] = {NFK_U32(NFTA_RT_KEY), NFK_U32(NFTA_RT_DREG)};
constexpr Check kSocket[] = {NFK_U32(NFTA_SOCKET_KEY), NFK_U32(NFTA_SOCKET_DREG), NFK_U32(NFTA_SOCKET_LEVEL)};
constexpr Check kSynproxy[] = {NFK_U16(NFTA_SYNPROXY_MSS), NFK_U8(NFTA_SYNPROXY_WSCALE), NFK_U32(NFTA_SYNPROXY_FLAGS)};
constexpr Check kTarget[] = {NFK_NULSTR(NFTA_TARGET_NAME), NFK_U32(NFTA_TARGET_REV)};
constexpr Check kTproxy[] = {NFK_U32(NFTA_TPROXY_FAMILY), NFK_U32(NFTA_TPROXY_REG_ADDR), NFK_U32(NFTA_TPROXY_REG_PORT)};
constexpr Check kTunnel[] = {NFK_U32(NFTA_TUNNEL_KEY), NFK_U32(NFTA_TUNNEL_DREG)};
constexpr Check kXfrm[] = {NFK_U32(NFTA_XFRM_DREG), NFK_U32(NFTA_XFRM_KEY), NFK_U32(NFTA_XFRM_SPNUM), NFK_U8(NFTA_XFRM_DIR)};

struct ExprPolicy {
  const char* name;
  Policy policy;
};
// Every expression libnftnl 1.2.4 parses with checks ("notrack" has no attributes).
constexpr ExprPolicy kExprPolicies[] = {
    {"bitwise", P(kBitwise)}, {"byteorder", P(kByteorder)}, {"cmp", P(kCmp)}, {"connlimit", P(kConnlimit)},
    {"counter", P(kCounter)}, {"ct", P(kCt)}, {"dup", P(kDup)}, {"dynset", P(kDynset)}, {"exthdr", P(kExthdr)},
    {"fib", P(kFib)}, {"flow_offload", P(kFlow)}, {"fwd", P(kFwd)}, {"hash", P(kHash)},
    {"immediate", P(kImmediate)}, {"last", P(kLast)}, {"limit", P(kLimit)}, {"log", P(kLog)},
    {"lookup", P(kLookup)}, {"masq", P(kMasq)}, {"match", P(kMatch)}, {"meta", P(kMeta)}, {"nat", P(kNat)},
    {"numgen", P(kNumgen)}, {"objref", P(kObjref)}, {"osf", P(kOsf)}, {"payload", P(kPayload)},
    {"queue", P(kQueue)}, {"quota", P(kQuota)}, {"range", P(kRange)}, {"redir", P(kRedir)},
    {"reject", P(kReject)}, {"rt", P(kRt)}, {"socket", P(kSocket)}, {"synproxy", P(kSynproxy)},
    {"target", P(kTarget)}, {"tproxy", P(kTproxy)}, {"tunnel", P(kTunnel)}, {"xfrm", P(kXfrm)},
};

constexpr Check kRuleCompatChecks[] = {NFK_U32(NFTA_RULE_COMPAT_PROTO), NFK_U32(NFTA_RULE_COMPAT_FLAGS)};
constexpr Policy kRuleCompat = P(kRuleCompatChecks);
constexpr Check kRuleChecks[] = {NFK_STR(NFTA_RULE_TABLE), NFK_STR(NFTA_RULE_CHAIN), NFK_U64(NFTA_RULE_HANDLE),
                                 {NFTA_RULE_COMPAT, "NFTA_RULE_COMPAT", MNL_TYPE_NESTED, Then::Nest, &kRuleCompat},
                                 NFK_U64(NFTA_RULE_POSITION), NFK_U32(NFTA_RULE_ID), NFK_U32(NFTA_RULE_POSITION_ID),
                                 {NFTA_RULE_EXPRESSIONS, "NFTA_RULE_EXPRESSIONS", kAny, Then::ExprList}};
constexpr Policy kRule = P(kRuleChecks);

constexpr Check kHookChecks[] = {NFK_U32(NFTA_HOOK_HOOKNUM), NFK_U32(NFTA_HOOK_PRIORITY), NFK_STR(NFTA_HOOK_DEV)};
constexpr Policy kHook = P(kHookChecks);
constexpr Check kCountersChecks[] = {NFK_U64(NFTA_COUNTER_BYTES), NFK_U64(NFTA_COUNTER_PACKETS)};
constexpr Policy kCounters = P(kCountersChecks);
constexpr Check kChainChecks[] = {NFK_STR(NFTA_CHAIN_NAME), NFK_STR(NFTA_CHAIN_TABLE), NFK_STR(NFTA_CHAIN_TYPE),
                                  {NFTA_CHAIN_HOOK, "NFTA_CHAIN_HOOK", MNL_TYPE_NESTED, Then::Nest, &kHook},
                                  {NFTA_CHAIN_COUNTERS, "NFTA_CHAIN_COUNTERS", MNL_TYPE_NESTED, Then::Nest, &kCounters},
                                  NFK_U32(NFTA_CHAIN_POLICY), NFK_U32(NFTA_CHAIN_USE), NFK_U32(NFTA_CHAIN_FLAGS),
                                  NFK_U32(NFTA_CHAIN_ID), NFK_U64(NFTA_CHAIN_HANDLE)};
constexpr Policy kChain = P(kChainChecks);

constexpr Check kSetDescChecks[] = {NFK_U32(NFTA_SET_DESC_SIZE),
                                    {NFTA_SET_DESC_CONCAT, "NFTA_SET_DESC_CONCAT", kAny, Then::Concat}};
constexpr Policy kSetDesc = P(kSetDescChecks);
constexpr Check kSetChecks[] = {NFK_STR(NFTA_SET_TABLE), NFK_STR(NFTA_SET_NAME), NFK_U64(NFTA_SET_HANDLE),
                                NFK_U32(NFTA_SET_FLAGS), NFK_U32(NFTA_SET_KEY_TYPE), NFK_U32(NFTA_SET_KEY_LEN),
                                NFK_U32(NFTA_SET_DATA_TYPE), NFK_U32(NFTA_SET_DATA_LEN), NFK_U32(NFTA_SET_ID),
                                NFK_U32(NFTA_SET_POLICY), NFK_U32(NFTA_SET_GC_INTERVAL), NFK_U64(NFTA_SET_TIMEOUT),
                                {NFTA_SET_DESC, "NFTA_SET_DESC", MNL_TYPE_NESTED, Then::Nest, &kSetDesc},
                                {NFTA_SET_EXPR, "NFTA_SET_EXPR", MNL_TYPE_NESTED, Then::Expr},
                                {NFTA_SET_EXPRESSIONS, "NFTA_SET_EXPRESSIONS", MNL_TYPE_NESTED, Then::ExprList}};
constexpr Policy kSet = P(kSetChecks);

// The last element attribute libnftnl 1.2.4 has room for (its own copy of nf_tables.h), whatever
// headers this is built against.
constexpr uint16_t kLibnftnlSetElemMax = 11;  // NFTA_SET_ELEM_EXPRESSIONS
static_assert(NFTA_SET_ELEM_EXPRESSIONS == kLibnftnlSetElemMax, "nf_tables.h numbering");

// Of an element message only the elements' expressions reach libnftnl (element.cc reads the rest).
constexpr Check kElemChecks[] = {{NFTA_SET_ELEM_EXPR, "NFTA_SET_ELEM_EXPR", kAny, Then::Expr},
                                 {NFTA_SET_ELEM_EXPRESSIONS, "NFTA_SET_ELEM_EXPRESSIONS", kAny, Then::ExprList}};
constexpr Policy kElem = P(kElemChecks);
constexpr Check kElemListChecks[] = {{NFTA_SET_ELEM_LIST_ELEMENTS, "NFTA_SET_ELEM_LIST_ELEMENTS", kAny, Then::ElemList}};
constexpr Policy kElemList = P(kElemListChecks);

// Stateful objects, by NFTA_OBJ_TYPE (their data's checks), and the object message.
constexpr Check kObjCounter[] = {NFK_U64(NFTA_COUNTER_BYTES), NFK_U64(NFTA_COUNTER_PACKETS)};
constexpr Check kObjQuota[] = {NFK_U64(NFTA_QUOTA_BYTES), NFK_U64(NFTA_QUOTA_CONSUMED), NFK_U32(NFTA_QUOTA_FLAGS)};
// (libnftnl copies a helper's name into 16 bytes and a secmark's context into 256, its own
// NFT_SECMARK_CTX_MAXLEN; newer kernels allow contexts up to 4096)
constexpr Check kObjCtHelper[] = {{NFTA_CT_HELPER_NAME, "NFTA_CT_HELPER_NAME", MNL_TYPE_STRING, Then::None, nullptr, 16},
                                  NFK_U16(NFTA_CT_HELPER_L3PROTO), NFK_U8(NFTA_CT_HELPER_L4PROTO)};
constexpr Check kObjLimit[] = {NFK_U64(NFTA_LIMIT_RATE), NFK_U64(NFTA_LIMIT_UNIT), NFK_U32(NFTA_LIMIT_BURST),
                               NFK_U32(NFTA_LIMIT_TYPE), NFK_U32(NFTA_LIMIT_FLAGS)};
constexpr Check kTunnelIpChecks[] = {NFK_U32(NFTA_TUNNEL_KEY_IP_SRC), NFK_U32(NFTA_TUNNEL_KEY_IP_DST)};
constexpr Policy kTunnelIp = P(kTunnelIpChecks);
constexpr Check kTunnelIp6Checks[] = {NFK_U32(NFTA_TUNNEL_KEY_IP6_FLOWLABEL)};
constexpr Policy kTunnelIp6 = P(kTunnelIp6Checks);
constexpr Check kTunnelVxlanChecks[] = {NFK_U32(NFTA_TUNNEL_KEY_VXLAN_GBP)};
constexpr Policy kTunnelVxlan = P(kTunnelVxlanChecks);
constexpr Check kTunnelErspanChecks[] = {NFK_U32(NFTA_TUNNEL_KEY_ERSPAN_VERSION), NFK_U32(NFTA_TUNNEL_KEY_ERSPAN_V1_INDEX),
                                         NFK_U8(NFTA_TUNNEL_KEY_ERSPAN_V2_HWID), NFK_U8(NFTA_TUNNEL_KEY_ERSPAN_V2_DIR)};
constexpr Policy kTunnelErspan = P(kTunnelErspanChecks);
constexpr Check kTunnelOptsChecks[] = {
    {NFTA_TUNNEL_KEY_OPTS_VXLAN, "NFTA_TUNNEL_KEY_OPTS_VXLAN", MNL_TYPE_NESTED, Then::Nest, &kTunnelVxlan},
    {NFTA_TUNNEL_KEY_OPTS_ERSPAN, "NFTA_TUNNEL_KEY_OPTS_ERSPAN", MNL_TYPE_NESTED, Then::Nest, &kTunnelErspan}};
constexpr Policy kTunnelOpts = P(kTunnelOptsChecks);
constexpr Check kObjTunnel[] = {NFK_U32(NFTA_TUNNEL_KEY_ID), NFK_U32(NFTA_TUNNEL_KEY_FLAGS),
                                {NFTA_TUNNEL_KEY_IP, "NFTA_TUNNEL_KEY_IP", MNL_TYPE_NESTED, Then::Nest, &kTunnelIp},
                                {NFTA_TUNNEL_KEY_IP6, "NFTA_TUNNEL_KEY_IP6", MNL_TYPE_NESTED, Then::Nest, &kTunnelIp6},
                                {NFTA_TUNNEL_KEY_OPTS, "NFTA_TUNNEL_KEY_OPTS", MNL_TYPE_NESTED, Then::Nest, &kTunnelOpts},
                                NFK_U16(NFTA_TUNNEL_KEY_SPORT), NFK_U16(NFTA_TUNNEL_KEY_DPORT),
                                NFK_U8(NFTA_TUNNEL_KEY_TOS), NFK_U8(NFTA_TUNNEL_KEY_TTL)};
// (NFTA_CT_TIMEOUT_DATA's timeouts depend on the protocol: ObjAbiOk checks them)
constexpr Check kObjCtTimeout[] = {NFK_U16(NFTA_CT_TIMEOUT_L3PROTO), NFK_U8(NFTA_CT_TIMEOUT_L4PROTO),
                                   NFK_NEST(NFTA_CT_TIMEOUT_DATA)};
constexpr Check kObjSecmark[] = {{NFTA_SECMARK_CTX, "NFTA_SECMARK_CTX", MNL_TYPE_STRING, Then::None, nullptr, 256}};
constexpr Check kObjCtExpect[] = {NFK_U16(NFTA_CT_EXPECT_L3PROTO), NFK_U8(NFTA_CT_EXPECT_L4PROTO),
                                  NFK_U16(NFTA_CT_EXPECT_DPORT), NFK_U32(NFTA_CT_EXPECT_TIMEOUT),
                                  NFK_U8(NFTA_CT_EXPECT_SIZE)};
constexpr Check kObjSynproxy[] = {NFK_U16(NFTA_SYNPROXY_MSS), NFK_U8(NFTA_SYNPROXY_WSCALE), NFK_U32(NFTA_SYNPROXY_FLAGS)};

struct ObjPolicy {
  uint32_t type;
  const char* name;
  Policy policy;
};
// Every object type libnftnl 1.2.4 parses (it has none for connlimit).
constexpr ObjPolicy kObjPolicies[] = {
    {NFT_OBJECT_COUNTER, "counter", P(kObjCounter)}, {NFT_OBJECT_QUOTA, "quota", P(kObjQuota)},
    {NFT_OBJECT_CT_HELPER, "ct helper", P(kObjCtHelper)}, {NFT_OBJECT_LIMIT, "limit", P(kObjLimit)},
    {NFT_OBJECT_TUNNEL, "tunnel", P(kObjTunnel)}, {NFT_OBJECT_CT_TIMEOUT, "ct timeout", P(kObjCtTimeout)},
    {NFT_OBJECT_SECMARK, "secmark", P(kObjSecmark)}, {NFT_OBJECT_CT_EXPECT, "ct expectation", P(kObjCtExpect)},
    {NFT_OBJECT_SYNPROXY, "synproxy", P(kObjSynproxy)},
};
constexpr Check kObjChecks[] = {NFK_STR(NFTA_OBJ_TABLE), NFK_STR(NFTA_OBJ_NAME), NFK_U64(NFTA_OBJ_HANDLE),
                                NFK_NEST(NFTA_OBJ_DATA), NFK_U32(NFTA_OBJ_USE)};
constexpr Policy kObj = P(kObjChecks);

#undef NFK_U8
#undef NFK_U16
#undef NFK_U32
#undef NFK_U64
#undef NFK_STR
#undef NFK_NULSTR
#undef NFK_NEST

// Where in the message a check is: built into text only for a refusal.
struct Frame {
  const Frame* up;
  const char* name;
  int index = -1;              // an item of a list
  const char* kind = nullptr;  // an expression's name
};

std::string PathOf(const Frame* f) {
  std::vector<const Frame*> chain;
  for (; f != nullptr; f = f->up) chain.push_back(f);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Frame* x = *it;
    if (x->name != nullptr) {
      if (!out.empty()) out.append(" > ");
      out.append(x->name);
    }
    if (x->index >= 0) out.append("[" + std::to_string(x->index) + "]");
    if (x->kind != nullptr) out.append(std::string(" (") + x->kind + ")");
  }
  return out;
}

const char* Wanted(int want) {
  switch (want) {
    case MNL_TYPE_U8: return "a u8 (1 byte)";
    case MNL_TYPE_U16: return "a u16 (2 bytes)";
    case MNL_TYPE_U32: return "a u32 (4 bytes)";
    case MNL_TYPE_U64: return "a u64 (8 bytes)";
    case MNL_TYPE_STRING: return "a string (1 byte or more)";
    case MNL_TYPE_NUL_STRING: return "a NUL-terminated string";
    case MNL_TYPE_NESTED: return "a nest (empty, or 4 bytes or more)";
    default: return "another type";
  }
}

const Check* Find(const Policy& p, uint16_t type) {
  for (size_t i = 0; i < p.count; i++) {
    if (p.checks[i].type == type) return &p.checks[i];
  }
  return nullptr;
}

// One walk of a message answers both questions libnftnl 1.2.4 raises: would it exit() on a type
// check (`ok`, the first failure in `why`), and can it parse what was walked without reading past
// it or crashing (what the walk functions return: names with their NUL, since it strdup()s and
// strcmp()s them; every expression named; every jump or goto verdict with its chain; a dynset's
// statements of kinds it knows). A failed check does not end the walk, so that the second answer
// is whole whatever the first.
struct Walk {
  std::string* why;
  bool ok = true;

  void Fail(const Frame* at, const nlattr* a, int want) {
    if (!ok) return;
    *why = PathOf(at) + " is " + std::to_string(mnl_attr_get_payload_len(a)) + " bytes where libnftnl 1.2.4 wants " +
           Wanted(want) + " (and would exit(): \"nf_tables kernel ABI is broken\")";
    ok = false;
  }
  void Fail(std::string text) {
    if (!ok) return;
    *why = std::move(text);
    ok = false;
  }

  bool Top(const nlmsghdr* nlh, const Policy& p);
  bool Nest(const nlattr* nest, const Policy& p, const Frame* at);
  bool Attr(const nlattr* a, const Check& c, const Frame* up);
  bool Expr(const nlattr* nest, const Frame* at, const char** kind = nullptr);
  bool ExprList(const nlattr* list, const Frame* at, bool statements);
  bool Reg(const nlattr* reg, const Frame* at);
  bool Element(const nlattr* elem, const Frame* at);
};

// Each top-level attribute of a message with its nfgenmsg.
template <typename F>
void EachAttr(const nlmsghdr* nlh, F f) {
  const char* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  for (const nlattr* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
       mnl_attr_ok(a, static_cast<int>(tail - reinterpret_cast<const char*>(a))); a = mnl_attr_next(a)) {
    f(a, mnl_attr_get_type(a));
  }
}

bool Walk::Top(const nlmsghdr* nlh, const Policy& p) {
  if (!HasNfgenmsg(nlh)) return ok;  // the decoders refuse it as truncated
  EachAttr(nlh, [&](const nlattr* a, uint16_t t) {
    if (const Check* c = Find(p, t)) Attr(a, *c, nullptr);
  });
  return ok;
}

bool Walk::Nest(const nlattr* nest, const Policy& p, const Frame* at) {
  bool parses = true;
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, nest) {
    if (const Check* c = Find(p, mnl_attr_get_type(a))) parses = Attr(a, *c, at) && parses;
  }
  return parses;
}

// libnftnl 1.2.4 has an expression of that name (nftnl_expr_alloc finds it).
bool LibnftnlKnows(const char* kind) {
  nftnl_expr* known = nftnl_expr_alloc(kind);
  if (known == nullptr) return false;
  nftnl_expr_free(known);
  return true;
}

bool Walk::Attr(const nlattr* a, const Check& c, const Frame* up) {
  Frame at{up, c.name};
  if (c.want != kAny && mnl_attr_validate(a, static_cast<mnl_attr_data_type>(c.want)) < 0) {
    Fail(&at, a, c.want);
  } else if (c.below != 0 && mnl_attr_get_payload_len(a) >= c.below) {
    Fail(PathOf(&at) + " is " + std::to_string(mnl_attr_get_payload_len(a)) + " bytes where libnftnl 1.2.4 wants fewer than " +
         std::to_string(c.below) + " (and would exit(): \"nf_tables kernel ABI is broken\")");
  }
  switch (c.then) {
    case Then::None: return true;
    case Then::Nest: return Nest(a, *c.policy, &at);
    case Then::Expr: return Expr(a, &at);
    case Then::ExprList: return ExprList(a, &at, false);
    case Then::Statement: {
      const char* kind = nullptr;
      return Expr(a, &at, &kind) && LibnftnlKnows(kind);
    }
    case Then::StatementList: return ExprList(a, &at, true);
    case Then::DataReg: return Reg(a, &at);
    case Then::Concat: {
      // libnftnl keeps the field lengths in an array of NFT_REG32_COUNT: more would overrun it
      // (not an exit, but refused with them).
      int fields = 0, item = 0;
      const nlattr* elem;
      NFK_NESTED_FOR_EACH(elem, a) {
        if (mnl_attr_get_type(elem) != NFTA_LIST_ELEM) continue;
        Frame el{&at, "NFTA_LIST_ELEM", item++};
        const nlattr* f;
        NFK_NESTED_FOR_EACH(f, elem) {
          if (mnl_attr_get_type(f) != NFTA_SET_FIELD_LEN) continue;
          Frame fl{&el, "NFTA_SET_FIELD_LEN"};
          if (mnl_attr_validate(f, MNL_TYPE_U32) < 0) Fail(&fl, f, MNL_TYPE_U32);
          if (++fields > NFT_REG32_COUNT) {
            Fail(PathOf(&fl) + ": more than " + std::to_string(NFT_REG32_COUNT) +
                 " concatenated fields, more than libnftnl 1.2.4 has room for");
            return true;
          }
        }
      }
      return true;
    }
    case Then::ElemList: {
      // libnftnl is handed the expressions of NFTA_LIST_ELEMs (type checks), but anything in the
      // list must be safe to read (whether it parses)
      bool parses = true;
      int item = 0;
      const nlattr* elem;
      NFK_NESTED_FOR_EACH(elem, a) {
        if (mnl_attr_get_type(elem) != NFTA_LIST_ELEM) {
          parses = Element(elem, nullptr) && parses;
          continue;
        }
        Frame el{&at, "NFTA_LIST_ELEM", item++};
        parses = Element(elem, &el) && parses;
      }
      return parses;
    }
  }
  return true;
}

// An attribute of an expression's data that may be a data register. The type checks are made
// where libnftnl parses one (`at`, else none); whatever the attribute, a register whose last
// NFTA_DATA_VERDICT holds a jump or goto must name its chain, since libnftnl strdup()s
// NFTA_VERDICT_CHAIN without looking (one that merely looks like a register only costs a raw
// decode).
bool Walk::Reg(const nlattr* reg, const Frame* at) {
  bool parses = true;
  const nlattr* v;
  NFK_NESTED_FOR_EACH(v, reg) {
    if (mnl_attr_get_type(v) != NFTA_DATA_VERDICT) continue;
    Frame vf{at, "NFTA_DATA_VERDICT"};
    if (at != nullptr && mnl_attr_validate(v, MNL_TYPE_NESTED) < 0) Fail(&vf, v, MNL_TYPE_NESTED);
    const nlattr* code = nullptr;
    const nlattr* chain = nullptr;
    const nlattr* a;
    NFK_NESTED_FOR_EACH(a, v) {
      uint16_t t = mnl_attr_get_type(a);
      if (at != nullptr) {
        if (const Check* c = Find(kVerdict, t)) Attr(a, *c, &vf);
      }
      if (t == NFTA_VERDICT_CODE) code = a;
      else if (t == NFTA_VERDICT_CHAIN) chain = a;
    }
    parses = code != nullptr && mnl_attr_get_payload_len(code) >= sizeof(uint32_t);
    if (parses) {
      int32_t verdict = static_cast<int32_t>(ntohl(mnl_attr_get_u32(code)));
      if (verdict == NFT_JUMP || verdict == NFT_GOTO) parses = chain != nullptr && NameOk(chain);
    }
  }
  return parses;
}

constexpr bool NameBefore(const char* a, const char* b) {
  for (; *a != 0 && *a == *b; a++, b++) {}
  return static_cast<unsigned char>(*a) < static_cast<unsigned char>(*b);
}

constexpr bool Sorted() {
  for (size_t i = 1; i < std::size(kExprPolicies); i++) {
    if (!NameBefore(kExprPolicies[i - 1].name, kExprPolicies[i].name)) return false;
  }
  return true;
}
static_assert(Sorted(), "kExprPolicies is looked up by binary search");

const ExprPolicy* FindExprPolicy(const char* kind) {
  const ExprPolicy* end = std::end(kExprPolicies);
  const ExprPolicy* e = std::lower_bound(std::begin(kExprPolicies), end, kind,
                                         [](const ExprPolicy& x, const char* k) { return std::strcmp(x.name, k) < 0; });
  return e == end || std::strcmp(e->name, kind) != 0 ? nullptr : e;
}

// NFTA_EXPR_NAME and NFTA_EXPR_DATA are checked wherever they are; libnftnl picks the kind by the
// last name and parses the last data with it.
bool Walk::Expr(const nlattr* nest, const Frame* at, const char** kindOut) {
  const nlattr* name = nullptr;
  const nlattr* data = nullptr;
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, nest) {
    uint16_t t = mnl_attr_get_type(a);
    if (t == NFTA_EXPR_NAME) {
      if (mnl_attr_validate(a, MNL_TYPE_STRING) < 0) {
        Frame f{at, "NFTA_EXPR_NAME"};
        Fail(&f, a, MNL_TYPE_STRING);
      }
      name = a;
    } else if (t == NFTA_EXPR_DATA) {
      if (mnl_attr_validate(a, MNL_TYPE_NESTED) < 0) {
        Frame f{at, "NFTA_EXPR_DATA"};
        Fail(&f, a, MNL_TYPE_NESTED);
      }
      data = a;
    }
  }
  const char* kind = AttrStr(name);
  if (kindOut != nullptr) *kindOut = kind;
  bool parses = kind != nullptr;
  if (data == nullptr) return parses;
  const ExprPolicy* e = kind != nullptr ? FindExprPolicy(kind) : nullptr;
  bool dynset = e != nullptr && std::strcmp(e->name, "dynset") == 0;
  Frame k{at, nullptr, -1, e != nullptr ? e->name : nullptr};
  // (a dynset's last NFTA_DYNSET_EXPR, else its last NFTA_DYNSET_EXPRESSIONS, is what libnftnl parses)
  int statementSeen = 0;  // 2: an NFTA_DYNSET_EXPR, 1: an NFTA_DYNSET_EXPRESSIONS
  bool statement = true, statements = true;
  NFK_NESTED_FOR_EACH(a, data) {
    uint16_t t = mnl_attr_get_type(a);
    const Check* c = e != nullptr ? Find(e->policy, t) : nullptr;
    if (c != nullptr && c->then == Then::DataReg) {
      parses = Attr(a, *c, &k) && parses;
      continue;
    }
    if (c != nullptr) {
      bool p = Attr(a, *c, &k);
      if (dynset && t == NFTA_DYNSET_EXPR) statement = p, statementSeen = 2;
      else if (dynset && t == NFTA_DYNSET_EXPRESSIONS) statements = p, statementSeen = std::max(statementSeen, 1);
    }
    parses = Reg(a, nullptr) && parses;
  }
  if (statementSeen == 2) parses = parses && statement;
  else if (statementSeen == 1) parses = parses && statements;
  return parses;
}

bool Walk::ExprList(const nlattr* list, const Frame* at, bool statements) {
  bool parses = true;
  int item = 0;
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, list) {
    if (mnl_attr_get_type(a) != NFTA_LIST_ELEM) {
      if (statements) parses = false;
      continue;
    }
    Frame el{at, nullptr, item++};
    const char* kind = nullptr;
    bool p = Expr(a, &el, &kind);
    parses = p && (!statements || LibnftnlKnows(kind)) && parses;
  }
  return parses;
}

// One element of a set element list: the type checks of its expressions where libnftnl parses them
// (`at`, else none), and whether libnftnl can parse the element: types it has room for, an object
// reference with its NUL, verdicts with their chains, expressions it can parse (the last of each).
bool Walk::Element(const nlattr* elem, const Frame* at) {
  bool parses = true, expr = true, exprs = true;
  const nlattr* objref = nullptr;
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, elem) {
    uint16_t t = mnl_attr_get_type(a);
    // libnftnl 1.2.4's element callback bounds the attribute type by NFTA_SET_MAX (18) but stores
    // it in a table of NFTA_SET_ELEM_MAX + 1 (12) on its caller's stack: types 12-18 overwrite that
    // frame's saved registers (native/fuzz/corpus/crash-d9d4...). No kernel up to 6.18 sends such a
    // type; if one ever does, the message is refused.
    if (t > kLibnftnlSetElemMax) parses = false;
    if (t == NFTA_SET_ELEM_OBJREF) objref = a;
    parses = Reg(a, nullptr) && parses;
    if (t != NFTA_SET_ELEM_EXPR && t != NFTA_SET_ELEM_EXPRESSIONS) continue;
    bool p;
    if (at != nullptr) {
      p = Attr(a, *Find(kElem, t), at);
    } else {
      std::string unused;
      Walk quiet{&unused};
      p = t == NFTA_SET_ELEM_EXPR ? quiet.Expr(a, nullptr) : quiet.ExprList(a, nullptr, false);
    }
    (t == NFTA_SET_ELEM_EXPR ? expr : exprs) = p;
  }
  return parses && NameOk(objref) && expr && exprs;
}

// The one walk of a rule's, a set's or a set element message's top-level attributes: each one
// `policy` checks is type-checked with its nests (`abiOk`, `why`), the last of each type is kept
// in `at`, and libnftnl can parse the message (`parses`) when its `names` are NUL-terminated and
// the last of each of its `nested` attributes (what libnftnl parses of it: the expressions, the
// elements) parses.
template <typename R, size_t Names, size_t Nested>
void CheckTop(const nlmsghdr* nlh, const Policy& policy, const uint16_t (&names)[Names], const uint16_t (&nested)[Nested],
              R* r) {
  constexpr size_t kMax = std::extent_v<decltype(R::at)> - 1;
  Walk w{&r->why};
  if (!HasNfgenmsg(nlh)) {
    r->parses = false;
    return;
  }
  bool nestedOk[Nested];
  std::fill(std::begin(nestedOk), std::end(nestedOk), true);
  EachAttr(nlh, [&](const nlattr* a, uint16_t t) {
    if (t <= kMax) r->at[t] = a;
    const Check* c = Find(policy, t);
    if (c == nullptr) return;
    bool p = w.Attr(a, *c, nullptr);
    for (size_t i = 0; i < Nested; i++) {
      if (t == nested[i]) nestedOk[i] = p;
    }
  });
  r->abiOk = w.ok;
  bool parses = true;
  for (uint16_t n : names) parses = parses && NameOk(r->at[n]);
  for (bool ok : nestedOk) parses = parses && ok;
  r->parses = parses;
}

}  // namespace

void CheckRule(const nlmsghdr* nlh, RuleCheck* r) {
  static constexpr uint16_t kNames[] = {NFTA_RULE_TABLE, NFTA_RULE_CHAIN};
  static constexpr uint16_t kNested[] = {NFTA_RULE_EXPRESSIONS};
  CheckTop(nlh, kRule, kNames, kNested, r);
}

void CheckSet(const nlmsghdr* nlh, SetCheck* r) {
  static constexpr uint16_t kNames[] = {NFTA_SET_TABLE, NFTA_SET_NAME};
  static constexpr uint16_t kNested[] = {NFTA_SET_EXPR, NFTA_SET_EXPRESSIONS};
  CheckTop(nlh, kSet, kNames, kNested, r);
}

void CheckSetElems(const nlmsghdr* nlh, SetElemsCheck* r) {
  static constexpr uint16_t kNames[] = {NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET};
  static constexpr uint16_t kNested[] = {NFTA_SET_ELEM_LIST_ELEMENTS};
  CheckTop(nlh, kElemList, kNames, kNested, r);
}

bool ChainAbiOk(const nlmsghdr* nlh, std::string* why) { return Walk{why}.Top(nlh, kChain); }

bool ObjAbiOk(const nlmsghdr* nlh, std::string* why) {
  Walk w{why};
  if (!w.Top(nlh, kObj) || !HasNfgenmsg(nlh)) return w.ok;
  // libnftnl picks the data's parser by the last NFTA_OBJ_TYPE, read as a u32 whatever its length
  AttrTable t(NFTA_OBJ_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  if (t.at[NFTA_OBJ_TYPE] == nullptr || t.at[NFTA_OBJ_DATA] == nullptr) return true;
  uint32_t type = 0;
  if (!AttrU32(t.at[NFTA_OBJ_TYPE], &type)) {
    *why = "NFTA_OBJ_TYPE is " + std::to_string(mnl_attr_get_payload_len(t.at[NFTA_OBJ_TYPE])) +
           " bytes where libnftnl 1.2.4 reads a u32 (4 bytes)";
    return false;
  }
  for (const ObjPolicy& o : kObjPolicies) {
    if (o.type != type) continue;
    Frame data{nullptr, "NFTA_OBJ_DATA", -1, o.name};
    w.Nest(t.at[NFTA_OBJ_DATA], o.policy, &data);
    if (!w.ok) return false;
    if (type != NFT_OBJECT_CT_TIMEOUT) return true;
    // A ct timeout's policy: u32 timeouts of types 1 to the number of states libnftnl 1.2.4 knows
    // for the protocol (NFTA_CT_TIMEOUT_L4PROTO): 11 for TCP, 2 for UDP, none for others.
    AttrTable d(NFTA_CT_TIMEOUT_MAX);
    mnl_attr_parse_nested(t.at[NFTA_OBJ_DATA], CollectAttr, &d);
    const nlattr* l4 = d.at[NFTA_CT_TIMEOUT_L4PROTO];
    if (l4 == nullptr || d.at[NFTA_CT_TIMEOUT_DATA] == nullptr) return true;
    uint8_t proto = *static_cast<const uint8_t*>(mnl_attr_get_payload(l4));
    uint16_t states = proto == IPPROTO_TCP ? 11 : proto == IPPROTO_UDP ? 2 : 0;
    Frame policy{&data, "NFTA_CT_TIMEOUT_DATA"};
    const nlattr* a;
    NFK_NESTED_FOR_EACH(a, d.at[NFTA_CT_TIMEOUT_DATA]) {
      uint16_t st = mnl_attr_get_type(a);
      if (st == 0 || st > states) continue;
      Frame at{&policy, nullptr, st};
      if (mnl_attr_validate(a, MNL_TYPE_U32) < 0) {
        w.Fail(&at, a, MNL_TYPE_U32);
        return false;
      }
    }
    return true;
  }
  return true;
}

bool ExprNestsAbiOk(const std::vector<const nlattr*>& nests, const char* where, std::string* why, bool* parses) {
  Walk w{why};
  Frame top{nullptr, where};
  bool p = true;
  for (size_t i = 0; i < nests.size(); i++) {
    Frame el{&top, nullptr, static_cast<int>(i)};
    p = w.Expr(nests[i], &el) && p;
  }
  if (parses != nullptr) *parses = p;
  return w.ok;
}

}  // namespace nfk
