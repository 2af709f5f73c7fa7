#include "element.h"

#include <arpa/inet.h>
#include <endian.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include "attr.h"
#include "common.h"

namespace nfk {

namespace {

// The value of an NFTA_DATA_* nest (a key, key end or data): the bytes of NFTA_DATA_VALUE as hex,
// or a verdict (only where `verdictOf` is given). False when malformed.
bool ParseData(const nlattr* nest, std::string* hex, SetElem* verdictOf) {
  const nlattr* a;
  NFK_NESTED_FOR_EACH(a, nest) {
    uint16_t t = mnl_attr_get_type(a);
    if (t == NFTA_DATA_VALUE) {
      *hex = ToHex(mnl_attr_get_payload(a), mnl_attr_get_payload_len(a));
    } else if (t == NFTA_DATA_VERDICT && verdictOf != nullptr) {
      const nlattr* v;
      NFK_NESTED_FOR_EACH(v, a) {
        uint16_t vt = mnl_attr_get_type(v);
        if (vt == NFTA_VERDICT_CODE) {
          if (mnl_attr_get_payload_len(v) != 4) return false;
          verdictOf->hasVerdict = true;
          verdictOf->verdict = static_cast<int32_t>(ntohl(mnl_attr_get_u32(v)));
        } else if (vt == NFTA_VERDICT_CHAIN) {
          if (mnl_attr_validate(v, MNL_TYPE_NUL_STRING) < 0) return false;
          verdictOf->chain = mnl_attr_get_str(v);
        }
      }
    }
  }
  return true;
}

}  // namespace

bool ParseSetElemList(const nlattr* list, std::vector<SetElem>* out) {
  const nlattr* item;
  NFK_NESTED_FOR_EACH(item, list) {
    if (mnl_attr_get_type(item) != NFTA_LIST_ELEM) continue;
    SetElem& el = out->emplace_back();
    const nlattr* a;
    NFK_NESTED_FOR_EACH(a, item) {
      uint16_t t = mnl_attr_get_type(a);
      size_t len = mnl_attr_get_payload_len(a);
      switch (t) {
        case NFTA_SET_ELEM_KEY: if (!ParseData(a, &el.key, nullptr)) return false; break;
        case NFTA_SET_ELEM_KEY_END: if (!ParseData(a, &el.keyEnd, nullptr)) return false; break;
        case NFTA_SET_ELEM_DATA: if (!ParseData(a, &el.data, &el)) return false; break;
        case NFTA_SET_ELEM_FLAGS:
          if (len != 4) return false;
          el.flags = ntohl(mnl_attr_get_u32(a));
          break;
        case NFTA_SET_ELEM_TIMEOUT:
          if (len != 8) return false;
          el.hasTimeout = true;
          el.timeout = be64toh(mnl_attr_get_u64(a));
          break;
        case NFTA_SET_ELEM_EXPIRATION:
          if (len != 8) return false;
          el.hasExpiration = true;
          el.expiration = be64toh(mnl_attr_get_u64(a));
          break;
        case NFTA_SET_ELEM_USERDATA: el.userdata = ToHex(mnl_attr_get_payload(a), len); break;
        case NFTA_SET_ELEM_EXPR: el.exprs = ExprNests(a, nullptr); break;
        case NFTA_SET_ELEM_EXPRESSIONS: el.exprs = ExprNests(nullptr, a); break;
        case NFTA_SET_ELEM_OBJREF:
          if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0) return false;
          el.objref = mnl_attr_get_str(a);
          break;
        default: break;
      }
    }
  }
  return true;
}

bool ParseSetElems(const nlmsghdr* nlh, std::vector<SetElem>* out) {
  if (!HasNfgenmsg(nlh)) return false;
  const nlattr* a;
  NFK_ATTR_FOR_EACH(a, nlh, sizeof(nfgenmsg)) {
    if (mnl_attr_get_type(a) == NFTA_SET_ELEM_LIST_ELEMENTS) return ParseSetElemList(a, out);
  }
  return true;
}

}  // namespace nfk
