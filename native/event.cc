#include "event.h"

#include <endian.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include "common.h"
#include "decode.h"

namespace nfk {

namespace {

const char* EventName(uint16_t type) {
  switch (type) {
    case NFT_MSG_NEWTABLE: return "newtable";
    case NFT_MSG_DELTABLE: return "deltable";
    case NFT_MSG_NEWCHAIN: return "newchain";
    case NFT_MSG_DELCHAIN: return "delchain";
    case NFT_MSG_NEWRULE: return "newrule";
    case NFT_MSG_DELRULE: return "delrule";
    case NFT_MSG_NEWSET: return "newset";
    case NFT_MSG_DELSET: return "delset";
    case NFT_MSG_NEWSETELEM: return "newsetelem";
    case NFT_MSG_DELSETELEM: return "delsetelem";
    case NFT_MSG_NEWOBJ: return "newobj";
    case NFT_MSG_DELOBJ: return "delobj";
    case NFT_MSG_NEWFLOWTABLE: return "newflowtable";
    case NFT_MSG_DELFLOWTABLE: return "delflowtable";
    default: return nullptr;
  }
}

}  // namespace

bool EventFilter::Wanted(const MonitorEvent& e) const {
  if (e.type == "deltable") return true;  // any table deletion may be `nft flush ruleset`
  return allTables || tables.count({e.family, e.table}) > 0;
}

// Attribute 1 is the table name in every object message (NFTA_TABLE_NAME,
// NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE,
// NFTA_OBJ_TABLE, NFTA_FLOWTABLE_TABLE); the second name differs per object.
bool ParseEvent(const nlmsghdr* nlh, MonitorEvent* ev, bool withElements) {
  if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES) return false;
  uint16_t type = NFNL_MSG_TYPE(nlh->nlmsg_type);
  const char* name = EventName(type);
  if (name == nullptr || nlh->nlmsg_len < MNL_NLMSG_HDRLEN + sizeof(nfgenmsg)) return false;
  ev->type = name;
  ev->family = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh))->nfgen_family;
  ev->portId = nlh->nlmsg_pid;
  ev->flags = nlh->nlmsg_flags;
  uint16_t nameAttr = 0, handleAttr = 0;
  switch (type) {
    case NFT_MSG_NEWCHAIN: case NFT_MSG_DELCHAIN:
      nameAttr = NFTA_CHAIN_NAME; handleAttr = NFTA_CHAIN_HANDLE; break;
    case NFT_MSG_NEWRULE: case NFT_MSG_DELRULE:
      nameAttr = NFTA_RULE_CHAIN; handleAttr = NFTA_RULE_HANDLE; break;
    case NFT_MSG_NEWSET: case NFT_MSG_DELSET: nameAttr = NFTA_SET_NAME; break;
    case NFT_MSG_NEWSETELEM: case NFT_MSG_DELSETELEM: nameAttr = NFTA_SET_ELEM_LIST_SET; break;
    case NFT_MSG_NEWOBJ: case NFT_MSG_DELOBJ: nameAttr = NFTA_OBJ_NAME; break;
    default: break;
  }
  nlattr* attr;
  NFK_ATTR_FOR_EACH(attr, nlh, sizeof(nfgenmsg)) {
    uint16_t t = mnl_attr_get_type(attr);
    if (t == 1 && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0) ev->table = mnl_attr_get_str(attr);
    else if (nameAttr != 0 && t == nameAttr && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0)
      ev->name = mnl_attr_get_str(attr);
    else if (handleAttr != 0 && t == handleAttr && mnl_attr_get_payload_len(attr) == 8)
      ev->handle = be64toh(mnl_attr_get_u64(attr));
    else if (handleAttr == NFTA_RULE_HANDLE && t == NFTA_RULE_POSITION && mnl_attr_get_payload_len(attr) == 8)
      ev->position = be64toh(mnl_attr_get_u64(attr));
    else if (withElements && nameAttr == NFTA_SET_ELEM_LIST_SET && t == NFTA_SET_ELEM_LIST_ELEMENTS) {
      // A malformed list leaves the event without elements: the mirror cannot follow it, and says so.
      if (!ParseSetElemList(attr, &ev->elements)) ev->elements.clear(), ev->elementsMalformed = true;
    }
  }
  return true;
}

std::unique_ptr<MonitorBatch> EventBatcher::Feed(const nlmsghdr* nlh, const EventFilter& filter) {
  if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES) return nullptr;
  if (NFNL_MSG_TYPE(nlh->nlmsg_type) == NFT_MSG_NEWGEN) {
    uint32_t gen = 0, pid = 0;
    std::string comm;
    DecodeGeneration(nlh, &gen, &pid, &comm);
    // The run of whole commits goes on only from the NEWGEN just before;
    // after a gap, an overflow or at the start this commit may be partial.
    // A generation at or before the last seen was anchored past (see Anchor): it leaves the run alone.
    if (gen > lastGen_) {
      if (runStart_ == 0 || lastGen_ == 0 || gen != lastGen_ + 1) runStart_ = gen + 1;
      lastGen_ = gen;
    }
    // Events from a port ignored only up to a generation: ours up to it, another socket's after.
    if (gen > ownUpTo_) foreign_ = true;
    std::unique_ptr<MonitorBatch> done;
    bool skip = false;
    for (size_t i = 0; i < skipOwn_.size();) {
      if (skipOwn_[i] > gen) {
        i++;
        continue;
      }
      if (skipOwn_[i] == gen) skip = true;
      skipOwn_[i] = skipOwn_.back();
      skipOwn_.pop_back();
    }
    const uint32_t prevTouched = lastTouched_;
    if (!pending_->events.empty() && gen > lastTouched_) lastTouched_ = gen;
    if (!pending_->events.empty() && (foreign_ || (filter.deliverOwn && !skip))) {
      pending_->generation = gen;
      pending_->pid = pid;
      pending_->comm = std::move(comm);
      pending_->prevTouched = prevTouched;
      pending_->foreign = foreign_;
      pending_->since = runStart_ <= gen ? runStart_ : 0;
      done = std::move(pending_);
    }
    Reset();
    return done;
  }
  MonitorEvent ev;
  bool room = pending_->events.size() < kMaxEventsPerBatch;
  if (!ParseEvent(nlh, &ev, room) || !filter.Wanted(ev)) return nullptr;
  auto own = filter.ignorePorts.find(ev.portId);
  if (own == filter.ignorePorts.end()) foreign_ = true;
  else if (own->second < ownUpTo_) ownUpTo_ = own->second;
  if (room && NFNL_MSG_TYPE(nlh->nlmsg_type) == NFT_MSG_DELSETELEM) ev.raw.assign(reinterpret_cast<const char*>(nlh), nlh->nlmsg_len);
  if (pending_->events.size() < kMaxEventsPerBatch) pending_->events.push_back(std::move(ev));
  else pending_->truncated = true;
  return nullptr;
}

void EventBatcher::SkipOwn(uint32_t generation) {
  // Only a commit still to come: one already seen was handed over (the caller takes it as known).
  if (generation > lastGen_ && skipOwn_.size() < 64) skipOwn_.push_back(generation);
}

void EventBatcher::Reset() {
  pending_ = std::make_unique<MonitorBatch>();
  foreign_ = false;
  ownUpTo_ = EventFilter::kEveryGeneration;
}

void EventBatcher::Overflow() {
  Reset();
  runStart_ = 0;
  overflows_++;
}

// The caller read `generation` after it had handled `overflowsSeen` overflow reports: every drop
// since those was of a commit up to `generation`, or is still to be reported (and breaks the run
// again), so every later commit reaches us whole. Commits up to it are the caller's business.
void EventBatcher::Anchor(uint32_t generation, uint64_t overflowsSeen) {
  if (generation == 0 || overflows_ != overflowsSeen) return;
  if (runStart_ == 0 || runStart_ > generation + 1) runStart_ = generation + 1;
  if (generation > lastGen_) lastGen_ = generation;
}

}  // namespace nfk
