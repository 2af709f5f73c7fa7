// NftMonitor: a socket bound to the NFNLGRP_NFTABLES multicast group and a
// thread that reads it. Events are filtered here so only commits that touch
// the watched tables (or delete any table) wake JavaScript, grouped per
// generation: the kernel ends every commit's events with NFT_MSG_NEWGEN.
#pragma once

#include <napi.h>
#include <libmnl/libmnl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common.h"
#include "event.h"

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
  void ParseFilter(Napi::Env env, const Napi::Value& tables, const Napi::Value& ignorePorts);
  void Run();
  void Deliver(MonitorBatch* batch);

  mnl_socket* nl_ = nullptr;
  int wakeFd_ = -1;
  std::thread thread_;
  Napi::ThreadSafeFunction tsfn_;
  std::atomic<bool> stopping_{false};
  bool closed_ = false;

  // Guards the filter, and the batcher's run and the delivered count, which
  // progress() reads together.
  std::mutex filterMutex_;
  EventFilter filter_;
  EventBatcher batcher_;
  double delivered_ = 0;  // batches handed to JavaScript, overflow reports included

  AddonData* data_ = nullptr;
};

}  // namespace nfk
