#include "batch.h"

#include "common.h"

#include <libmnl/libmnl.h>
#include <linux/netlink.h>

#include <cerrno>
#include <cstring>

namespace nfk {

CommitWorker::CommitWorker(Napi::Env env, NftSocket* sock, Napi::Object self,
                           std::unique_ptr<EncodedBatch> batch)
    : Napi::AsyncWorker(env, "nfkeeper.commit"),
      deferred_(Napi::Promise::Deferred::New(env)),
      sock_(sock),
      self_(Napi::Persistent(self)),
      batch_(std::move(batch)) {}

void CommitWorker::Execute() {
  std::lock_guard<std::mutex> lock(sock_->mutex());
  if (sock_->closed()) {
    ioErrno_ = EBADF;
    ioStep_ = "socket is closed";
    return;
  }
  // The batch was encoded with sequence numbers from 0; give it real ones.
  size_t count = batch_->messageOp.size() + 2;
  base_ = sock_->NextSeq(static_cast<uint32_t>(count));
  uint8_t* p = batch_->bytes.data();
  size_t left = batch_->bytes.size();
  while (left >= sizeof(nlmsghdr)) {
    nlmsghdr* nlh = reinterpret_cast<nlmsghdr*>(p);
    nlh->nlmsg_seq += base_;
    size_t step = MNL_ALIGN(nlh->nlmsg_len);
    p += step;
    left -= step;
  }
  sock_->EnsureBuffers(batch_->bytes.size(), count);
  if (sock_->SendAll(batch_->bytes.data(), batch_->bytes.size()) < 0) {
    ioErrno_ = errno;
    ioStep_ = "send batch";
    return;
  }
  // nfnetlink processes the whole batch inside sendmsg(), so every ack is
  // already queued: read until the queue is empty, even after an error.
  for (;;) {
    ssize_t n = sock_->Recv(MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      ioErrno_ = errno;  // ENOBUFS: acks were lost, the outcome is unknown
      ioStep_ = "read acknowledgements";
      return;
    }
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(sock_->buffer().data());
    int len = static_cast<int>(n);
    for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      if (nlh->nlmsg_seq < base_ || nlh->nlmsg_seq >= base_ + count) continue;  // not ours
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
}

void CommitWorker::OnOK() {
  Napi::Env env = Env();
  if (ioErrno_ != 0) {
    deferred_.Reject(MakeNetlinkError(env, ioStep_ + ": " + std::strerror(ioErrno_), ioErrno_, "commit").Value());
    return;
  }
  const Ack* first = nullptr;
  size_t oks = 0;
  for (const Ack& a : acks_) {
    if (a.error == 0) {
      oks++;
    } else if (first == nullptr || a.seq < first->seq) {
      first = &a;
    }
  }
  if (first == nullptr) {
    if (oks < batch_->messageOp.size()) {
      deferred_.Reject(MakeNetlinkError(env,
                                        "commit: " + std::to_string(oks) + " of " +
                                            std::to_string(batch_->messageOp.size()) +
                                            " operations acknowledged",
                                        EPROTO, "commit").Value());
      return;
    }
    deferred_.Resolve(env.Undefined());
    return;
  }
  int opIndex = -1;
  std::string where = "batch begin";
  if (first->seq > base_ && first->seq - base_ - 1 < batch_->messageOp.size()) {
    opIndex = batch_->messageOp[first->seq - base_ - 1];
    where = "operation " + std::to_string(opIndex);
  }
  std::string msg = where + ": " + std::strerror(first->error);
  if (!first->message.empty()) msg += " (" + first->message + ")";
  Napi::Error e = MakeNetlinkError(env, msg, first->error, "commit", opIndex);
  // Every refusal, for callers that want more than the first.
  Napi::Array all = Napi::Array::New(env);
  uint32_t i = 0;
  for (const Ack& a : acks_) {
    if (a.error == 0) continue;
    Napi::Object o = Napi::Object::New(env);
    int idx = a.seq > base_ && a.seq - base_ - 1 < batch_->messageOp.size()
                  ? batch_->messageOp[a.seq - base_ - 1] : -1;
    o.Set("opIndex", idx);
    o.Set("errno", a.error);
    if (!a.message.empty()) o.Set("message", a.message);
    all.Set(i++, o);
  }
  e.Value().Set("refusals", all);
  deferred_.Reject(e.Value());
}

}  // namespace nfk
