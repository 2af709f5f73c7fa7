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
  Napi::Value ReadNow(const Napi::CallbackInfo& info);
  Napi::Value Anchor(const Napi::CallbackInfo& info);
  Napi::Value Subscribe(const Napi::CallbackInfo& info);
  Napi::Value SkipOwn(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value Disarm(const Napi::CallbackInfo& info);
  Napi::Value Pause(const Napi::CallbackInfo& info);
  Napi::Value Resume(const Napi::CallbackInfo& info);
  // The armed reaction to `b` (see Arm): true when `b` matched one and it committed (b's reaction
  // fields say what came of it, refused or not), false when nothing was sent.
  bool React(MonitorBatch* b);
  void DisarmNow();
  void ParseFilter(Napi::Env env, const Napi::Value& tables, const Napi::Value& ignorePorts);
  // Has the kernel drop, before they are queued, the notifications the filter would drop (see monitor.cc).
  void AttachKernelFilter();
  static void OnReadable(uv_poll_t* handle, int status, int events);
  static void OnGathered(uv_timer_t* handle);
  // Reads what the socket holds (up to a bound per wake-up) and calls back once per finished batch.
  // Returns whether it read anything that concerns JavaScript (see Gather).
  bool ReadAvailable(int* datagrams, bool* bounded);
  // After a wake-up: whether to stop polling and read again only after kGatherMs (see monitor.cc).
  void Gather(bool concerned, int datagrams, bool bounded);
  // `keys`: the record keys fetched so far in this wake-up (kKeyCount slots, see monitor.cc).
  void Deliver(Napi::Env env, Napi::Function cb, napi_value* keys, MonitorBatch* batch);

  mnl_socket* nl_ = nullptr;
  // Heap-allocated: libuv frees it in uv_close's callback, which may run after this object is gone.
  uv_poll_t* poll_ = nullptr;
  // Reads a storm of other tables' commits in one go, kGatherMs to kGatherMaxMs apart, instead of one wake-up per commit (Gather).
  uv_timer_t* gather_ = nullptr;
  bool gathering_ = false;
  uint64_t gatherMs_ = 0;     // the wait before the gather's next read (monitor.cc: kGatherMs up to kGatherMaxMs)
  int quietWakes_ = 0;        // wake-ups in a row, each within kGatherMs of the last, that concerned no watched table
  uint64_t lastWakeMs_ = 0;   // the loop's time at the last wake-up
  Napi::FunctionReference callback_;
  Napi::Reference<Napi::Array> keys_;  // the records' property keys (monitor.cc, Key)
  Napi::AsyncContext asyncContext_;
  std::vector<uint8_t> buf_;  // kSlots datagrams of kSlotBytes, read by one recvmmsg
  bool closed_ = false;
  // Joined NFNLGRP_NFTABLES (at open, or by subscribe()): before that an anchor would claim a run
  // of commits this socket never saw, so Anchor ignores it.
  bool subscribed_ = false;
  bool failed_ = false;  // the socket failed (not EAGAIN, EINTR or ENOBUFS): reading stopped
  // Batches are being handed to JavaScript (ReadAvailable): a readNow() from a callback reads
  // nothing, or batches read later would overtake the ones still to be handed over.
  bool delivering_ = false;
  // Opened unread (8th argument): the socket is joined but not polled until the first progress(),
  // so a caller that never asks (a one-shot apply no commit refused) reads and decodes nothing.
  bool unread_ = false;

  // Read and written on the JS thread only (its methods and the poll callback); no pool worker
  // (dump.cc, batch.cc) reaches the monitor.
  EventFilter filter_;
  EventBatcher batcher_;
  double delivered_ = 0;  // batches handed to JavaScript, overflow reports included

  AddonData* data_ = nullptr;

  // The armed reactions (Arm): per trigger (TriggerKey of a commit's events), the prepared batch
  // that answers it, valid while the watched tables are as they were at armedGen_.
  struct Reaction {
    std::vector<uint8_t> bytes;      // BATCH_BEGIN .. BATCH_END, sequence numbers from 0, as EncodeBatch wrote them
    std::vector<int32_t> messageOp;  // see EncodedBatch
    size_t genAt = 0;                // offset of NFNL_BATCH_GENID's u32 in bytes
    // Undo: no ops; the matched events (DELSETELEMs of one set) are sent back as NEWSETELEMs
    // between bytes' BATCH_BEGIN and BATCH_END (at endAt): the deleted elements added again as
    // the kernel reported them.
    bool undo = false;
    size_t endAt = 0;
  };
  bool armed_ = false;
  uint32_t armedGen_ = 0;
  std::vector<Reaction> reactions_;
  std::unordered_map<std::string, uint32_t> triggers_;  // trigger → index in reactions_
  size_t triggerEvents_ = 0;  // the most events any trigger holds: longer batches match none but an undo
  bool undos_ = false;        // an undo among the reactions (it answers any number of its event)
  NftSocket* armSock_ = nullptr;
  Napi::ObjectReference armSockRef_;
};

}  // namespace nfk
