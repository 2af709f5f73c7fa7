// libFuzzer harness for the addon's decoding of kernel messages. The input is
// what one recv() on a netfilter socket returns: any number of netlink
// messages. Every message goes through every decoder, as a dump of any kind
// would hand it (socket.cc picks the decoder by the dump asked for, not by the
// message type): the object decoders of decode.cc and object.cc, the JSON rule
// and element decoders of decode_json.cc that dumps use, and the monitor's
// event parsing, filter and batching (event.cc). This is the addon's own code,
// linked against napi_shim.cc in place of Node. A message libnftnl would exit()
// on that the addon's checks let through aborts the run (abi_exit.c).
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <napi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../decode.h"
#include "../decode_json.h"
#include "../attr.h"
#include "../common.h"
#include "../element.h"
#include "../event.h"
#include "../object.h"
#include "napi_shim.h"

extern "C" int nfk_fuzz_libnftnl_exits(const nlmsghdr* nlh, int kinds);  // abi_exit.c
extern "C" int nfk_fuzz_decoding;                                         // abi_exit.c

namespace {

enum { kRule = 1, kChain = 2, kSet = 4, kElems = 8, kObj = 16 };
size_t abiExits = 0;    // libnftnl exit()s caught by the probe
size_t abiRefused = 0;  // message kinds the addon's checks refused (attr.h CheckRule and the rest)

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
    std::fprintf(stderr, "stat::libnftnl_abi_exits: %zu\nstat::abi_refused: %zu\n", abiExits, abiRefused);
  }
} report;

// Whether libnftnl exits on expression nests as the decoder hands them to it (a rule message of
// their own), where it can parse them at all.
bool ExprsExit(const std::vector<const nlattr*>& nests) {
  if (nests.empty()) return false;
  std::vector<char> buf;
  const nlmsghdr* m = nfk::NestedExprsMessage(nests, &buf);
  nfk::RuleCheck check;
  nfk::CheckRule(m, &check);
  return check.parses && nfk_fuzz_libnftnl_exits(m, kRule) != 0;
}

// The probe: what libnftnl would exit() on, of each kind, as the decoders would hand it the
// message, where libnftnl can parse it without crashing (CheckRule's `parses` and the rest).
int LibnftnlExits(const nlmsghdr* nlh) {
  nfk::RuleCheck rule;
  nfk::CheckRule(nlh, &rule);
  nfk::SetCheck set;
  nfk::CheckSet(nlh, &set);
  int exits = nfk_fuzz_libnftnl_exits(nlh, (rule.parses ? kRule : 0) | (nfk::ChainOkForLibnftnl(nlh) ? kChain : 0) |
                                                (nfk::ObjOkForLibnftnl(nlh) ? kObj : 0));
  if (set.parses) {
    // the set without its expressions, then its expressions as a rule's
    std::vector<uint8_t> setMsg;
    exits |= nfk_fuzz_libnftnl_exits(nfk::SetForLibnftnl(nlh, set, &setMsg), kSet);
    if (ExprsExit(nfk::ExprNests(set.at[NFTA_SET_EXPR], set.at[NFTA_SET_EXPRESSIONS]))) exits |= kSet;
  }
  // of an element message only its elements' expressions reach libnftnl
  std::vector<nfk::SetElem> elems;
  nfk::SetElemsCheck elemsCheck;
  nfk::CheckSetElems(nlh, &elemsCheck);
  if (elemsCheck.parses && nfk::ParseSetElems(nlh, &elems)) {
    for (const nfk::SetElem& x : elems) {
      if (ExprsExit(x.exprs)) exits |= kElems;
    }
  }
  return exits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // recv() buffers are aligned; the copy is exactly `size` bytes so that
  // AddressSanitizer sees any read past the end of what the kernel sent.
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(size ? size : 1));
  std::memcpy(buf, data, size);
  static const bool explain = std::getenv("NFK_FUZZ_EXPLAIN") != nullptr;
  napi_env env = nfk_shim_env();
  Napi::Env e(env);

  nfk::EventFilter filter;
  filter.tables.insert({2, "nfkeeper"});
  filter.ignorePorts.emplace(1234, nfk::EventFilter::kEveryGeneration);
  filter.ignorePorts.emplace(4321, 100);  // a port left: ours up to generation 100
  nfk::EventFilter all;
  all.allTables = true;
  nfk::EventBatcher batcher, batcherAll;

  const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(buf);
  int len = static_cast<int>(size);
  for (; nfk::MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
    // Every message libnftnl would exit() on must be one the addon's checks refuse: the decoders
    // refuse it themselves, never calling libnftnl. One that passes is a finding.
    std::string why[4];
    std::string objWhy;
    nfk::RuleCheck rule;
    nfk::CheckRule(nlh, &rule);
    nfk::SetCheck set;
    nfk::CheckSet(nlh, &set);
    nfk::SetElemsCheck elems;
    nfk::CheckSetElems(nlh, &elems);
    why[0] = rule.why;
    why[2] = set.why;
    why[3] = elems.why;
    int refused = (rule.abiOk ? 0 : kRule) | (nfk::ChainAbiOk(nlh, &why[1]) ? 0 : kChain) | (set.abiOk ? 0 : kSet) |
                  (elems.abiOk ? 0 : kElems) | (nfk::ObjAbiOk(nlh, &objWhy) ? 0 : kObj);
    int exits = LibnftnlExits(nlh);
    if (explain && (exits | refused) != 0) {
      // NFK_FUZZ_EXPLAIN=1: what the probe and the checks said of each message, kind by kind
      static const char* kinds[] = {"rule", "chain", "set", "set element", "object"};
      for (int k = 0; k < 5; k++) {
        if (((exits | refused) >> k & 1) == 0) continue;
        std::fprintf(stderr, "abi: as a %s message: libnftnl %s; refused: %s\n", kinds[k],
                     (exits >> k & 1) ? "exits" : "does not exit", (refused >> k & 1) ? (k < 4 ? why[k] : objWhy).c_str() : "no");
      }
    }
    abiExits += __builtin_popcount(exits);
    abiRefused += __builtin_popcount(refused);
    if (exits & ~refused) {
      std::fprintf(stderr, "libnftnl exits on a message of kind %d (1 rule, 2 chain, 4 set, 8 elements, 16 object) that the addon's checks pass\n",
                   exits & ~refused);
      std::abort();
    }
    // The decoders, on every message: an exit() in them ends the run as a finding (abi_exit.c).
    nfk_fuzz_decoding = 1;
    Guarded([&] { nfk::DecodeTable(e, nlh); });
    Guarded([&] { nfk::DecodeChain(e, nlh); });
    {
      std::string json, error;
      nfk::AppendRuleJson(nlh, &json, &error);  // what rule dumps run (dump.cc)
    }
    Guarded([&] { nfk::DecodeSet(e, nlh); });
    Guarded([&] { nfk::DecodeSetElems(e, nlh, Napi::Array::New(e)); });
    Guarded([&] { nfk::DecodeObject(e, nlh); });
    if (nfk::HasNfgenmsg(nlh)) {
      std::string json, error;
      bool first = true;
      nfk::AppendSetElemsJson(nlh, &json, &first, &error);  // what element dumps run (dump.cc)
    }
    nfk_fuzz_decoding = 0;
    uint32_t gen;
    nfk::DecodeGeneration(nlh, &gen);
    batcher.Feed(nlh, filter);
    batcherAll.Feed(nlh, all);
    nfk_shim_reset();
  }
  std::free(buf);
  return 0;
}
