// Rule messages to JSON text of the same IR objects DecodeRule builds, for
// dumps: one JSON.parse of a whole dump costs a fraction of building the
// objects property by property through napi (measured: most of a 4-rule
// dump's time was napi_set_named_property), and needs no JS environment.
#pragma once

#include <linux/netlink.h>

#include "attr.h"

#include <string>

namespace nfk {

// Appends one rule object (family, table, chain, handle, position, userdata,
// exprs; the same fields, values and order as DecodeRule) to `out`. False,
// with nothing appended, for a message too short to hold a rule.
bool AppendRuleJson(const nlmsghdr* nlh, std::string* out, bool withDigest = false);

// A 128-bit digest (32 hex digits) of what makes a rule the rule it is to the
// keeper's comparison (src/rules/compare.ts ruleKey): its userdata and each
// expression's name and data, leaving out a counter's data (its packets and
// bytes move). Equal digests mean equal keys, so the keeper can recognise a
// rule it has decoded before without decoding it again. Empty (no digest) for
// a rule that looks up an anonymous set (`__set…`, `__map…`): its key holds
// the set's elements, which are not in the rule.
// A NUL-terminated string as a JSON string literal, appended to `out`.
void AppendJsonString(std::string* out, const char* s);

std::string RuleDigest(const nlattr* userdata, const nlattr* expressions);

// RuleDigest in parts, for digests of rules that share expressions (ruleDigests in encode.cc):
// the bytes one expression adds to what is hashed (false: the rule has no digest), the userdata's,
// and the digest of the whole. RuleDigest(u, e) == DigestOf(userdata segment + each expression's).
bool AppendExprDigestSegment(std::string* buf, const RawExpr& e);
void AppendUserdataDigestSegment(std::string* buf, const void* userdata, size_t len);
std::string DigestOf(const std::string& buf);

// Appends the elements of one NEWSETELEM message as JSON objects (key,
// keyEnd, flags, data, verdict, chain, timeout, expiration, userdata: the
// fields and values DecodeSetElems gives), each preceded by a comma unless
// `*first`. False, with nothing appended, when libnftnl cannot parse it.
// The caller checks the message (HasNfgenmsg, SetElemsOkForLibnftnl) first.
bool AppendSetElemsJson(const nlmsghdr* nlh, std::string* out, bool* first);

}  // namespace nfk
