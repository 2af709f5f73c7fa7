// NftMonitor: a socket bound to the NFNLGRP_NFTABLES multicast group, polled
// by the JS thread's event loop (uv_poll): the kernel's notification wakes
// that thread itself, with no reader thread to wake first and hand over from
// (that hop was the largest share of a small repair's latency). Events are
// filtered here, in C++, so only commits that touch the watched tables (or
// delete any table) call into JavaScript, grouped per generation: the kernel
// ends every commit's events with NFT_MSG_NEWGEN.
#pragma once

#include <napi.h>
#include <libmnl/libmnl.h>
#include <uv.h>

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "event.h"
#include "socket.h"

namespace nfk {

class NftMonitor : public Napi::ObjectWrap<NftMonitor>, public Closeable {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit NftMonitor(const Napi::CallbackInfo& info);
  ~NftMonitor() override;
  void CloseNow() override;

 private:
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value SetFilter(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  Napi::Value Progress(const Napi::CallbackInfo& info);
  Napi::Value Anchor(const Napi::CallbackInfo& info);
  Napi::Value SkipOwn(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value Disarm(const Napi::CallbackInfo& info);
  Napi::Value Pause(const Napi::CallbackInfo& info);
  Napi::Value Resume(const Napi::CallbackInfo& info);
  // The armed repair of `b` (see Arm): true when it committed or was refused (b's repair fields say
  // which), false when `b` is not one it answers (JavaScript decides, as without it).
  bool TryRepair(MonitorBatch* b);
  void DisarmNow();
  void ParseFilter(Napi::Env env, const Napi::Value& tables, const Napi::Value& ignorePorts);
  static void OnReadable(uv_poll_t* handle, int status, int events);
  // Reads what the socket holds (up to a bound per wake-up) and calls back once per finished batch.
  void ReadAvailable();
  // `keys`: the record keys fetched so far in this wake-up (kKeyCount slots, see monitor.cc).
  void Deliver(Napi::Env env, Napi::Function cb, napi_value* keys, MonitorBatch* batch);

  mnl_socket* nl_ = nullptr;
  // Heap-allocated: libuv frees it in uv_close's callback, which may run after this object is gone.
  uv_poll_t* poll_ = nullptr;
  Napi::FunctionReference callback_;
  Napi::Reference<Napi::Array> keys_;  // the records' property keys (monitor.cc, Key)
  Napi::AsyncContext asyncContext_;
  std::vector<uint8_t> buf_;
  bool closed_ = false;
  bool failed_ = false;  // the socket failed (not EAGAIN, EINTR or ENOBUFS): reading stopped

  // Read and written on the JS thread only (its methods and the poll callback); no pool worker
  // (dump.cc, batch.cc) reaches the monitor.
  EventFilter filter_;
  EventBatcher batcher_;
  double delivered_ = 0;  // batches handed to JavaScript, overflow reports included

  AddonData* data_ = nullptr;

  // The armed repair (Arm): per owned rule, by its kernel handle, the NEWRULE message that re-adds
  // it where it stands, valid while the watched tables are as they were at armedGen_.
  struct ArmedRule {
    uint32_t family = 0;
    std::string table;
    std::string chain;
    std::vector<uint8_t> message;   // seq 1 (relative), as EncodeBatch wrote it
    size_t positionAt = 0;          // offset of NFTA_RULE_POSITION's u64 in message, 0: none (insert at the head)
    uint64_t position = 0;
  };
  bool armed_ = false;
  uint32_t armedGen_ = 0;
  std::unordered_map<uint64_t, ArmedRule> armedRules_;
  std::vector<uint8_t> armBegin_, armEnd_;  // BATCH_BEGIN (NFNL_BATCH_GENID at armGenAt_) and BATCH_END
  size_t armGenAt_ = 0;
  NftSocket* armSock_ = nullptr;
  Napi::ObjectReference armSockRef_;
};

}  // namespace nfk
