// Rule digests: the one place a rule's digest is computed, from a dump's bytes (dump.cc,
// decode_json.cc) or from the bytes a commit would write (encode.cc ruleDigests).
#pragma once

#include <linux/netlink.h>

#include <cstddef>
#include <string>

#include "attr.h"

namespace nfk {

// A 128-bit digest (32 hex digits) of what makes a rule the rule it is to the
// keeper's comparison (src/rules/compare.ts ruleKey): its userdata and each
// expression's name and data, leaving out a counter's data (its packets and
// bytes move). Equal digests mean equal keys, so the keeper can recognise a
// rule it has decoded before without decoding it again. Empty (no digest) for
// a rule that looks up an anonymous set (`__set…`, `__map…`): its key holds
// the set's elements, which are not in the rule.
//
// With `anonymousSetsUnnamed`, a lookup of an anonymous set is digested without the set's name and
// batch id instead: a commit names such a set by its id in the batch (the kernel names it when it
// creates it), its echo by that name, and both give this digest for the same rule. Never
// compared with a dump's digest (a dumped rule may look up any set of that name): only a commit's
// rule with its echo, whose anonymous sets are the ones the same batch created for it.
std::string RuleDigest(const nlattr* userdata, const nlattr* expressions, bool anonymousSetsUnnamed = false);

// RuleDigest in parts, for digests of rules that share expressions (ruleDigests in encode.cc):
// the bytes one expression adds to what is hashed (false: the rule has no digest), the userdata's,
// and the digest of the whole. RuleDigest(u, e) == DigestOf(userdata segment + each expression's).
bool AppendExprDigestSegment(std::string* buf, const RawExpr& e, bool anonymousSetsUnnamed = false);
void AppendUserdataDigestSegment(std::string* buf, const void* userdata, size_t len);
std::string DigestOf(const std::string& buf);

}  // namespace nfk
