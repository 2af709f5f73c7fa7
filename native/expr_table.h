// One table describes every expression kind the IR models: for each kind the
// libnftnl attribute (NFTNL_EXPR_*, which maps 1:1 to the kernel's NFTA_*
// attribute of that expression) behind each IR field, and how the value is
// typed. decode.cc reads expressions through it and encode.cc writes them
// through it, so the two directions cannot drift apart. The table is
// generated (expr_schema.gen.h, `npm run gen:schema`) from EXPR_SCHEMA in
// src/netlink/expr.ts, which the TypeScript types and validator come from
// too: adding a kind is one entry there. Kinds that are not in the table
// travel as {kind: "unknown", name, data} with the raw NFTA_EXPR_DATA.
#pragma once

#include <cstdint>
#include <cstddef>
#include <vector>

#include "attr.h"

namespace nfk {

// A named value of a kernel enum. Unknown values pass through as numbers.
struct EnumName {
  int64_t value;
  const char* name;
};

struct EnumMap {
  const EnumName* names;
  size_t count;
};

enum class FieldType {
  U8,
  U16,
  U32,
  U64,
  I32,   // u32 on the wire, signed in meaning (verdict codes)
  Str,
  // A data register value (union nftnl_data_reg): at most NFT_DATA_VALUE_MAXLEN
  // (64) bytes. libnftnl 1.2.4 memcpy()s these into a fixed 64-byte array
  // without checking the length, so the encoder must.
  Data,
  // A heap blob handed to libnftnl (xt match/target info). libnftnl 1.2.4
  // takes ownership of the pointer and free()s it with the expression.
  Blob,
  Enum,  // u32 on the wire, a name from `map` in the IR
};

// NFT_DATA_VALUE_MAXLEN
constexpr size_t kMaxDataLen = 64;

struct Field {
  const char* js;    // IR field name
  uint16_t attr;     // NFTNL_EXPR_* attribute
  FieldType type;
  const EnumMap* map;  // only for Enum
  size_t max;          // Str, Data, Blob: most bytes (0: no bound beyond the type's)
};

struct ExprKind {
  const char* name;  // kernel expression name (NFTA_EXPR_NAME)
  const Field* fields;
  size_t count;
};

// Returns the table entry for a kernel expression name, or nullptr.
const ExprKind* FindExprKind(const char* name);
// False when the raw expression has attributes the IR does not model (then it decodes as unknown).
bool ModelsRawExpr(const ExprKind& kind, const RawExpr& raw);

// A dynset's own expressions (NFTA_DYNSET_EXPR or the items of NFTA_DYNSET_EXPRESSIONS); none for other kinds.
std::vector<const nlattr*> DynsetExprNests(const RawExpr& raw);

// Enum helpers shared by decode and encode.
const char* EnumToName(const EnumMap& map, int64_t value);
bool EnumFromName(const EnumMap& map, const char* name, int64_t* value);

// Maps used outside expressions.
extern const EnumMap kFamilyMap;     // NFPROTO_*
extern const EnumMap kInetHookMap;   // NF_INET_* hooks
extern const EnumMap kNetdevHookMap; // NF_NETDEV_* hooks
extern const EnumMap kPolicyMap;     // NF_ACCEPT / NF_DROP
extern const EnumMap kVerdictMap;    // NF_* and NFT_* verdict codes

}  // namespace nfk
