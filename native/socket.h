// NftSocket: one netfilter netlink socket (NETLINK_NETFILTER), bound in the
// network namespace it was opened in for its whole life. It serves GETGEN
// synchronously, small kernel-filtered dumps inline when the socket is free
// (bounded: at most two datagrams), and everything else (big dumps, batch
// commits) on worker threads. A gate keeps one request at a time on the wire
// (over either socket).
// An interrupted dump's rest is not read: the socket is replaced (Reopen), in
// the same namespace, on the same port id. A socket that may own a table
// cannot be replaced: its dumps go over a second socket that owns nothing.
#pragma once

#include <napi.h>
#include <libmnl/libmnl.h>

#include <condition_variable>
#include <cstdint>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

namespace nfk {

// A binary semaphore: like a mutex, but the thread that releases it need not
// be the one that took it, so the JS thread can start a dump and hand the
// socket, still held, to a worker that finishes it.
class Gate {
 public:
  void lock() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [this] { return !busy_; });
    busy_ = true;
  }
  bool try_lock() {
    std::lock_guard<std::mutex> l(m_);
    if (busy_) return false;
    busy_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> l(m_);
      busy_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool busy_ = false;
};

// Opens a NETLINK_NETFILTER socket in the namespace at `netnsPath` (or the
// current one when empty) from a short-lived thread, since setns() only
// moves the calling thread. Returns nullptr and sets errno on failure.
// Test only: the process kills itself at `point` when NFKEEPER_TEST_KILL_AT names it (socket.cc).
void KillPoint(const char* point);

mnl_socket* OpenNetfilterSocket(const std::string& netnsPath, unsigned groups, std::string* failedStep);

class NftSocket : public Napi::ObjectWrap<NftSocket>, public Closeable {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit NftSocket(const Napi::CallbackInfo& info);
  ~NftSocket() override;
  void CloseNow() override;

  // Called with the gate held. On `via`, this socket or its dump-only one (DumpSocket).
  int SendAll(mnl_socket* via, const void* data, size_t len);
  int SendAll(const void* data, size_t len) { return SendAll(nl_, data, len); }
  // Reads one datagram into buf_; returns its length or -1 with errno. `groups`: set to the
  // datagram's multicast groups (a notification: non-zero).
  ssize_t Recv(mnl_socket* via, int flags, uint32_t* groups = nullptr);
  ssize_t Recv(int flags) { return Recv(nl_, flags); }
  // Called with the gate held. Joins (`on`) or leaves the ruleset's change notifications
  // (NFNLGRP_NFTABLES) on `via`, reading away first whatever its queue holds (nothing of a request
  // is pending then): a dump of one table watches the commits made while it runs. False if the
  // kernel refused to join.
  bool Watch(mnl_socket* via, bool on);
  // Joining: a receive buffer that holds a busy neighbour's notifications through a stall.
  void WatchBuffer(mnl_socket* via);
  std::vector<uint8_t>& buffer() { return buf_; }
  Gate& gate() { return gate_; }
  // Queues `w` to libuv's pool once it holds the gate (now, or when the work before it is done), in
  // order. A pool thread never waits for the gate: the holder may be queued behind it, and with the
  // pool's four threads all waiting the process stops (fs calls share the pool). JS thread only.
  void QueueGated(Napi::AsyncWorker* w);
  // Hands a released gate to the next waiting work; called on the JS thread after a worker's release.
  void StartWaiting();
  // On the JS thread: the gate, if it is free and no work waits for it (work queued first goes first).
  bool TryTakeGate() { return waiting_.empty() && gate_.try_lock(); }
  // On the JS thread: gives back a gate taken there, to the next waiting work if any.
  void ReleaseGate() {
    gate_.unlock();
    StartWaiting();
  }
  uint32_t NextSeq(uint32_t count) {
    return seq_.fetch_add(count);
  }
  bool closed() const { return nl_ == nullptr; }
  // Called with the gate held. Replaces the socket by a new one in the same namespace, with the
  // same options and port id, ending whatever the kernel still sends on the old one (an
  // interrupted dump's rest). False, the old socket kept, when the new one cannot be opened, or
  // when this socket may own a table: closing it would take the table's owner flag away.
  bool Reopen();
  // A commit on this socket carried a table with NFT_TABLE_F_OWNER. Gate held.
  void NoteClaim() { mayOwn_ = true; }
  // An interrupted dump taken all the same (the watch saw no commit name its table).
  void NoteTakenInterrupted() { takenInterrupted_++; }
  // Called with the gate held. The socket a dump goes over: this one, unless it may own a table
  // (it cannot be replaced); then a second socket that owns nothing and sends no commit, opened
  // when first needed, in the same namespace with the same options. This one again if that cannot
  // be opened (EMFILE): its interrupted dumps are then read to their end.
  mnl_socket* DumpSocket();
  // Called with the gate held. Ends the dump on `via` (from DumpSocket) without reading its rest:
  // the dump-only socket is closed (the next dump opens another), this one is replaced (Reopen).
  // False, nothing changed, where this one cannot be.
  bool EndDump(mnl_socket* via);
  // Grows the kernel-side buffers for a batch of `bytes` and `messages`.
  // Returns whether the receive buffer now holds an ack for every message.
  bool EnsureBuffers(size_t bytes, size_t messages);
  // The memory a batch is encoded into, kept between commits (JS thread
  // only) up to 256 KiB: small commits (repairs) reuse it; a big batch's
  // (an install's) is given back, not kept for the daemon's life.
  std::vector<uint8_t> TakeEncodeBuffer() { return std::move(encodeBuf_); }
  void ReturnEncodeBuffer(std::vector<uint8_t>&& b);
  // JS thread. The last commit the kernel refused by its generation, as encoded, for Recommit; the
  // next commit (or close) lets it go.
  void KeepRefused(std::unique_ptr<class CommitRun> run);

 private:
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value GetPortId(const Napi::CallbackInfo& info);
  Napi::Value NetnsCookie(const Napi::CallbackInfo& info);
  Napi::Value GetClosed(const Napi::CallbackInfo& info);
  Napi::Value GetTestDrops(const Napi::CallbackInfo& info);
  Napi::Value GetTakenInterrupted(const Napi::CallbackInfo& info);
  Napi::Value Generation(const Napi::CallbackInfo& info);
  Napi::Value Dump(const Napi::CallbackInfo& info);
  Napi::Value Commit(const Napi::CallbackInfo& info);
  Napi::Value CommitNow(const Napi::CallbackInfo& info);
  Napi::Value Recommit(const Napi::CallbackInfo& info);
  // Runs `run` as commit() does: here when small and the socket free, else on a worker.
  Napi::Value StartCommit(Napi::Env env, Napi::Object self, std::unique_ptr<class CommitRun> run, bool digest);
  std::unique_ptr<class CommitRun> PrepareCommit(const Napi::CallbackInfo& info);
  void ThrowIfClosed(Napi::Env env, const char* op);

  // A new socket in this one's namespace, with OpenHere's options; bound to any port or unbound.
  mnl_socket* OpenBeside(bool bind);

  mnl_socket* nl_ = nullptr;
  // The dump-only socket (DumpSocket), or none. Gate held for every use.
  mnl_socket* dumpNl_ = nullptr;
  std::atomic<uint32_t> portId_{0};
  bool ownNamespace_ = true;
  std::atomic<bool> mayOwn_{false};
  std::atomic<uint32_t> takenInterrupted_{0};
  std::atomic<uint32_t> seq_{1};
  size_t sndbuf_ = 0;
  size_t rcvbuf_ = 0;
  size_t dumpRcvbuf_ = 0;  // the dump-only socket's, set by WatchBuffer
  // Test only (NFKEEPER_TEST_DROP_NOTIFICATION): the notification a watch drops, counted from its
  // join; how many were dropped so. Gate held for every use but the count's read.
  uint32_t dropAt_ = 0;
  uint32_t notices_ = 0;
  std::atomic<uint32_t> testDrops_{0};
  size_t rcvbufGranted_ = 0;  // SO_RCVBUF as the kernel granted it, read after each change
  // Upper bound for the receive buffer (0: none); see OpenOptions.receiveBufferLimit.
  size_t rcvbufLimit_ = 0;
  std::vector<uint8_t> buf_;
  std::vector<uint8_t> encodeBuf_;
  std::unique_ptr<class CommitRun> refused_;
  Gate gate_;
  std::deque<Napi::AsyncWorker*> waiting_;
  AddonData* data_ = nullptr;
};

// The gate held by a call on the JS thread; released, it goes to the next waiting work.
class JsGateHold {
 public:
  explicit JsGateHold(NftSocket* s) : s_(s) { s_->gate().lock(); }
  // Takes over a gate the caller already holds.
  JsGateHold(NftSocket* s, bool held) : s_(s) {
    if (!held) s_->gate().lock();
  }
  ~JsGateHold() { s_->ReleaseGate(); }
  JsGateHold(const JsGateHold&) = delete;
  JsGateHold& operator=(const JsGateHold&) = delete;

 private:
  NftSocket* s_;
};

}  // namespace nfk
