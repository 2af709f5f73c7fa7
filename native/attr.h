// Reading netlink attributes off kernel messages, shared by the decoders
// (decode.cc builds JS objects, decode_json.cc JSON text). The kernel never
// sends a message too short for its nfgenmsg, an attribute shorter than its
// type or a name without its NUL, but these readers also run on arbitrary
// bytes (native/fuzz): every read is checked, and the checks below say what
// libnftnl 1.2.4 assumes without checking before a message is handed to it.
#pragma once

#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nfk {

// Top-level attributes of one nested attribute, indexed by type.
struct AttrTable {
  std::vector<const nlattr*> at;
  explicit AttrTable(size_t max) : at(max + 1, nullptr) {}
};

// mnl_attr_parse callback filling an AttrTable.
int CollectAttr(const nlattr* attr, void* data);

// One raw expression: its kernel name and the bytes of NFTA_EXPR_DATA.
struct RawExpr {
  std::string name;
  const nlattr* data = nullptr;
};

// The expressions of an NFTA_RULE_EXPRESSIONS list, in order.
std::vector<RawExpr> WalkExpressions(const nlattr* list);

// The expression nests of an NFTA_*_EXPR attribute (`single`) and of an NFTA_*_EXPRESSIONS list
// (a set's, an element's, a dynset's); either may be null.
std::vector<const nlattr*> ExprNests(const nlattr* single, const nlattr* list);

// The message is long enough for its nfgenmsg.
bool HasNfgenmsg(const nlmsghdr* nlh);
// nfgen_family; only after HasNfgenmsg.
uint32_t MsgFamily(const nlmsghdr* nlh);

// A NUL-terminated string attribute, or nullptr if absent or malformed.
const char* AttrStr(const nlattr* a);
// A big-endian u32/u64 attribute; false if absent or short.
bool AttrU32(const nlattr* a, uint32_t* v);
bool AttrU64(const nlattr* a, uint64_t* v);

// What libnftnl needs before it may parse: names NUL-terminated (it strdup()s
// them), every expression named (it strcmp()s the name), every jump or goto
// verdict with its chain (it strdup()s that too), a dynset's statements of
// kinds it knows. For rules, sets and set elements one walk (CheckRule,
// CheckSet, CheckSetElems below) answers this and the type checks.
bool NameOk(const nlattr* a);
// A message of that kind libnftnl can parse without reading past it or
// crashing (it may still refuse it, or exit(): see native/fuzz/abi_exit.c).
bool ChainOkForLibnftnl(const nlmsghdr* nlh);
// (an object's names: its table's, its own, a ct helper's, a secmark's context)
bool ObjOkForLibnftnl(const nlmsghdr* nlh);

// The attribute type checks libnftnl 1.2.4 makes while it parses a message, each of which it
// answers with exit() ("nf_tables kernel ABI is broken"): a u32 of another length, a string or
// nest of none, in the message, its nests and every expression of a kind libnftnl knows (with
// their data registers and a dynset's own expressions). Any attribute libnftnl checks is checked
// here, whether or not libnftnl's parse would reach it before giving up otherwise, so a message
// that passes never makes libnftnl exit. False, with `why` naming the attribute (its path in the
// message), its length and what libnftnl wants, for a message the decoders must refuse.
// A rule message gets both answers, the type checks' and whether libnftnl can parse it, from one
// walk (a dump decodes every rule this way).
struct RuleCheck {
  bool abiOk = true;  // else the decoders refuse it, `why` saying where (the type checks above)
  bool parses = true;  // libnftnl can parse it without reading past it or crashing (else decoded raw)
  std::string why;
  const nlattr* at[NFTA_RULE_MAX + 1] = {};  // the last attribute of each type, as CollectAttr keeps them
};
void CheckRule(const nlmsghdr* nlh, RuleCheck* r);
bool ChainAbiOk(const nlmsghdr* nlh, std::string* why);
// A set message, its NFTA_SET_EXPR(ESSIONS) too (the decoder hands them libnftnl as a rule's).
struct SetCheck {
  bool abiOk = true;
  bool parses = true;  // else the decoders refuse it as malformed
  std::string why;
  const nlattr* at[NFTA_SET_MAX + 1] = {};  // the last attribute of each type
};
void CheckSet(const nlmsghdr* nlh, SetCheck* r);
// The set message as libnftnl is given it: without NFTA_SET_EXPR(ESSIONS), which the decoder
// reads itself (ExprNests). libnftnl 1.2.4 frees a set's parsed expressions when a later one of the
// list fails but leaves them on the set, and nftnl_set_free() frees them again. `storage` holds
// the copy when one is made.
const nlmsghdr* SetForLibnftnl(const nlmsghdr* nlh, const SetCheck& s, std::vector<uint8_t>* storage);
// A set element message: the type checks of every element's expressions (what of it reaches
// libnftnl), and whether libnftnl can parse its elements.
struct SetElemsCheck {
  bool abiOk = true;
  bool parses = true;  // else the decoders refuse it as malformed
  std::string why;
  const nlattr* at[NFTA_SET_ELEM_LIST_MAX + 1] = {};  // the last attribute of each type
};
void CheckSetElems(const nlmsghdr* nlh, SetElemsCheck* r);
// A stateful object's message and its data, by its type.
bool ObjAbiOk(const nlmsghdr* nlh, std::string* why);
// Expression nests as ExprNests gives them; `where` names what holds them, for `why`. `parses`,
// when given, says whether libnftnl can parse them as a rule's expressions (NestedExprsMessage).
bool ExprNestsAbiOk(const std::vector<const nlattr*>& nests, const char* where, std::string* why,
                    bool* parses = nullptr);

}  // namespace nfk
