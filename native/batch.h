// CommitWorker sends one encoded batch and reads every acknowledgement, so a
// failure names the operation that caused it (knftables cannot say which).
#pragma once

#include <napi.h>

#include <memory>

#include "encode.h"
#include "socket.h"

namespace nfk {

// Batches with more messages than this ask the kernel for errors only (plus
// the first message's ack, which tells a commit-phase failure apart).
constexpr size_t kAckEveryMessageUpTo = 64;

class CommitWorker : public Napi::AsyncWorker {
 public:
  CommitWorker(Napi::Env env, NftSocket* sock, Napi::Object self, std::unique_ptr<EncodedBatch> batch);
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& e) override;

 private:
  struct Ack {
    uint32_t seq;
    int error;  // 0 or a positive errno
    std::string message;  // extended ack text, if the kernel gave one
  };

  // opIndex of the message with sequence number `seq`, or -1 (batch markers).
  int OpIndexOf(uint32_t seq) const;

  Napi::Promise::Deferred deferred_;
  NftSocket* sock_;
  Napi::ObjectReference self_;
  std::unique_ptr<EncodedBatch> batch_;
  uint32_t base_ = 0;
  // false: the batch is big, or the acknowledgements of every message would
  // not fit in the receive buffer, so only the first message asked for one
  // and the kernel reported errors only.
  bool ackAll_ = true;
  bool lostAcks_ = false;  // ENOBUFS while reading acknowledgements
  int ioErrno_ = 0;
  std::string ioStep_;
  std::vector<Ack> acks_;
};

}  // namespace nfk
