// NftSocket: one netfilter netlink socket (NETLINK_NETFILTER), bound in the
// network namespace it was opened in for its whole life. It serves GETGEN
// synchronously, and dumps and batch commits on worker threads; a mutex keeps
// one request at a time on the wire.
#pragma once

#include <napi.h>
#include <libmnl/libmnl.h>

#include <cstdint>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

namespace nfk {

// Opens a NETLINK_NETFILTER socket in the namespace at `netnsPath` (or the
// current one when empty) from a short-lived thread, since setns() only
// moves the calling thread. Returns nullptr and sets errno on failure.
mnl_socket* OpenNetfilterSocket(const std::string& netnsPath, unsigned groups, std::string* failedStep);

class NftSocket : public Napi::ObjectWrap<NftSocket>, public Closeable {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit NftSocket(const Napi::CallbackInfo& info);
  ~NftSocket() override;
  void CloseNow() override;

  // Called by workers with mutex_ held.
  int SendAll(const void* data, size_t len);
  // Reads one datagram into buf_; returns its length or -1 with errno.
  ssize_t Recv(int flags);
  std::vector<uint8_t>& buffer() { return buf_; }
  std::mutex& mutex() { return mutex_; }
  uint32_t NextSeq(uint32_t count) {
    return seq_.fetch_add(count);
  }
  bool closed() const { return nl_ == nullptr; }
  // Grows the kernel-side buffers so a batch of `bytes` and `messages` acks fit.
  void EnsureBuffers(size_t bytes, size_t messages);

 private:
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value GetPortId(const Napi::CallbackInfo& info);
  Napi::Value GetClosed(const Napi::CallbackInfo& info);
  Napi::Value Generation(const Napi::CallbackInfo& info);
  Napi::Value Dump(const Napi::CallbackInfo& info);
  Napi::Value Commit(const Napi::CallbackInfo& info);
  void ThrowIfClosed(Napi::Env env, const char* op);

  mnl_socket* nl_ = nullptr;
  uint32_t portId_ = 0;
  std::atomic<uint32_t> seq_{1};
  size_t sndbuf_ = 0;
  size_t rcvbuf_ = 0;
  std::vector<uint8_t> buf_;
  std::mutex mutex_;
  AddonData* data_ = nullptr;
};

}  // namespace nfk
