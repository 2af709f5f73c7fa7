// Rule messages to JSON text of the same IR objects DecodeRule builds, for
// dumps: one JSON.parse of a whole dump costs a fraction of building the
// objects property by property through napi (measured: most of a 4-rule
// dump's time was napi_set_named_property), and needs no JS environment.
#pragma once

#include <linux/netlink.h>

#include <string>

namespace nfk {

// Appends one rule object (family, table, chain, handle, position, userdata,
// exprs; the same fields, values and order as DecodeRule) to `out`. False,
// with nothing appended, for a message too short to hold a rule.
bool AppendRuleJson(const nlmsghdr* nlh, std::string* out);

}  // namespace nfk
