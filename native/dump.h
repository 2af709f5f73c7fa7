// Dumps: one GET request (tables, chains, rules, sets or set elements) and
// every message of its answer, decoded on the JS thread. Small requests start
// inline on the JS thread when the socket is free; anything still going after
// a couple of datagrams, and every big dump, is finished by a worker thread.
// A dump the kernel marks NLM_F_DUMP_INTR (the ruleset changed while it ran)
// is never resolved: it rejects with a NetlinkError (EINTR) carrying
// `dumpInterrupted: true`, and src/netlink/socket.ts retries it. Its rest is
// not read where the socket it went over can be replaced (NftSocket::EndDump).
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

#include "socket.h"

namespace nfk {

enum class DumpKind { Table, Chain, Rule, Set, Element, Object };

struct DumpRequest {
  DumpKind kind = DumpKind::Table;
  uint16_t family = 0;  // AF_UNSPEC: every family
  std::string table, name;
  // A single GET (NLM_F_ACK) of the object `name`, instead of a dump.
  bool single = false;
  // Elements through the napi decoder instead of JSON (tests compare the two); rules have one decoder, JSON.
  bool objects = false;
  // Rules: 0 decoded; 1 decoded, each with its "digest" (see RuleDigest); 2 digests only,
  // as [[chain, [handle, digest, handle, digest, ...]], ...] in dump order.
  int ruleMode = 0;
};

// Starts `req` on `sock` (`self` is its JS object, kept alive meanwhile) and
// returns the promise of the decoded objects.
Napi::Promise StartDump(Napi::Env env, NftSocket* sock, Napi::Object self, const DumpRequest& req);

}  // namespace nfk
