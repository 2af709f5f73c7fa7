// CommitWorker sends one encoded batch and reads every acknowledgement, so a
// failure names the operation that caused it (knftables cannot say which).
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "encode.h"
#include "socket.h"

namespace nfk {

// Batches with more messages than this ask the kernel for errors only (plus
// the first message's ack, which tells a commit-phase failure apart).
constexpr size_t kAckEveryMessageUpTo = 64;

// Batches up to this size commit inline on the JS thread when the socket is
// free: the kernel runs the whole transaction inside sendmsg(), for a few
// rules less than the worker thread's hop there and back. Bigger ones (an
// install of thousands of rules is long work in the kernel) stay off the loop.
constexpr size_t kInlineCommitUpTo = 64;
constexpr size_t kInlineCommitBytes = 64 * 1024;

// One commit of an encoded batch: sends it, reads every acknowledgement, and
// turns them into the result (or the refusal naming the failing operation).
// Runs on the JS thread (small batches, NftSocket::Commit and CommitNow) or
// in a CommitWorker.
class CommitRun {
 public:
  // With `echo`, the batch also asks for its new rules back (NLM_F_ECHO), and the result holds
  // their handles (and, with the batch's digests, each echoed rule's digest): the keeper learns
  // what it wrote, and that the kernel holds it as sent, without dumping the chain again.
  // `echoOps`, when not empty: only the rules of those op indices are echoed (the caller derives
  // the others' handles from them).
  CommitRun(NftSocket* sock, std::unique_ptr<EncodedBatch> batch, bool echo, std::vector<uint32_t> echoOps = {});
  // Small enough to commit on the JS thread.
  bool Small() const {
    return batch_->messageOp.size() <= kInlineCommitUpTo && batch_->bytes.size() <= kInlineCommitBytes;
  }
  // The commit itself, with the socket's gate held by the caller.
  void Run();
  // The batch as encoded (for DigestEncodedRules, which may run beside Run()).
  EncodedBatch* Batch() const { return batch_.get(); }
  // On the JS thread, after Run(): true and the result (undefined, or { handles } for an echo), or
  // false and the error value. Gives the encode buffer back to the socket.
  bool Outcome(Napi::Env env, Napi::Value* out);
  // The encode buffer back to the socket without an outcome (a worker that failed).
  void Release();
  // After Run(): the kernel refused the batch by its generation (ERESTART on BATCH_BEGIN), nothing
  // changed. Outcome() then keeps the encoded batch (no Release) for a resend (NftSocket::Recommit).
  bool RefusedByGeneration() const;
  // Writes `generation` into the batch's NFNL_BATCH_GENID; false when it carries none.
  bool SetGeneration(uint32_t generation);
  // Outcome() without N-API, for the monitor's armed reaction: 0 and the echoed handles as (op
  // index, handle) when every acknowledgement said yes, else the errno of the first refusal, of
  // the I/O, or EPROTO when acknowledgements are missing (the outcome is unknown).
  int Settle(std::vector<std::pair<int32_t, uint64_t>>* handles) const;

 private:
  struct Ack {
    uint32_t seq;
    int error;  // 0 or a positive errno
    std::string message;  // extended ack text, if the kernel gave one
  };

  // opIndex of the message with sequence number `seq`, or -1 (batch markers).
  int OpIndexOf(uint32_t seq) const;
  // Whether the message with sequence number `seq` asks its echo (echoOps_).
  bool EchoesOp(uint32_t seq) const;

  NftSocket* sock_;
  std::unique_ptr<EncodedBatch> batch_;
  // The sequence numbers the batch's messages carry over their encoded ones (0 until Run()).
  uint32_t base_ = 0;
  // false: the batch is big, or the acknowledgements of every message would
  // not fit in the receive buffer, so only the first message asked for one
  // and the kernel reported errors only.
  bool ackAll_ = true;
  bool lostAcks_ = false;  // ENOBUFS while reading acknowledgements
  int ioErrno_ = 0;
  // The batch's bytes, asked for with the rules' expressions (EncodedBatch::wantExprs): the outcome's.
  std::vector<uint8_t> kept_;
  std::string ioStep_;
  std::vector<Ack> acks_;
  bool echo_ = false;
  // Sorted op indices whose NEWRULE asks its echo; empty: every NEWRULE's (with echo_).
  std::vector<uint32_t> echoOps_;
  // (seq, handle) of each NEWRULE the kernel echoed back.
  std::vector<std::pair<uint32_t, uint64_t>> echoed_;
  // With the batch's digests: the RuleDigest of each echoed rule, as echoed_.
  std::vector<std::string> echoedDigests_;
};

// A CommitRun on a worker thread (a big batch, or the socket busy), settling a promise.
class CommitWorker : public Napi::AsyncWorker {
 public:
  CommitWorker(Napi::Env env, Napi::Object self, std::unique_ptr<CommitRun> run, NftSocket* sock);
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& e) override;

 private:
  Napi::Promise::Deferred deferred_;
  NftSocket* sock_;
  Napi::ObjectReference self_;
  std::unique_ptr<CommitRun> run_;
};

}  // namespace nfk
