// The expression table's lookups. The table itself (every enum's names and
// every expression kind's fields) is generated from the TypeScript schema
// into expr_schema.gen.h; see expr_table.h.
#include "expr_table.h"

#include <cstdio>  // libnftnl/expr.h uses FILE without including it
#include <cstring>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <libnftnl/expr.h>

namespace nfk {

#include "expr_schema.gen.h"

std::vector<const nlattr*> DynsetExprNests(const RawExpr& raw) {
  if (raw.name != "dynset" || raw.data == nullptr) return {};
  AttrTable t(NFTA_DYNSET_MAX);
  if (mnl_attr_parse_nested(raw.data, CollectAttr, &t) < 0) return {};
  return ExprNests(t.at[NFTA_DYNSET_EXPR], t.at[NFTA_DYNSET_EXPRESSIONS]);
}

bool ModelsRawExpr(const ExprKind& kind, const RawExpr& raw) {
  // a dynset's own expressions are in the IR when each is a kind it models (and no dynset)
  if (std::strcmp(kind.name, "dynset") != 0 || raw.data == nullptr) return true;
  AttrTable t(NFTA_DYNSET_MAX);
  if (mnl_attr_parse_nested(raw.data, CollectAttr, &t) < 0) return false;
  for (const nlattr* n : ExprNests(t.at[NFTA_DYNSET_EXPR], t.at[NFTA_DYNSET_EXPRESSIONS])) {
    AttrTable e(NFTA_EXPR_MAX);
    if (mnl_attr_parse_nested(n, CollectAttr, &e) < 0) return false;
    const char* name = AttrStr(e.at[NFTA_EXPR_NAME]);
    if (name == nullptr || std::strcmp(name, "dynset") == 0 || FindExprKind(name) == nullptr) return false;
  }
  return true;
}

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
