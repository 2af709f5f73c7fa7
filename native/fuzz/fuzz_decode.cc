// libFuzzer harness for the addon's decoding of kernel messages. The input is
// what one recv() on a netfilter socket returns: any number of netlink
// messages. Every message goes through every decoder, as a dump of any kind
// would hand it (socket.cc picks the decoder by the dump asked for, not by the
// message type): the object decoders of decode.cc, the JSON rule decoder of
// decode_json.cc that rule dumps use, and the monitor's event parsing, filter
// and batching (event.cc). This is the addon's own code, linked against
// napi_shim.cc in place of Node.
#include <libmnl/libmnl.h>
#include <napi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../decode.h"
#include "../decode_json.h"
#include "../common.h"
#include "../event.h"
#include "napi_shim.h"

struct AbiExit {};

extern "C" {
int nfk_fuzz_decoding = 0;
void nfk_fuzz_abi_exit(int) { throw AbiExit{}; }
}

namespace {

size_t abiExits = 0;

template <typename F>
void Guarded(F f) {
  // A message the decoder cannot parse is a JS exception, which is fine.
  nfk_fuzz_decoding = 1;
  try {
    f();
  } catch (const Napi::Error&) {
  } catch (const AbiExit&) {
    // libnftnl would have ended the process (abi_exit.c); counted, reported at exit.
    abiExits++;
  }
  nfk_fuzz_decoding = 0;
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
    Guarded([&] { nfk::DecodeTable(e, nlh); });
    Guarded([&] { nfk::DecodeChain(e, nlh); });
    Guarded([&] { nfk::DecodeRule(e, nlh); });
    Guarded([&] { nfk::DecodeSet(e, nlh); });
    Guarded([&] { nfk::DecodeSetElems(e, nlh, Napi::Array::New(e)); });
    std::string json;
    nfk_fuzz_decoding = 1;
    try {
      nfk::AppendRuleJson(nlh, &json);  // what rule dumps run (socket.cc)
    } catch (const AbiExit&) {
      abiExits++;
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
