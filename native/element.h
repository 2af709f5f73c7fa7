// Set elements: the one decoder of an element list (NFTA_SET_ELEM_LIST_ELEMENTS), for dumps
// (decode.cc, decode_json.cc) and monitor events (event.cc) alike.
#pragma once

#include <linux/netlink.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nfk {

// One element as the kernel sent it: key, key end, data and userdata as hex; a verdict as its code
// with its jump/goto chain; an object map's object name.
struct SetElem {
  std::string key;
  std::string keyEnd;
  std::string data;
  std::string userdata;
  std::string chain;
  std::string objref;
  bool hasVerdict = false;
  int32_t verdict = 0;
  uint32_t flags = 0;
  bool hasTimeout = false;
  uint64_t timeout = 0;  // ms
  bool hasExpiration = false;
  uint64_t expiration = 0;  // ms
  // NFTA_SET_ELEM_EXPR or the items of NFTA_SET_ELEM_EXPRESSIONS, pointing into the message
  std::vector<const nlattr*> exprs;
};

// Appends the elements of a NFTA_SET_ELEM_LIST_ELEMENTS nest to `out`; false when one is malformed
// (`out` is then incomplete).
bool ParseSetElemList(const nlattr* list, std::vector<SetElem>* out);

// The same for a NEWSETELEM / DELSETELEM message (one without a list has no elements).
bool ParseSetElems(const nlmsghdr* nlh, std::vector<SetElem>* out);

}  // namespace nfk
