#include "expr_table.h"

#include <cstdio>
#include <cstring>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <libnftnl/expr.h>

namespace nfk {

#define N(arr) (sizeof(arr) / sizeof((arr)[0]))
#define MAP(arr) {arr, N(arr)}

// --- enums -----------------------------------------------------------------

static const EnumName kFamilyNames[] = {
    {NFPROTO_INET, "inet"},     {NFPROTO_IPV4, "ip"},    {NFPROTO_ARP, "arp"},
    {NFPROTO_NETDEV, "netdev"}, {NFPROTO_BRIDGE, "bridge"}, {NFPROTO_IPV6, "ip6"},
};
const EnumMap kFamilyMap = MAP(kFamilyNames);

static const EnumName kInetHookNames[] = {
    {NF_INET_PRE_ROUTING, "prerouting"}, {NF_INET_LOCAL_IN, "input"},
    {NF_INET_FORWARD, "forward"},        {NF_INET_LOCAL_OUT, "output"},
    {NF_INET_POST_ROUTING, "postrouting"}, {NF_INET_INGRESS, "ingress"},
};
const EnumMap kInetHookMap = MAP(kInetHookNames);

static const EnumName kNetdevHookNames[] = {
    {NF_NETDEV_INGRESS, "ingress"}, {NF_NETDEV_EGRESS, "egress"},
};
const EnumMap kNetdevHookMap = MAP(kNetdevHookNames);

static const EnumName kPolicyNames[] = {{NF_DROP, "drop"}, {NF_ACCEPT, "accept"}};
const EnumMap kPolicyMap = MAP(kPolicyNames);

static const EnumName kVerdictNames[] = {
    {NF_DROP, "drop"},         {NF_ACCEPT, "accept"},  {NF_STOLEN, "stolen"},
    {NF_QUEUE, "queue"},       {NFT_CONTINUE, "continue"}, {NFT_BREAK, "break"},
    {NFT_JUMP, "jump"},        {NFT_GOTO, "goto"},     {NFT_RETURN, "return"},
};
const EnumMap kVerdictMap = MAP(kVerdictNames);

static const EnumName kPayloadBaseNames[] = {
    {NFT_PAYLOAD_LL_HEADER, "ll"}, {NFT_PAYLOAD_NETWORK_HEADER, "network"},
    {NFT_PAYLOAD_TRANSPORT_HEADER, "transport"}, {NFT_PAYLOAD_INNER_HEADER, "inner"},
};
static const EnumMap kPayloadBaseMap = MAP(kPayloadBaseNames);

static const EnumName kCmpOpNames[] = {
    {NFT_CMP_EQ, "eq"}, {NFT_CMP_NEQ, "neq"}, {NFT_CMP_LT, "lt"},
    {NFT_CMP_LTE, "lte"}, {NFT_CMP_GT, "gt"}, {NFT_CMP_GTE, "gte"},
};
static const EnumMap kCmpOpMap = MAP(kCmpOpNames);

static const EnumName kRangeOpNames[] = {{NFT_RANGE_EQ, "eq"}, {NFT_RANGE_NEQ, "neq"}};
static const EnumMap kRangeOpMap = MAP(kRangeOpNames);

static const EnumName kBitwiseOpNames[] = {
    {NFT_BITWISE_MASK_XOR, "bool"}, {NFT_BITWISE_LSHIFT, "lshift"},
    {NFT_BITWISE_RSHIFT, "rshift"},
};
static const EnumMap kBitwiseOpMap = MAP(kBitwiseOpNames);

static const EnumName kByteorderOpNames[] = {
    {NFT_BYTEORDER_NTOH, "ntoh"}, {NFT_BYTEORDER_HTON, "hton"},
};
static const EnumMap kByteorderOpMap = MAP(kByteorderOpNames);

// Names as nft spells the keys.
static const EnumName kMetaKeyNames[] = {
    {NFT_META_LEN, "len"},           {NFT_META_PROTOCOL, "protocol"},
    {NFT_META_PRIORITY, "priority"}, {NFT_META_MARK, "mark"},
    {NFT_META_IIF, "iif"},           {NFT_META_OIF, "oif"},
    {NFT_META_IIFNAME, "iifname"},   {NFT_META_OIFNAME, "oifname"},
    {NFT_META_IIFTYPE, "iiftype"},   {NFT_META_OIFTYPE, "oiftype"},
    {NFT_META_SKUID, "skuid"},       {NFT_META_SKGID, "skgid"},
    {NFT_META_NFTRACE, "nftrace"},   {NFT_META_RTCLASSID, "rtclassid"},
    {NFT_META_SECMARK, "secmark"},   {NFT_META_NFPROTO, "nfproto"},
    {NFT_META_L4PROTO, "l4proto"},   {NFT_META_BRI_IIFNAME, "ibrname"},
    {NFT_META_BRI_OIFNAME, "obrname"}, {NFT_META_PKTTYPE, "pkttype"},
    {NFT_META_CPU, "cpu"},           {NFT_META_IIFGROUP, "iifgroup"},
    {NFT_META_OIFGROUP, "oifgroup"}, {NFT_META_CGROUP, "cgroup"},
    {NFT_META_PRANDOM, "random"},    {NFT_META_SECPATH, "ipsec"},
    {NFT_META_IIFKIND, "iifkind"},   {NFT_META_OIFKIND, "oifkind"},
    {NFT_META_BRI_IIFPVID, "ibrpvid"}, {NFT_META_BRI_IIFVPROTO, "ibrvproto"},
    {NFT_META_TIME_NS, "time"},      {NFT_META_TIME_DAY, "day"},
    {NFT_META_TIME_HOUR, "hour"},    {NFT_META_SDIF, "sdif"},
    {NFT_META_SDIFNAME, "sdifname"},
};
static const EnumMap kMetaKeyMap = MAP(kMetaKeyNames);

static const EnumName kCtKeyNames[] = {
    {NFT_CT_STATE, "state"},         {NFT_CT_DIRECTION, "direction"},
    {NFT_CT_STATUS, "status"},       {NFT_CT_MARK, "mark"},
    {NFT_CT_SECMARK, "secmark"},     {NFT_CT_EXPIRATION, "expiration"},
    {NFT_CT_HELPER, "helper"},       {NFT_CT_L3PROTOCOL, "l3proto"},
    {NFT_CT_SRC, "saddr"},           {NFT_CT_DST, "daddr"},
    {NFT_CT_PROTOCOL, "protocol"},   {NFT_CT_PROTO_SRC, "proto-src"},
    {NFT_CT_PROTO_DST, "proto-dst"}, {NFT_CT_LABELS, "label"},
    {NFT_CT_PKTS, "packets"},        {NFT_CT_BYTES, "bytes"},
    {NFT_CT_AVGPKT, "avgpkt"},       {NFT_CT_ZONE, "zone"},
    {NFT_CT_EVENTMASK, "event"},     {NFT_CT_SRC_IP, "ip saddr"},
    {NFT_CT_DST_IP, "ip daddr"},     {NFT_CT_SRC_IP6, "ip6 saddr"},
    {NFT_CT_DST_IP6, "ip6 daddr"},   {NFT_CT_ID, "id"},
};
static const EnumMap kCtKeyMap = MAP(kCtKeyNames);

static const EnumName kNatTypeNames[] = {{NFT_NAT_SNAT, "snat"}, {NFT_NAT_DNAT, "dnat"}};
static const EnumMap kNatTypeMap = MAP(kNatTypeNames);

static const EnumName kFibResultNames[] = {
    {NFT_FIB_RESULT_OIF, "oif"}, {NFT_FIB_RESULT_OIFNAME, "oifname"},
    {NFT_FIB_RESULT_ADDRTYPE, "type"},
};
static const EnumMap kFibResultMap = MAP(kFibResultNames);

static const EnumName kRtKeyNames[] = {
    {NFT_RT_CLASSID, "classid"}, {NFT_RT_NEXTHOP4, "nexthop4"},
    {NFT_RT_NEXTHOP6, "nexthop6"}, {NFT_RT_TCPMSS, "mtu"}, {NFT_RT_XFRM, "ipsec"},
};
static const EnumMap kRtKeyMap = MAP(kRtKeyNames);

// --- expression kinds ------------------------------------------------------

using T = FieldType;

static const Field kPayload[] = {
    {"dreg", NFTNL_EXPR_PAYLOAD_DREG, T::U32, nullptr},
    {"base", NFTNL_EXPR_PAYLOAD_BASE, T::Enum, &kPayloadBaseMap},
    {"offset", NFTNL_EXPR_PAYLOAD_OFFSET, T::U32, nullptr},
    {"len", NFTNL_EXPR_PAYLOAD_LEN, T::U32, nullptr},
    {"sreg", NFTNL_EXPR_PAYLOAD_SREG, T::U32, nullptr},
    {"csumType", NFTNL_EXPR_PAYLOAD_CSUM_TYPE, T::U32, nullptr},
    {"csumOffset", NFTNL_EXPR_PAYLOAD_CSUM_OFFSET, T::U32, nullptr},
    {"csumFlags", NFTNL_EXPR_PAYLOAD_FLAGS, T::U32, nullptr},
};
static const Field kCmp[] = {
    {"sreg", NFTNL_EXPR_CMP_SREG, T::U32, nullptr},
    {"op", NFTNL_EXPR_CMP_OP, T::Enum, &kCmpOpMap},
    {"data", NFTNL_EXPR_CMP_DATA, T::Data, nullptr},
};
static const Field kRange[] = {
    {"sreg", NFTNL_EXPR_RANGE_SREG, T::U32, nullptr},
    {"op", NFTNL_EXPR_RANGE_OP, T::Enum, &kRangeOpMap},
    {"from", NFTNL_EXPR_RANGE_FROM_DATA, T::Data, nullptr},
    {"to", NFTNL_EXPR_RANGE_TO_DATA, T::Data, nullptr},
};
static const Field kBitwise[] = {
    {"sreg", NFTNL_EXPR_BITWISE_SREG, T::U32, nullptr},
    {"dreg", NFTNL_EXPR_BITWISE_DREG, T::U32, nullptr},
    {"len", NFTNL_EXPR_BITWISE_LEN, T::U32, nullptr},
    {"op", NFTNL_EXPR_BITWISE_OP, T::Enum, &kBitwiseOpMap},
    {"mask", NFTNL_EXPR_BITWISE_MASK, T::Data, nullptr},
    {"xor", NFTNL_EXPR_BITWISE_XOR, T::Data, nullptr},
    {"data", NFTNL_EXPR_BITWISE_DATA, T::Data, nullptr},
};
static const Field kByteorder[] = {
    {"sreg", NFTNL_EXPR_BYTEORDER_SREG, T::U32, nullptr},
    {"dreg", NFTNL_EXPR_BYTEORDER_DREG, T::U32, nullptr},
    {"op", NFTNL_EXPR_BYTEORDER_OP, T::Enum, &kByteorderOpMap},
    {"len", NFTNL_EXPR_BYTEORDER_LEN, T::U32, nullptr},
    {"size", NFTNL_EXPR_BYTEORDER_SIZE, T::U32, nullptr},
};
static const Field kMeta[] = {
    {"key", NFTNL_EXPR_META_KEY, T::Enum, &kMetaKeyMap},
    {"dreg", NFTNL_EXPR_META_DREG, T::U32, nullptr},
    {"sreg", NFTNL_EXPR_META_SREG, T::U32, nullptr},
};
static const Field kCt[] = {
    {"key", NFTNL_EXPR_CT_KEY, T::Enum, &kCtKeyMap},
    {"dreg", NFTNL_EXPR_CT_DREG, T::U32, nullptr},
    {"sreg", NFTNL_EXPR_CT_SREG, T::U32, nullptr},
    {"dir", NFTNL_EXPR_CT_DIR, T::U8, nullptr},
};
static const Field kImmediate[] = {
    {"dreg", NFTNL_EXPR_IMM_DREG, T::U32, nullptr},
    {"data", NFTNL_EXPR_IMM_DATA, T::Data, nullptr},
    {"verdict", NFTNL_EXPR_IMM_VERDICT, T::Enum, &kVerdictMap},
    {"chain", NFTNL_EXPR_IMM_CHAIN, T::Str, nullptr},
};
static const Field kLookup[] = {
    {"sreg", NFTNL_EXPR_LOOKUP_SREG, T::U32, nullptr},
    {"dreg", NFTNL_EXPR_LOOKUP_DREG, T::U32, nullptr},
    {"set", NFTNL_EXPR_LOOKUP_SET, T::Str, nullptr},
    {"setId", NFTNL_EXPR_LOOKUP_SET_ID, T::U32, nullptr},
    {"flags", NFTNL_EXPR_LOOKUP_FLAGS, T::U32, nullptr},
};
static const Field kNat[] = {
    {"type", NFTNL_EXPR_NAT_TYPE, T::Enum, &kNatTypeMap},
    {"family", NFTNL_EXPR_NAT_FAMILY, T::Enum, &kFamilyMap},
    {"regAddrMin", NFTNL_EXPR_NAT_REG_ADDR_MIN, T::U32, nullptr},
    {"regAddrMax", NFTNL_EXPR_NAT_REG_ADDR_MAX, T::U32, nullptr},
    {"regProtoMin", NFTNL_EXPR_NAT_REG_PROTO_MIN, T::U32, nullptr},
    {"regProtoMax", NFTNL_EXPR_NAT_REG_PROTO_MAX, T::U32, nullptr},
    {"flags", NFTNL_EXPR_NAT_FLAGS, T::U32, nullptr},
};
static const Field kMasq[] = {
    {"flags", NFTNL_EXPR_MASQ_FLAGS, T::U32, nullptr},
    {"regProtoMin", NFTNL_EXPR_MASQ_REG_PROTO_MIN, T::U32, nullptr},
    {"regProtoMax", NFTNL_EXPR_MASQ_REG_PROTO_MAX, T::U32, nullptr},
};
static const Field kRedir[] = {
    {"flags", NFTNL_EXPR_REDIR_FLAGS, T::U32, nullptr},
    {"regProtoMin", NFTNL_EXPR_REDIR_REG_PROTO_MIN, T::U32, nullptr},
    {"regProtoMax", NFTNL_EXPR_REDIR_REG_PROTO_MAX, T::U32, nullptr},
};
static const Field kCounter[] = {
    {"packets", NFTNL_EXPR_CTR_PACKETS, T::U64, nullptr},
    {"bytes", NFTNL_EXPR_CTR_BYTES, T::U64, nullptr},
};
static const Field kLimit[] = {
    {"rate", NFTNL_EXPR_LIMIT_RATE, T::U64, nullptr},
    {"unit", NFTNL_EXPR_LIMIT_UNIT, T::U64, nullptr},
    {"burst", NFTNL_EXPR_LIMIT_BURST, T::U32, nullptr},
    {"type", NFTNL_EXPR_LIMIT_TYPE, T::U32, nullptr},
    {"flags", NFTNL_EXPR_LIMIT_FLAGS, T::U32, nullptr},
};
static const Field kFib[] = {
    {"result", NFTNL_EXPR_FIB_RESULT, T::Enum, &kFibResultMap},
    {"flags", NFTNL_EXPR_FIB_FLAGS, T::U32, nullptr},
    {"dreg", NFTNL_EXPR_FIB_DREG, T::U32, nullptr},
};
static const Field kMatch[] = {
    {"name", NFTNL_EXPR_MT_NAME, T::Str, nullptr},
    {"rev", NFTNL_EXPR_MT_REV, T::U32, nullptr},
    {"info", NFTNL_EXPR_MT_INFO, T::Blob, nullptr},
};
static const Field kTarget[] = {
    {"name", NFTNL_EXPR_TG_NAME, T::Str, nullptr},
    {"rev", NFTNL_EXPR_TG_REV, T::U32, nullptr},
    {"info", NFTNL_EXPR_TG_INFO, T::Blob, nullptr},
};
static const Field kLog[] = {
    {"prefix", NFTNL_EXPR_LOG_PREFIX, T::Str, nullptr},
    {"group", NFTNL_EXPR_LOG_GROUP, T::U16, nullptr},
    {"snaplen", NFTNL_EXPR_LOG_SNAPLEN, T::U32, nullptr},
    {"qthreshold", NFTNL_EXPR_LOG_QTHRESHOLD, T::U16, nullptr},
    {"level", NFTNL_EXPR_LOG_LEVEL, T::U32, nullptr},
    {"flags", NFTNL_EXPR_LOG_FLAGS, T::U32, nullptr},
};
static const Field kReject[] = {
    {"type", NFTNL_EXPR_REJECT_TYPE, T::U32, nullptr},
    {"code", NFTNL_EXPR_REJECT_CODE, T::U8, nullptr},
};
static const Field kQuota[] = {
    {"bytes", NFTNL_EXPR_QUOTA_BYTES, T::U64, nullptr},
    {"flags", NFTNL_EXPR_QUOTA_FLAGS, T::U32, nullptr},
    {"consumed", NFTNL_EXPR_QUOTA_CONSUMED, T::U64, nullptr},
};
static const Field kRt[] = {
    {"key", NFTNL_EXPR_RT_KEY, T::Enum, &kRtKeyMap},
    {"dreg", NFTNL_EXPR_RT_DREG, T::U32, nullptr},
};
static const Field kNumgen[] = {
    {"dreg", NFTNL_EXPR_NG_DREG, T::U32, nullptr},
    {"modulus", NFTNL_EXPR_NG_MODULUS, T::U32, nullptr},
    {"type", NFTNL_EXPR_NG_TYPE, T::U32, nullptr},
    {"offset", NFTNL_EXPR_NG_OFFSET, T::U32, nullptr},
};
static const Field kNone[] = {{nullptr, 0, T::U32, nullptr}};

static const ExprKind kKinds[] = {
    {"payload", kPayload, N(kPayload)},       {"cmp", kCmp, N(kCmp)},
    {"range", kRange, N(kRange)},             {"bitwise", kBitwise, N(kBitwise)},
    {"byteorder", kByteorder, N(kByteorder)}, {"meta", kMeta, N(kMeta)},
    {"ct", kCt, N(kCt)},                      {"immediate", kImmediate, N(kImmediate)},
    {"lookup", kLookup, N(kLookup)},          {"nat", kNat, N(kNat)},
    {"masq", kMasq, N(kMasq)},                {"redir", kRedir, N(kRedir)},
    {"counter", kCounter, N(kCounter)},       {"limit", kLimit, N(kLimit)},
    {"fib", kFib, N(kFib)},                   {"match", kMatch, N(kMatch)},
    {"target", kTarget, N(kTarget)},          {"log", kLog, N(kLog)},
    {"reject", kReject, N(kReject)},          {"quota", kQuota, N(kQuota)},
    {"rt", kRt, N(kRt)},                      {"numgen", kNumgen, N(kNumgen)},
    {"notrack", kNone, 0},
};

const ExprKind* FindExprKind(const char* name) {
  for (const auto& k : kKinds)
    if (std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

const char* EnumToName(const EnumMap& map, int64_t value) {
  for (size_t i = 0; i < map.count; i++)
    if (map.names[i].value == value) return map.names[i].name;
  return nullptr;
}

bool EnumFromName(const EnumMap& map, const char* name, int64_t* value) {
  for (size_t i = 0; i < map.count; i++) {
    if (std::strcmp(map.names[i].name, name) == 0) {
      *value = map.names[i].value;
      return true;
    }
  }
  return false;
}

}  // namespace nfk
