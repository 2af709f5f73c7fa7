// Rule messages (the one rule decoder) and element lists to JSON text of the IR
// objects (src/netlink/objects.ts), for dumps: one JSON.parse of a whole dump
// costs a fraction of building the objects property by property through napi,
// and needs no JS environment.
#pragma once

#include <linux/netlink.h>

#include "attr.h"

#include <string>
#include <vector>

namespace nfk {

// Appends one rule object (family, table, chain, handle, position, userdata,
// exprs, and with `withDigest` its digest) to `out`. False, with nothing appended and `error`
// saying why, for a message too short to hold a rule or one libnftnl would exit() on (CheckRule).
bool AppendRuleJson(const nlmsghdr* nlh, std::string* out, std::string* error, bool withDigest = false);

// Expression nests (each NFTA_EXPR_NAME and NFTA_EXPR_DATA: a set's, an element's or a dynset's
// NFTA_*_EXPR, or the items of its NFTA_*_EXPRESSIONS) as a JSON array of IR expressions,
// decoded as a rule's expressions are. False, with `why` set, for expressions libnftnl would
// exit() on (ExprNestsAbiOk; the callers check first, naming what holds them).
bool AppendNestedExprsJson(const std::vector<const nlattr*>& nests, std::string* out, std::string* why);

// The rule message AppendNestedExprsJson decodes `nests` as (built in `buf`; `list`, when given,
// is its NFTA_RULE_EXPRESSIONS): the fuzz harness hands the same message to libnftnl first.
const nlmsghdr* NestedExprsMessage(const std::vector<const nlattr*>& nests, std::vector<char>* buf, const nlattr** list = nullptr);

// A NUL-terminated string as a JSON string literal, appended to `out`.
void AppendJsonString(std::string* out, const char* s);

// Appends the elements of one NEWSETELEM message as JSON objects (key,
// keyEnd, flags, data, verdict, chain, timeout, expiration, userdata: the
// fields and values DecodeSetElems gives), each preceded by a comma unless
// `*first`. False, with `error` saying why, when the elements cannot be read, libnftnl could not
// parse them or their expressions are ones it would exit() on (CheckSetElems).
// The caller checks the message (HasNfgenmsg) first.
bool AppendSetElemsJson(const nlmsghdr* nlh, std::string* out, bool* first, std::string* error);

}  // namespace nfk
