#include "batch.h"

#include "common.h"

#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include "attr.h"
#include "digest.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>

namespace nfk {

namespace {

// Test only (test/reliability/resend-kill.test.ts): with NFKEEPER_TEST_LOSE_RESEND_ACK set when the
// addon is loaded, a resend (Recommit) loses the first datagram of its acknowledgements, as an
// ENOBUFS would: its outcome unknown. `refused`: only where that datagram says the kernel refused
// it by its generation. Unset: one comparison per resend.
const char* const kLoseResendAck = getenv("NFKEEPER_TEST_LOSE_RESEND_ACK");

// Whether a datagram of acknowledgements holds the refusal of the batch numbered from `base`.
bool SaysRefused(const uint8_t* data, ssize_t n, uint32_t base) {
  const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(data);
  int len = static_cast<int>(n);
  for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
    if (nlh->nlmsg_type == NLMSG_ERROR && nlh->nlmsg_seq == base &&
        static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh))->error == -ERESTART) return true;
  }
  return false;
}

}  // namespace

CommitRun::CommitRun(NftSocket* sock, std::unique_ptr<EncodedBatch> batch, bool echo, std::vector<uint32_t> echoOps)
    : sock_(sock), batch_(std::move(batch)), echo_(echo), echoOps_(std::move(echoOps)) {}

CommitWorker::CommitWorker(Napi::Env env, Napi::Object self, std::unique_ptr<CommitRun> run, NftSocket* sock)
    : Napi::AsyncWorker(env, "nfkeeper.commit"),
      deferred_(Napi::Promise::Deferred::New(env)),
      sock_(sock),
      self_(Napi::Persistent(self)),
      run_(std::move(run)) {}

// Queued holding the gate (NftSocket::QueueGated).
void CommitWorker::Execute() {
  run_->Run();
  sock_->gate().unlock();
}

void CommitWorker::OnOK() {
  sock_->StartWaiting();
  Napi::Value v;
  bool ok = run_->Outcome(Env(), &v);
  if (run_->RefusedByGeneration()) sock_->KeepRefused(std::move(run_));
  if (ok) deferred_.Resolve(v);
  else deferred_.Reject(v);
}

void CommitWorker::OnError(const Napi::Error& e) {
  sock_->StartWaiting();
  run_->Release();
  deferred_.Reject(e.Value());
}

namespace {
constexpr uint16_t kNewRule = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE;
}  // namespace

int CommitRun::OpIndexOf(uint32_t seq) const {
  // Unsigned arithmetic: correct across the 2^32 wrap of sequence numbers.
  uint32_t rel = seq - base_;
  if (rel == 0 || rel - 1 >= batch_->messageOp.size()) return -1;
  return batch_->messageOp[rel - 1];
}

bool CommitRun::EchoesOp(uint32_t seq) const {
  int op = OpIndexOf(seq);
  return op >= 0 && std::binary_search(echoOps_.begin(), echoOps_.end(), static_cast<uint32_t>(op));
}

void CommitRun::Run() {
  if (sock_->closed()) {
    ioErrno_ = EBADF;
    ioStep_ = "socket is closed";
    return;
  }
  if (batch_->claimsTable) sock_->NoteClaim();
  size_t count = batch_->messageOp.size() + 2;
  // A resend (Recommit) runs again: what the last run read goes, its numbering is replaced.
  acks_.clear();
  echoed_.clear();
  echoedDigests_.clear();
  lostAcks_ = false;
  const uint32_t previous = base_;
  base_ = sock_->NextSeq(static_cast<uint32_t>(count));
  // Each acknowledgement is one skb (its truesize counts, not its length); the
  // kernel drops what does not fit in the receive buffer (ENOBUFS) while the
  // batch itself still commits. Grow the buffer; if it cannot hold them all,
  // ask only for errors, which are enough to decide the outcome. Big batches
  // ask for errors only anyway: a success ack per message cost the kernel an
  // skb and us a recv() each and tells nothing an
  // error would not; an error names its message's seq either way.
  // An echoed rule is about as big as an ack: room for two messages per op.
  bool roomForAll = sock_->EnsureBuffers(batch_->bytes.size(), echo_ ? count + (echoOps_.empty() ? count : echoOps_.size()) : count);
  ackAll_ = roomForAll && batch_->messageOp.size() <= kAckEveryMessageUpTo;
  // Echoes for any batch, installs of 100,000 rules included (the kernel packs a commit's
  // notifications into skbs of a few KiB, nft_commit_notify): reading a big chain back instead
  // costs the kernel a walk from the chain's head per dump skb. The buffer grown above holds them;
  // where a receiveBufferLimit keeps it smaller, the kernel drops what does not fit and the
  // outcome says the echo was cut (Outcome), and the caller reads instead.
  // The batch was encoded with sequence numbers from 0 (or last sent from `previous`); give it real ones.
  uint8_t* p = batch_->bytes.data();
  size_t left = batch_->bytes.size();
  size_t index = 0;
  while (left >= sizeof(nlmsghdr)) {
    nlmsghdr* nlh = reinterpret_cast<nlmsghdr*>(p);
    nlh->nlmsg_seq += base_ - previous;
    // The first message after BATCH_BEGIN always asks for an ack: a failure of
    // the commit phase (after every message was accepted) is reported with
    // its sequence number, and its success ack tells the two cases apart.
    // Set again where a resend (Recommit) acks every message and its first send did not.
    if (index >= 2 && nlh->nlmsg_type != NFNL_MSG_BATCH_END) {
      if (ackAll_) nlh->nlmsg_flags |= NLM_F_ACK;
      else nlh->nlmsg_flags &= ~NLM_F_ACK;
    }
    if (echo_ && nlh->nlmsg_type == kNewRule && (echoOps_.empty() || EchoesOp(nlh->nlmsg_seq))) nlh->nlmsg_flags |= NLM_F_ECHO;
    size_t step = MNL_ALIGN(nlh->nlmsg_len);
    p += step;
    left -= step;
    index++;
  }
  // A resend (Recommit) has a base from its first send.
  const bool resend = previous != 0;
  if (!resend) KillPoint("commit-sending");
  if (sock_->SendAll(batch_->bytes.data(), batch_->bytes.size()) < 0) {
    ioErrno_ = errno;
    ioStep_ = "send batch";
    return;
  }
  KillPoint(resend ? "recommit-sent" : "commit-sent");
  bool loseAck = resend && kLoseResendAck != nullptr;
  // nfnetlink processes the whole batch inside sendmsg(), so every ack is
  // already queued: read until the queue is empty, even after an error.
  for (;;) {
    ssize_t n = sock_->Recv(MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ENOBUFS) {
        // Some acknowledgements were dropped; the rest are still queued.
        lostAcks_ = true;
        continue;
      }
      ioErrno_ = errno;
      ioStep_ = "read acknowledgements";
      return;
    }
    if (loseAck && strcmp(kLoseResendAck, "refused") == 0 && !SaysRefused(sock_->buffer().data(), n, base_)) loseAck = false;
    if (loseAck) {
      loseAck = false;
      dprintf(2, "nfkeeper: a resend's acknowledgements lost (NFKEEPER_TEST_LOSE_RESEND_ACK)\n");
      lostAcks_ = true;  // as ENOBUFS: the datagram dropped, the rest still queued
      continue;
    }
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(sock_->buffer().data());
    int len = static_cast<int>(n);
    for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_seq - base_ >= count) continue;  // not ours (a straggler)
      if (echo_ && nlh->nlmsg_type == kNewRule && HasNfgenmsg(nlh)) {
        AttrTable t(NFTA_RULE_MAX);
        mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
        uint64_t handle = 0;
        if (!AttrU64(t.at[NFTA_RULE_HANDLE], &handle)) continue;
        echoed_.push_back({nlh->nlmsg_seq, handle});
        // The rule as the kernel holds it, digested as a dump of it would be (dump.cc).
        // One that looks up anonymous sets: with them unnamed, as it was sent (EncodedBatch::unnamed).
        if (batch_->wantDigests) {
          std::string d = RuleDigest(t.at[NFTA_RULE_USERDATA], t.at[NFTA_RULE_EXPRESSIONS]);
          if (d.empty()) d = RuleDigest(t.at[NFTA_RULE_USERDATA], t.at[NFTA_RULE_EXPRESSIONS], true);
          echoedDigests_.push_back(std::move(d));
        }
        continue;
      }
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      const nlmsgerr* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      Ack ack{nlh->nlmsg_seq, -err->error, {}};
      // Extended ack (NLMSGERR_ATTR_MSG) follows the capped original header.
      if (err->error != 0 && (nlh->nlmsg_flags & NLM_F_ACK_TLVS)) {
        size_t off = sizeof(nlmsgerr);
        if (!(nlh->nlmsg_flags & NLM_F_CAPPED)) off += err->msg.nlmsg_len - sizeof(nlmsghdr);
        nlattr* attr;
        NFK_ATTR_FOR_EACH(attr, nlh, off) {
          if (mnl_attr_get_type(attr) == NLMSGERR_ATTR_MSG) ack.message = mnl_attr_get_str(attr);
        }
      }
      acks_.push_back(std::move(ack));
    }
  }
  KillPoint(resend ? "recommit-acked" : "commit-acked");
}

void CommitRun::Release() {
  sock_->ReturnEncodeBuffer(std::move(batch_->bytes));
}

int CommitRun::Settle(std::vector<std::pair<int32_t, uint64_t>>* handles) const {
  handles->clear();
  if (ioErrno_ != 0) return ioErrno_;
  size_t oks = 0;
  for (const Ack& a : acks_) {
    if (a.error != 0) return a.error;
    oks++;
  }
  size_t expected = ackAll_ ? batch_->messageOp.size() : (batch_->messageOp.empty() ? 0 : 1);
  if (lostAcks_ || oks < expected) return EPROTO;
  for (const auto& [seq, handle] : echoed_) {
    int op = OpIndexOf(seq);
    if (op >= 0) handles->push_back({op, handle});
  }
  return 0;
}

bool CommitRun::RefusedByGeneration() const {
  if (ioErrno_ != 0) return false;
  for (const Ack& a : acks_) {
    if (a.error == ERESTART && a.seq == base_) return true;
  }
  return false;
}

bool CommitRun::SetGeneration(uint32_t generation) {
  if (batch_->bytes.size() < sizeof(nlmsghdr)) return false;
  nlmsghdr* nlh = reinterpret_cast<nlmsghdr*>(batch_->bytes.data());
  nlattr* attr;
  NFK_ATTR_FOR_EACH(attr, nlh, sizeof(nfgenmsg)) {
    if (mnl_attr_get_type(attr) == NFNL_BATCH_GENID && mnl_attr_get_payload_len(attr) == sizeof(uint32_t)) {
      const uint32_t be = htonl(generation);
      std::memcpy(mnl_attr_get_payload(attr), &be, sizeof(be));
      return true;
    }
  }
  return false;
}

bool CommitRun::Outcome(Napi::Env env, Napi::Value* out) {
  // Kept for a resend (the caller hands it to NftSocket::KeepRefused); else the buffer goes back,
  // or, asked for the rules' expressions, to the caller with the outcome (kept_).
  if (!RefusedByGeneration()) {
    if (batch_->wantExprs) kept_ = std::move(batch_->bytes);
    else Release();
  }
  if (ioErrno_ != 0) {
    *out = MakeNetlinkError(env, ioStep_ + ": " + std::strerror(ioErrno_), ioErrno_, "commit").Value();
    return false;
  }
  const uint32_t firstSeq = base_ + 1;
  bool firstOk = false;
  size_t oks = 0;
  for (const Ack& a : acks_) {
    if (a.error == 0) {
      oks++;
      if (a.seq == firstSeq) firstOk = true;
    }
  }
  // nfnetlink reports a failure of the commit phase itself (validation of
  // jumps and hooks, an anonymous set no rule binds, ...) against the first
  // message after BATCH_BEGIN, before the per-message acks; that message's
  // own ack then says it was fine. Likewise ENOMEM for an error list that
  // could not be queued. Neither is that operation's fault.
  auto batchLevel = [&](const Ack& a) {
    return a.seq == firstSeq && a.error != 0 && (firstOk || a.error == ENOMEM);
  };
  const Ack* first = nullptr;
  for (const Ack& a : acks_) {
    if (a.error == 0) continue;
    if (first == nullptr) {
      first = &a;
      continue;
    }
    // Report the failing operation with the lowest index; batch-level last.
    bool aBatch = batchLevel(a), fBatch = batchLevel(*first);
    if (aBatch != fBatch) {
      if (fBatch) first = &a;
    } else if (a.seq - base_ < first->seq - base_) {
      first = &a;
    }
  }
  // The kernel echoes a batch's rules only once it committed (a refused batch is aborted before
  // its notifications are made), and they come before the acknowledgements: an echo of ours, then
  // a full buffer, is a batch that went through whose echo was cut. It resolves without handles,
  // so the caller reads what the commit wrote instead.
  const bool echoCut = echo_ && lostAcks_ && !echoed_.empty();
  if (first == nullptr) {
    size_t expected = ackAll_ ? batch_->messageOp.size() : (batch_->messageOp.empty() ? 0 : 1);
    if ((lostAcks_ || oks < expected) && !echoCut) {
      // Without an error we cannot tell whether a dropped ack was a refusal.
      std::string msg = "commit: " + std::to_string(oks) + " of " + std::to_string(expected) +
                        " acknowledgements arrived";
      if (lostAcks_) msg += " (receive buffer overrun)";
      msg += "; the outcome is unknown, re-read the ruleset";
      *out = MakeNetlinkError(env, msg, lostAcks_ ? ENOBUFS : EPROTO, "commit").Value();
      return false;
    }
    if (!echo_ && !batch_->wantDigests && !batch_->wantExprs) {
      *out = env.Undefined();
      return true;
    }
    Napi::Object result = Napi::Object::New(env);
    if (echo_ && !echoCut) {
      // { handles: Float64Array [opIndex, handle, opIndex, handle, ...] } for every rule the kernel
      // echoed (one typed array: an install echoes 100,000), and with digests { held: [...] }: per op
      // index, the digest of the rule it echoed.
      std::vector<double> flat;
      flat.reserve(2 * echoed_.size());
      Napi::Array held;
      if (batch_->wantDigests) held = Napi::Array::New(env, batch_->digests.size());
      for (size_t e = 0; e < echoed_.size(); e++) {
        int op = OpIndexOf(echoed_[e].first);
        if (op < 0) continue;
        flat.push_back(op);
        flat.push_back(static_cast<double>(echoed_[e].second));
        if (batch_->wantDigests && static_cast<size_t>(op) < batch_->digests.size()) held.Set(op, Napi::String::New(env, echoedDigests_[e]));
      }
      Napi::Float64Array handles = Napi::Float64Array::New(env, flat.size());
      if (!flat.empty()) std::memcpy(handles.Data(), flat.data(), flat.size() * sizeof(double));
      result.Set("handles", handles);
      if (batch_->wantDigests) result.Set("held", held);
    }
    if (echoCut) result.Set("echoCut", true);
    if (batch_->wantDigests) {
      Napi::Array digests = Napi::Array::New(env, batch_->digests.size());
      for (uint32_t i = 0; i < batch_->digests.size(); i++) digests.Set(i, Napi::String::New(env, batch_->digests[i]));
      result.Set("digests", digests);
      if (!batch_->unnamed.empty()) {
        Napi::Array unnamed = Napi::Array::New(env, batch_->unnamed.size());
        for (uint32_t i = 0; i < batch_->unnamed.size(); i++) {
          if (!batch_->unnamed[i].empty()) unnamed.Set(i, Napi::String::New(env, batch_->unnamed[i]));
        }
        result.Set("unnamed", unnamed);
      }
    }
    if (batch_->wantExprs && !kept_.empty()) {
      // The batch's bytes handed over (kept above instead of given back), not copied: an
      // install's are tens of MiB. The Buffer owns them from here. (NewOrCopy: where external
      // buffers are not allowed, a copy, the vector freed at once.)
      auto* kept = new std::vector<uint8_t>(std::move(kept_));
      Napi::Buffer<uint8_t> exprs = Napi::Buffer<uint8_t>::NewOrCopy(env, kept->data(), kept->size(),
        [](Napi::Env, uint8_t*, std::vector<uint8_t>* v) { delete v; }, kept);
      Napi::Uint32Array at = Napi::Uint32Array::New(env, batch_->exprsAt.size());
      std::memcpy(at.Data(), batch_->exprsAt.data(), batch_->exprsAt.size() * sizeof(uint32_t));
      std::vector<uint32_t>().swap(batch_->exprsAt);
      result.Set("exprs", exprs);
      result.Set("exprsAt", at);
    }
    *out = result;
    return true;
  }
  int opIndex = batchLevel(*first) ? -1 : OpIndexOf(first->seq);
  std::string where;
  if (opIndex >= 0) where = "operation " + std::to_string(opIndex);
  else if (first->seq == base_) where = "batch begin";
  else where = "batch commit";
  std::string msg = where + ": " + std::strerror(first->error);
  if (!first->message.empty()) msg += " (" + first->message + ")";
  // A refusal means the kernel aborted the whole batch; lost acks do not
  // change that, they only hide further refusals.
  if (lostAcks_) msg += " (more refusals may have been lost: receive buffer overrun)";
  Napi::Error e = MakeNetlinkError(env, msg, first->error, "commit", opIndex);
  // Every refusal, for callers that want more than the first.
  Napi::Array all = Napi::Array::New(env);
  uint32_t i = 0;
  for (const Ack& a : acks_) {
    if (a.error == 0) continue;
    Napi::Object o = Napi::Object::New(env);
    o.Set("opIndex", batchLevel(a) ? -1 : OpIndexOf(a.seq));
    o.Set("errno", a.error);
    if (!a.message.empty()) o.Set("message", a.message);
    all.Set(i++, o);
  }
  e.Value().Set("refusals", all);
  *out = e.Value();
  return false;
}

}  // namespace nfk
