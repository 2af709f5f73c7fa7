// Monitor events, apart from the socket and JavaScript: one multicast message
// to a MonitorEvent, the table filter, and the grouping of a commit's events
// up to its NEWGEN. The monitor (monitor.cc) runs this on the JS thread on every
// message it reads; the fuzz harness (native/fuzz/) runs the same code on
// hostile bytes.
#pragma once

#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "element.h"

namespace nfk {

struct MonitorEvent {
  std::string type;   // "newrule", "delchain", ...
  uint32_t family = 0;
  std::string table;
  std::string name;   // chain of a rule; name of a chain or set
  uint64_t handle = 0;
  uint32_t portId = 0;  // nlmsg_pid: the sender's netlink port id
  uint16_t flags = 0;   // nlmsg_flags: a rule event carries NLM_F_REPLACE / NLM_F_APPEND of its request
  uint64_t position = 0;  // rule events: NFTA_RULE_POSITION, the handle of the rule before it
  std::vector<SetElem> elements;  // element events: what was added or deleted
  bool elementsMalformed = false;      // an element event whose list could not be read
  // A DELSETELEM as the kernel sent it: an undo reaction (monitor.cc React) sends it back as a NEWSETELEM.
  std::string raw;
};

struct MonitorBatch {
  bool overflow = false;   // ENOBUFS: events were lost, resync
  uint32_t generation = 0;
  // The task that committed it, from the NEWGEN (NFTA_GEN_PROC_PID, its pid in the initial pid
  // namespace; NFTA_GEN_PROC_NAME, its comm): 0 and "" when the kernel did not say.
  uint32_t pid = 0;
  std::string comm;
  bool truncated = false;  // more events than we keep per batch
  bool foreign = false;    // holds an event from a port not ignored
  // The first generation of the unbroken run of commits this monitor has seen
  // completely (every NEWGEN from it up to this batch's, no overflow), or 0:
  // a commit in that run that the filter dropped touched no watched table.
  uint32_t since = 0;
  // CLOCK_MONOTONIC (ns) when the monitor read the datagram that closed the batch: with
  // process.hrtime() in JavaScript, how long the batch took to reach its JavaScript.
  double receivedNs = 0;
  // The generation of the last commit before this one that had events for the watched tables
  // (handed over or not: our own skipped ones count), or 0: the commits in between touched none.
  uint32_t prevTouched = 0;
  // The monitor's armed reaction (NftMonitor::React) answered this batch before handing it over:
  // reaction is its index in arm()'s list; reactionErrno 0 and the echoed handles as (op index,
  // handle), or the errno of the refusal.
  bool reacted = false;
  uint32_t reaction = 0;
  int reactionErrno = 0;
  std::vector<std::pair<int32_t, uint64_t>> reactionHandles;
  double reactedNs = 0;  // CLOCK_MONOTONIC (ns) when its acknowledgements were read
  std::vector<MonitorEvent> events;
};

// Which events wake JavaScript.
struct EventFilter {
  std::set<std::pair<uint32_t, std::string>> tables;
  bool allTables = false;
  // Our own commit socket(s), by port id: not tampering, in commits up to the generation each
  // gives (kEveryGeneration: all). The caller bounds a port its socket left (see src/netlink/socket.ts).
  static constexpr uint32_t kEveryGeneration = UINT32_MAX;
  std::map<uint32_t, uint32_t> ignorePorts;
  bool deliverOwn = false;         // also deliver commits of ignored ports (flagged not foreign)

  bool Wanted(const MonitorEvent& e) const;
};

// Reads one nf_tables object message into `ev`; false for anything that is
// not a table/chain/rule/set/element/object/flowtable event. `withElements`:
// also decode an element event's elements (not for events that are dropped).
bool ParseEvent(const nlmsghdr* nlh, MonitorEvent* ev, bool withElements = true);

// Collects the wanted events of one commit. The kernel ends every commit's
// events with NFT_MSG_NEWGEN.
class EventBatcher {
 public:
  static constexpr size_t kMaxEventsPerBatch = 256;
  // Takes one message; returns the finished batch at a NEWGEN that closes a
  // commit with a wanted event from a port not ignored, else nullptr.
  std::unique_ptr<MonitorBatch> Feed(const nlmsghdr* nlh, const EventFilter& filter);
  // After an overflow: what was pending is incomplete, drop it, and the run of
  // completely seen commits is broken.
  void Reset();
  void Overflow();
  // The caller read `generation` after handling `overflowsSeen` overflow
  // reports: every later commit reaches us whole (see event.cc).
  void Anchor(uint32_t generation, uint64_t overflowsSeen);
  // The caller knows its own commit that made `generation` from the commit's acknowledgements
  // (their echo): that commit's batch, if it holds only ignored ports' events, is neither handed
  // over nor counted. Forgotten at the first NEWGEN at or past it.
  void SkipOwn(uint32_t generation);
  uint32_t lastGeneration() const { return lastGen_; }
  uint32_t runStart() const { return runStart_; }
  // The generation of the last commit that had events for the watched tables (0: none seen).
  uint32_t lastTouched() const { return lastTouched_; }
  // Whether events of an unfinished commit are held (its NEWGEN is still to come).
  bool pending() const { return !pending_->events.empty(); }

 private:
  std::unique_ptr<MonitorBatch> pending_ = std::make_unique<MonitorBatch>();
  bool foreign_ = false;  // the pending batch holds an event not from an ignored port
  uint32_t ownUpTo_ = EventFilter::kEveryGeneration;  // its ignored ports' events are ours up to this generation
  uint32_t lastGen_ = 0;  // the last NEWGEN seen (0: none yet)
  uint32_t runStart_ = 0;  // see MonitorBatch::since; 0: no run
  uint32_t lastTouched_ = 0;  // see lastTouched()
  uint64_t overflows_ = 0;
  std::vector<uint32_t> skipOwn_;  // see SkipOwn; a few at most
};

}  // namespace nfk
