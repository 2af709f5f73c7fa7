// libFuzzer harness for the addon's decoding of kernel messages. The input is
// what one recv() on a netfilter socket returns: any number of netlink
// messages. Every message goes through every decoder, as a dump of any kind
// would hand it (socket.cc picks the decoder by the dump asked for, not by the
// message type): the object decoders of decode.cc, the JSON rule decoder of
// decode_json.cc that rule dumps use, and the monitor's event parsing, filter
// and batching (event.cc). This is the addon's own code, linked against
// napi_shim.cc in place of Node.
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <napi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../decode.h"
#include "../decode_json.h"
#include "../attr.h"
#include "../common.h"
#include "../event.h"
#include "napi_shim.h"

extern "C" int nfk_fuzz_libnftnl_exits(const nlmsghdr* nlh, int kinds);  // abi_exit.c

namespace {

enum { kRule = 1, kChain = 2, kSet = 4, kElems = 8 };
size_t abiExits = 0;

template <typename F>
void Guarded(F f) {
  // A message the decoder cannot parse is a JS exception, which is fine.
  try {
    f();
  } catch (const Napi::Error&) {
  }
}

struct Report {
  ~Report() {
    if (abiExits > 0) std::fprintf(stderr, "stat::libnftnl_abi_exits: %zu\n", abiExits);
  }
} report;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // recv() buffers are aligned; the copy is exactly `size` bytes so that
  // AddressSanitizer sees any read past the end of what the kernel sent.
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(size ? size : 1));
  std::memcpy(buf, data, size);
  napi_env env = nfk_shim_env();
  Napi::Env e(env);

  nfk::EventFilter filter;
  filter.tables.insert({2, "nfkeeper"});
  filter.ignorePorts.insert(1234);
  nfk::EventFilter all;
  all.allTables = true;
  nfk::EventBatcher batcher, batcherAll;

  const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(buf);
  int len = static_cast<int>(size);
  for (; nfk::MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
    // libnftnl would exit() on some messages that pass the decoders' checks;
    // those do not reach the decoders that call it (abi_exit.c).
    nfk::AttrTable setAttrs(NFTA_SET_MAX);
    int kinds = (nfk::RuleOkForLibnftnl(nlh) ? kRule : 0) | (nfk::ChainOkForLibnftnl(nlh) ? kChain : 0) |
                (nfk::SetOkForLibnftnl(nlh, &setAttrs) ? kSet : 0) | (nfk::SetElemsOkForLibnftnl(nlh) ? kElems : 0);
    // (a set as DecodeSet hands it to libnftnl: without its expressions)
    std::vector<uint8_t> setMsg;
    const nlmsghdr* forSet = (kinds & kSet) ? nfk::SetForLibnftnl(nlh, setAttrs, &setMsg) : nlh;
    int exits = nfk_fuzz_libnftnl_exits(nlh, kinds & ~kSet) | nfk_fuzz_libnftnl_exits(forSet, kinds & kSet);
    // (and its expressions as DecodeSet hands them to libnftnl: a rule message of their own)
    if ((kinds & kSet) && !(exits & kSet)) {
      std::vector<const nlattr*> nests = nfk::ExprNests(setAttrs.at[NFTA_SET_EXPR], setAttrs.at[NFTA_SET_EXPRESSIONS]);
      std::vector<char> exprMsg;
      const nlmsghdr* forExprs = nests.empty() ? nullptr : nfk::NestedExprsMessage(nests, &exprMsg);
      if (forExprs != nullptr && nfk::RuleOkForLibnftnl(forExprs) && nfk_fuzz_libnftnl_exits(forExprs, kRule)) exits |= kSet;
    }
    abiExits += __builtin_popcount(exits);
    Guarded([&] { nfk::DecodeTable(e, nlh); });
    if (!(exits & kChain)) Guarded([&] { nfk::DecodeChain(e, nlh); });
    if (!(exits & kRule)) {
      std::string json;
      nfk::AppendRuleJson(nlh, &json);  // what rule dumps run (socket.cc)
    }
    if (!(exits & kSet)) Guarded([&] { nfk::DecodeSet(e, nlh); });
    if (!(exits & kElems)) Guarded([&] { nfk::DecodeSetElems(e, nlh, Napi::Array::New(e)); });
    uint32_t gen;
    nfk::DecodeGeneration(nlh, &gen);
    batcher.Feed(nlh, filter);
    batcherAll.Feed(nlh, all);
    nfk_shim_reset();
  }
  std::free(buf);
  return 0;
}
