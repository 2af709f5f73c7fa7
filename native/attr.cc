#include "attr.h"
#include <algorithm>
#include <cstring>

#include <arpa/inet.h>
#include <endian.h>
#include <libnftnl/expr.h>
#include <linux/netfilter/nf_tables.h>
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

// A data register holding a jump or goto verdict must name its chain:
// libnftnl strdup()s NFTA_VERDICT_CHAIN without checking it is there. Any
// nested attribute of an expression may be a register, so all are checked;
// one that merely looks like a register costs nothing but a raw decode.
bool VerdictsOk(const nlattr* data) {
  const nlattr* reg;
  NFK_NESTED_FOR_EACH(reg, data) {
    if (mnl_attr_get_payload_len(reg) < MNL_ATTR_HDRLEN) continue;
    AttrTable d(NFTA_DATA_MAX);
    if (mnl_attr_parse_nested(reg, CollectAttr, &d) < 0 || d.at[NFTA_DATA_VERDICT] == nullptr) continue;
    AttrTable v(NFTA_VERDICT_MAX);
    if (mnl_attr_parse_nested(d.at[NFTA_DATA_VERDICT], CollectAttr, &v) < 0) return false;
    if (v.at[NFTA_VERDICT_CODE] == nullptr || mnl_attr_get_payload_len(v.at[NFTA_VERDICT_CODE]) < 4) return false;
    int32_t code = static_cast<int32_t>(ntohl(mnl_attr_get_u32(v.at[NFTA_VERDICT_CODE])));
    if ((code == NFT_JUMP || code == NFT_GOTO) &&
        (v.at[NFTA_VERDICT_CHAIN] == nullptr || !NameOk(v.at[NFTA_VERDICT_CHAIN]))) {
      return false;
    }
  }
  return true;
}

// libnftnl 1.2.4 parses a dynset's name before its statements, and when a statement fails (an
// attribute of the list that is no NFTA_LIST_ELEM, an expression libnftnl does not know) it frees
// the dynset without its name: a leak for each such message. A statement libnftnl can parse is
// one with a name it has an expression for (nftnl_expr_alloc), as the kernel always sends.
static bool ExprOkNamed(const nlattr* expr, const char** name);

static bool DynsetStatementOk(const nlattr* expr) {
  const char* name = nullptr;
  if (!ExprOkNamed(expr, &name)) return false;
  nftnl_expr* known = nftnl_expr_alloc(name);
  if (known == nullptr) return false;
  nftnl_expr_free(known);
  return true;
}

static bool DynsetStatementsOk(const nlattr* data) {
  AttrTable d(NFTA_DYNSET_MAX);
  if (mnl_attr_parse_nested(data, CollectAttr, &d) < 0) return false;
  if (d.at[NFTA_DYNSET_EXPR] != nullptr) return DynsetStatementOk(d.at[NFTA_DYNSET_EXPR]);
  if (d.at[NFTA_DYNSET_EXPRESSIONS] == nullptr) return true;
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, d.at[NFTA_DYNSET_EXPRESSIONS]) {
    if (mnl_attr_get_type(a) != NFTA_LIST_ELEM || !DynsetStatementOk(a)) return false;
  }
  return true;
}

// ExprOk, also giving the expression's name (valid when it is ok): the nest is parsed once.
static bool ExprOkNamed(const nlattr* expr, const char** name) {
  AttrTable t(NFTA_EXPR_MAX);
  if (mnl_attr_parse_nested(expr, CollectAttr, &t) < 0) return false;
  if (t.at[NFTA_EXPR_NAME] == nullptr || !NameOk(t.at[NFTA_EXPR_NAME])) return false;
  *name = mnl_attr_get_str(t.at[NFTA_EXPR_NAME]);
  if (t.at[NFTA_EXPR_DATA] == nullptr) return true;
  if (!VerdictsOk(t.at[NFTA_EXPR_DATA])) return false;
  return std::strcmp(*name, "dynset") != 0 || DynsetStatementsOk(t.at[NFTA_EXPR_DATA]);
}

bool ExprOk(const nlattr* expr) {
  const char* name = nullptr;
  return ExprOkNamed(expr, &name);
}

bool ExprListOk(const nlattr* list) {
  if (list == nullptr) return true;
  const nlattr* a;
  bool ok = true;
  NFK_NESTED_FOR_EACH(a, list) {
    if (mnl_attr_get_type(a) == NFTA_LIST_ELEM && !ExprOk(a)) ok = false;
  }
  return ok;
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

bool RuleOkForLibnftnl(const nlmsghdr* nlh) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_RULE_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  return NameOk(t.at[NFTA_RULE_TABLE]) && NameOk(t.at[NFTA_RULE_CHAIN]) && ExprListOk(t.at[NFTA_RULE_EXPRESSIONS]);
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

bool SetOkForLibnftnl(const nlmsghdr* nlh, AttrTable* t) {
  if (!HasNfgenmsg(nlh)) return false;
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, t);
  return NameOk(t->at[NFTA_SET_TABLE]) && NameOk(t->at[NFTA_SET_NAME]) &&
         (t->at[NFTA_SET_EXPR] == nullptr || ExprOk(t->at[NFTA_SET_EXPR])) && ExprListOk(t->at[NFTA_SET_EXPRESSIONS]);
}

const nlmsghdr* SetForLibnftnl(const nlmsghdr* nlh, const AttrTable& t, std::vector<uint8_t>* storage) {
  if (t.at[NFTA_SET_EXPR] == nullptr && t.at[NFTA_SET_EXPRESSIONS] == nullptr) return nlh;
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

// The last element attribute libnftnl 1.2.4 has room for (its own copy of
// nf_tables.h), whatever headers this is built against.
constexpr uint16_t kLibnftnlSetElemMax = 11;  // NFTA_SET_ELEM_EXPRESSIONS
static_assert(NFTA_SET_ELEM_EXPRESSIONS == kLibnftnlSetElemMax, "nf_tables.h numbering");

bool SetElemsOkForLibnftnl(const nlmsghdr* nlh) {
  if (!HasNfgenmsg(nlh)) return false;
  AttrTable t(NFTA_SET_ELEM_LIST_MAX);
  mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
  bool ok = NameOk(t.at[NFTA_SET_ELEM_LIST_TABLE]) && NameOk(t.at[NFTA_SET_ELEM_LIST_SET]);
  if (ok && t.at[NFTA_SET_ELEM_LIST_ELEMENTS] != nullptr) {
    const nlattr* e;
    NFK_NESTED_FOR_EACH(e, t.at[NFTA_SET_ELEM_LIST_ELEMENTS]) {
      // libnftnl 1.2.4's element callback bounds the attribute type by
      // NFTA_SET_MAX (18) but stores it in a table of NFTA_SET_ELEM_MAX + 1
      // (12) on its caller's stack: types 12-18 overwrite that frame's saved
      // registers (native/fuzz/corpus/crash-d9d4...). No kernel up to 6.18
      // sends such a type; if one ever does, the message is refused here.
      const nlattr* a;
      NFK_NESTED_FOR_EACH(a, e) ok = ok && mnl_attr_get_type(a) <= kLibnftnlSetElemMax;
      AttrTable el(NFTA_SET_ELEM_MAX);
      mnl_attr_parse_nested(e, CollectAttr, &el);
      ok = ok && NameOk(el.at[NFTA_SET_ELEM_OBJREF]) && VerdictsOk(e) &&
           (el.at[NFTA_SET_ELEM_EXPR] == nullptr || ExprOk(el.at[NFTA_SET_ELEM_EXPR])) &&
           ExprListOk(el.at[NFTA_SET_ELEM_EXPRESSIONS]);
    }
  }
  return ok;
}

}  // namespace nfk
