#include "monitor.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/filter.h>
#include <linux/netfilter/nfnetlink.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "batch.h"
#include "decode.h"
#include "encode.h"
#include "expr_table.h"
#include "socket.h"


namespace nfk {

// The records' property keys, in the order each record sets them (src/netlink/monitor.ts
// MonitorBatch, MonitorEvent, SetElement). Made once per monitor (keys_) and internalized by V8 on
// first use: a key made afresh per record was looked up in V8's string table on every set.
namespace {
enum Key : uint32_t {
  kOverflow, kGeneration, kTruncated, kForeign, kSince, kReceivedNs, kEvents, kBy, kReacted,
  kPid, kComm, kHandle, kErrno, kPosition, kCommittedNs,
  kType, kFamily, kTable, kName, kPortId, kFlags, kElementsMalformed, kElements,
  kKey, kKeyEnd, kData, kVerdict, kChain, kObjref, kTimeout, kExpiration, kUserdata,
  kReaction, kHandles, kKeyCount,
};
const char* const kKeyNames[kKeyCount] = {
  "overflow", "generation", "truncated", "foreign", "since", "receivedNs", "events", "by", "reacted",
  "pid", "comm", "handle", "errno", "position", "committedNs",
  "type", "family", "table", "name", "portId", "flags", "elementsMalformed", "elements",
  "key", "keyEnd", "data", "verdict", "chain", "objref", "timeout", "expiration", "userdata",
  "reaction", "handles",
};

// The socket is read by recvmmsg into kSlots slots of kSlotBytes (the kernel's notifications are
// at most a page or two each: a longer one is reported as an overflow, see ReadAvailable), at most
// kDatagramsPerWake datagrams per wake-up, so that a storm cannot hold the event loop (a gather's
// read, below, of kGatherMaxMs of a neighbour's commits must fit in it); the poll is
// level-triggered and comes straight back for the rest.
constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 16 * 1024;
constexpr int kDatagramsPerWake = 1024;
// A storm of commits to tables nobody watches (a neighbour's) woke the thread once or twice per
// commit, most of its cost: after kQuietWakes wake-ups in a row, each within kGatherMs of the last,
// that brought nothing for a watched table, the poll stops and the socket is read kGatherMs later
// instead, and again after twice as long each time a read brings nothing watched, up to
// kGatherMaxMs, until a read finds nothing or something watched. Each of those reads is a wake-up
// of the thread, which costs more than the datagrams it reads (the kernel's filter lets through
// only each commit's NEWGEN). What a watched table's commit costs then is at most kGatherMaxMs
// more latency, and only during such a storm; whoever asks for progress() ends the wait at once.
constexpr uint64_t kGatherMs = 5;
constexpr uint64_t kGatherMaxMs = 20;
constexpr int kQuietWakes = 4;

// One event of a trigger, as Arm is given it and as React reads it from a batch: every field ends
// in a NUL, which no name holds, so equal strings are equal event lists.
void AppendTrigger(std::string* out, const std::string& type, uint32_t family, const std::string& table,
                   const std::string& name, uint64_t handle) {
  for (const std::string* f : {&type, &table, &name}) out->append(*f).push_back('\0');
  out->append(std::to_string(family)).push_back('\0');
  out->append(std::to_string(handle)).push_back('\0');
}
}  // namespace

Napi::Function NftMonitor::Init(Napi::Env env) {
  return DefineClass(env, "NftMonitor",
                     {
                         InstanceMethod<&NftMonitor::Close>("close"),
                         InstanceMethod<&NftMonitor::SetFilter>("setFilter"),
                         InstanceMethod<&NftMonitor::Ref>("ref"),
                         InstanceMethod<&NftMonitor::Unref>("unref"),
                         InstanceMethod<&NftMonitor::Progress>("progress"),
                         InstanceMethod<&NftMonitor::ReadNow>("readNow"),
                         InstanceMethod<&NftMonitor::Anchor>("anchor"),
                         InstanceMethod<&NftMonitor::Subscribe>("subscribe"),
                         InstanceMethod<&NftMonitor::SkipOwn>("skipOwn"),
                         InstanceMethod<&NftMonitor::Arm>("arm"),
                         InstanceMethod<&NftMonitor::Disarm>("disarm"),
                         InstanceMethod<&NftMonitor::Pause>("pause"),
                         InstanceMethod<&NftMonitor::Resume>("resume"),
                     });
}

// new NftMonitor(netnsPath: string | undefined, onBatch: (batch) => void,
//                tables: [family, name][] | null, ignorePorts: (number | [number, number])[], deliverOwn?: boolean,
//                receiveBuffer?: number, subscribeLater?: boolean, unread?: boolean)
// subscribeLater: the socket joins the multicast group only at subscribe(); until then the kernel
// builds no notification for it (a big commit's thousands of NEWRULE messages cost the commit).
// unread: the socket is not read until the first progress() (the notifications wait in its buffer;
// one that overflows it is an overflow, read then).
NftMonitor::NftMonitor(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<NftMonitor>(info), asyncContext_(info.Env(), "nfkeeper.monitor") {
  Napi::Env env = info.Env();
  std::string path;
  if (info[0].IsString()) path = info[0].As<Napi::String>().Utf8Value();
  if (!info[1].IsFunction()) throw Napi::TypeError::New(env, "NftMonitor needs a callback");
  ParseFilter(env, info[2], info[3]);
  filter_.deliverOwn = info.Length() > 4 && info[4].IsBoolean() && info[4].As<Napi::Boolean>().Value();
  std::string step;
  const bool later = info.Length() > 6 && info[6].IsBoolean() && info[6].As<Napi::Boolean>().Value();
  nl_ = OpenNetfilterSocket(path, later ? 0u : 1u << (NFNLGRP_NFTABLES - 1), &step);
  subscribed_ = !later;
  if (nl_ == nullptr) {
    int e = errno;
    throw MakeNetlinkError(env, step + ": " + std::strerror(e), e, "monitor");
  }
  AttachKernelFilter();
  int fd = mnl_socket_get_fd(nl_);
  // A foreign storm should not overflow us; if it still does we see ENOBUFS. A test can ask for a
  // small buffer (6th argument, bytes) to make the kernel overflow it. While JavaScript runs (a big
  // dump's decoding, say) nothing reads the socket: the buffer holds what arrives meanwhile.
  int size = 8 << 20;
  if (info.Length() > 5 && info[5].IsNumber()) size = info[5].As<Napi::Number>().Int32Value();
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  buf_.resize(kSlots * kSlotBytes);
  callback_ = Napi::Persistent(info[1].As<Napi::Function>());
  Napi::Array keys = Napi::Array::New(env, kKeyCount);
  for (uint32_t k = 0; k < kKeyCount; k++) keys.Set(k, Napi::String::New(env, kKeyNames[k]));
  keys_ = Napi::Persistent(keys);
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  unread_ = info.Length() > 7 && info[7].IsBoolean() && info[7].As<Napi::Boolean>().Value();
  poll_ = new uv_poll_t;
  poll_->data = this;
  if (loop == nullptr || uv_poll_init(loop, poll_, fd) != 0 || (!unread_ && uv_poll_start(poll_, UV_READABLE, OnReadable) != 0)) {
    delete poll_;
    poll_ = nullptr;
    mnl_socket_close(nl_);
    nl_ = nullptr;
    throw MakeNetlinkError(env, "monitor: cannot poll the event socket", EINVAL, "monitor");
  }
  gather_ = new uv_timer_t;
  gather_->data = this;
  uv_timer_init(loop, gather_);
  data_ = GetAddonData(env);
  data_->live.insert(this);
}

NftMonitor::~NftMonitor() {
  CloseNow();
  if (data_ != nullptr) data_->live.erase(this);
}

void NftMonitor::CloseNow() {
  if (closed_) return;
  closed_ = true;
  DisarmNow();
  if (poll_ != nullptr) {
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    poll_ = nullptr;
  }
  if (gather_ != nullptr) {
    uv_timer_stop(gather_);
    uv_close(reinterpret_cast<uv_handle_t*>(gather_), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    gather_ = nullptr;
  }
  if (nl_ != nullptr) mnl_socket_close(nl_), nl_ = nullptr;
}

Napi::Value NftMonitor::Close(const Napi::CallbackInfo& info) {
  CloseNow();
  return info.Env().Undefined();
}

Napi::Value NftMonitor::Ref(const Napi::CallbackInfo& info) {
  if (poll_ != nullptr) uv_ref(reinterpret_cast<uv_handle_t*>(poll_));
  if (gather_ != nullptr) uv_ref(reinterpret_cast<uv_handle_t*>(gather_));
  return info.Env().Undefined();
}

Napi::Value NftMonitor::Unref(const Napi::CallbackInfo& info) {
  if (poll_ != nullptr) uv_unref(reinterpret_cast<uv_handle_t*>(poll_));
  if (gather_ != nullptr) uv_unref(reinterpret_cast<uv_handle_t*>(gather_));
  return info.Env().Undefined();
}

void NftMonitor::ParseFilter(Napi::Env env, const Napi::Value& tables, const Napi::Value& ignorePorts) {
  std::set<std::pair<uint32_t, std::string>> t;
  bool all = !tables.IsArray();
  if (!all) {
    Napi::Array arr = tables.As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Array pair = arr.Get(i).As<Napi::Array>();
      Napi::Value fam = pair.Get(0u);
      int64_t f;
      if (fam.IsNumber()) f = fam.As<Napi::Number>().Int64Value();
      else if (!EnumFromName(kFamilyMap, fam.As<Napi::String>().Utf8Value().c_str(), &f))
        throw Napi::TypeError::New(env, "unknown family in monitor filter");
      t.insert({static_cast<uint32_t>(f), pair.Get(1u).As<Napi::String>().Utf8Value()});
    }
  }
  // Each a port id (every commit from it ours) or [port id, generation] (ours up to that generation).
  std::map<uint32_t, uint32_t> ports;
  if (ignorePorts.IsArray()) {
    Napi::Array arr = ignorePorts.As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Value v = arr.Get(i);
      uint32_t port, upTo = EventFilter::kEveryGeneration;
      if (v.IsNumber()) {
        port = v.As<Napi::Number>().Uint32Value();
      } else if (v.IsArray() && v.As<Napi::Array>().Length() == 2 && v.As<Napi::Array>().Get(0u).IsNumber() &&
                 v.As<Napi::Array>().Get(1u).IsNumber()) {
        port = v.As<Napi::Array>().Get(0u).As<Napi::Number>().Uint32Value();
        upTo = v.As<Napi::Array>().Get(1u).As<Napi::Number>().Uint32Value();
      } else {
        throw Napi::TypeError::New(env, "monitor filter: ignorePorts holds port ids or [port id, generation]");
      }
      // A port given twice: the wider of the two.
      auto [it, fresh] = ports.emplace(port, upTo);
      if (!fresh && upTo > it->second) it->second = upTo;
    }
  }
  filter_.tables = std::move(t);
  filter_.allTables = all;
  filter_.ignorePorts = std::move(ports);
}

namespace {
// A classic BPF program (a socket filter) that drops a datagram holding exactly one notification,
// of a table, chain, rule, set, element, object or flowtable, whose table (attribute 1, the first
// the kernel writes in every one of those messages) is none of `tables`: what EventFilter would
// drop after reading it. Anything else is kept: NEWGEN (the generation's progress), every table
// deletion, other messages, a datagram of several messages, one whose first attribute is not the
// table. The kernel runs it in the committer's context, so a neighbour's notifications are never
// queued to this socket or read by it. A load past the datagram's end would drop it: every load is
// after a length check.
std::vector<sock_filter> KernelFilter(const std::set<std::pair<uint32_t, std::string>>& tables) {
  constexpr uint32_t kKeep = 0xffffffff;
  std::vector<sock_filter> p;
  auto op = [&](uint16_t code, uint32_t k, uint8_t jt = 0, uint8_t jf = 0) { p.push_back({code, jt, jf, k}); };
  // Keep unless A == k (then skip the keep).
  auto keepUnless = [&](uint16_t jump, uint32_t k) {
    op(BPF_JMP | jump | BPF_K, k, 1, 0);
    op(BPF_RET | BPF_K, kKeep);
  };
  constexpr uint32_t kHead = sizeof(nlmsghdr) + sizeof(nfgenmsg);  // 20: the first attribute
  op(BPF_LD | BPF_W | BPF_LEN, 0);
  keepUnless(BPF_JGE, kHead + 4);
  op(BPF_LD | BPF_B | BPF_ABS, 5);  // nlmsg_type's high byte (little-endian): the subsystem
  keepUnless(BPF_JEQ, NFNL_SUBSYS_NFTABLES);
  op(BPF_LD | BPF_B | BPF_ABS, 4);  // the message type
  const uint8_t objects[] = {NFT_MSG_NEWTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_DELCHAIN, NFT_MSG_NEWRULE, NFT_MSG_DELRULE,
                             NFT_MSG_NEWSET, NFT_MSG_DELSET, NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM, NFT_MSG_NEWOBJ,
                             NFT_MSG_DELOBJ, NFT_MSG_NEWFLOWTABLE, NFT_MSG_DELFLOWTABLE};
  const size_t n = sizeof(objects);
  for (size_t i = 0; i < n; i++) op(BPF_JMP | BPF_JEQ | BPF_K, objects[i], static_cast<uint8_t>(n - i), 0);
  op(BPF_RET | BPF_K, kKeep);
  // One message: nlmsg_len (little-endian, under 64 KiB) is the datagram's length.
  op(BPF_LD | BPF_H | BPF_ABS, 2);
  keepUnless(BPF_JEQ, 0);
  op(BPF_LD | BPF_B | BPF_ABS, 1);
  op(BPF_ALU | BPF_LSH | BPF_K, 8);
  op(BPF_MISC | BPF_TAX, 0);
  op(BPF_LD | BPF_B | BPF_ABS, 0);
  op(BPF_ALU | BPF_ADD | BPF_X, 0);
  op(BPF_MISC | BPF_TAX, 0);
  op(BPF_LD | BPF_W | BPF_LEN, 0);
  op(BPF_JMP | BPF_JEQ | BPF_X, 0, 1, 0);
  op(BPF_RET | BPF_K, kKeep);
  // The first attribute is the table's name (type 1; loads are big-endian, the header little).
  op(BPF_LD | BPF_H | BPF_ABS, kHead + 2);
  keepUnless(BPF_JEQ, 0x0100);
  for (const auto& [family, name] : tables) {
    const uint32_t len = static_cast<uint32_t>(name.size()) + 1;  // with its NUL; the kernel zeroes the padding
    const uint32_t words = (len + 3) / 4;
    std::vector<sock_filter> b;
    auto jumpOut = [&](uint16_t code, uint32_t k) { b.push_back({static_cast<uint16_t>(BPF_JMP | code | BPF_K), 0, 0, k}); };
    b.push_back({BPF_LD | BPF_W | BPF_LEN, 0, 0, 0});
    jumpOut(BPF_JGE, kHead + 4 + 4 * words);
    b.push_back({BPF_LD | BPF_B | BPF_ABS, 0, 0, 16});  // nfgen_family
    jumpOut(BPF_JEQ, family);
    b.push_back({BPF_LD | BPF_H | BPF_ABS, 0, 0, kHead});  // nla_len, byte-swapped
    const uint32_t nlaLen = 4 + len;
    jumpOut(BPF_JEQ, ((nlaLen & 0xff) << 8) | (nlaLen >> 8));
    for (uint32_t w = 0; w < words; w++) {
      uint32_t word = 0;
      for (uint32_t i = 0; i < 4; i++) {
        const size_t at = 4 * w + i;
        word = (word << 8) | (at < name.size() ? static_cast<uint8_t>(name[at]) : 0);
      }
      b.push_back({BPF_LD | BPF_W | BPF_ABS, 0, 0, kHead + 4 + 4 * w});
      jumpOut(BPF_JEQ, word);
    }
    b.push_back({BPF_RET | BPF_K, 0, 0, kKeep});
    // Every test jumps past the block when it fails (the block is at most 5 + 2 * 64 long).
    for (size_t i = 0; i + 1 < b.size(); i++) {
      if (BPF_CLASS(b[i].code) == BPF_JMP) b[i].jf = static_cast<uint8_t>(b.size() - i - 1);
    }
    p.insert(p.end(), b.begin(), b.end());
  }
  op(BPF_RET | BPF_K, 0);
  return p;
}
}  // namespace

void NftMonitor::AttachKernelFilter() {
  if (nl_ == nullptr) return;
  int fd = mnl_socket_get_fd(nl_);
  if (filter_.allTables) {
    setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, nullptr, 0);
    return;
  }
  std::vector<sock_filter> program = KernelFilter(filter_.tables);
  sock_fprog prog = {static_cast<unsigned short>(program.size()), program.data()};
  // Refused (a kernel without socket filters, too long a program): EventFilter drops them after reading.
  if (program.size() > BPF_MAXINSNS || setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0) {
    setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, nullptr, 0);
  }
}

// setFilter(tables: [family, name][] | null, ignorePorts: (port | [port, up to generation])[])
Napi::Value NftMonitor::SetFilter(const Napi::CallbackInfo& info) {
  ParseFilter(info.Env(), info[0], info[1]);
  AttachKernelFilter();
  return info.Env().Undefined();
}

// progress(): [last NEWGEN seen, start of the run of whole commits (0: none), batches delivered],
// read together: every batch of a commit up to that generation is counted. A caller asking means
// to wait for the monitor to catch up with the kernel (the tick's pass, the mirror's proof): a
// gather (see Gather) ends, and the poll reads the socket on the next turn of the loop; so does a
// monitor opened unread, polled from then on.
Napi::Value NftMonitor::Progress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (unread_ && !closed_ && !failed_ && poll_ != nullptr) {
    unread_ = false;
    uv_poll_start(poll_, UV_READABLE, OnReadable);
  }
  if (gathering_ && !closed_ && !failed_ && poll_ != nullptr && gather_ != nullptr) {
    uv_timer_stop(gather_);
    gathering_ = false;
    quietWakes_ = 0;
    uv_poll_start(poll_, UV_READABLE, OnReadable);
  }
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, batcher_.lastGeneration());
  out.Set(1u, batcher_.runStart());
  out.Set(2u, delivered_);
  return out;
}

// readNow(): what the socket holds now is read, without blocking, and its batches handed over
// (onBatch, before this returns); then progress(). A proof taken right after a refusal by the
// generation needs no turn of the loop: the commit that moved the generation queued its NEWGEN to
// this socket before the kernel checked ours (both under the commit mutex). Reads nothing from
// inside onBatch (a batch read now would overtake those of the wake-up still to be handed over).
Napi::Value NftMonitor::ReadNow(const Napi::CallbackInfo& info) {
  if (!delivering_ && !closed_ && !failed_ && nl_ != nullptr && subscribed_) {
    // A storm can queue faster than one read takes it: a bounded number of rounds, then progress as it stands.
    for (int rounds = 0; rounds < 64 && !closed_ && !failed_; rounds++) {
      int datagrams = 0;
      bool bounded = false;
      ReadAvailable(&datagrams, &bounded);
      if (!bounded) break;
    }
  }
  return Progress(info);
}

// anchor(generation, overflowsSeen): a generation read after this monitor subscribed and after
// the caller handled that many overflow reports. Ignored before subscribe(): no run yet.
Napi::Value NftMonitor::Anchor(const Napi::CallbackInfo& info) {
  if (subscribed_ && info[0].IsNumber() && info[1].IsNumber()) {
    batcher_.Anchor(info[0].As<Napi::Number>().Uint32Value(), static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()));
  }
  return info.Env().Undefined();
}

// subscribe(): joins NFNLGRP_NFTABLES (a monitor opened with subscribeLater; for one subscribed
// already the kernel takes it as a no-op). Only commits after the join reach the socket: the caller
// anchors with a generation it reads after this.
Napi::Value NftMonitor::Subscribe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_ || nl_ == nullptr) throw MakeNetlinkError(env, "monitor: subscribe on a closed monitor", EBADF, "monitor");
  int group = NFNLGRP_NFTABLES;
  if (mnl_socket_setsockopt(nl_, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) < 0) {
    int e = errno;
    throw MakeNetlinkError(env, std::string("monitor: join the nftables group: ") + std::strerror(e), e, "monitor");
  }
  subscribed_ = true;
  return env.Undefined();
}

// skipOwn(generation): the caller knows its own commit that made `generation` from its echo (see
// EventBatcher::SkipOwn): its events wake no JavaScript.
Napi::Value NftMonitor::SkipOwn(const Napi::CallbackInfo& info) {
  if (info[0].IsNumber()) {
    batcher_.SkipOwn(info[0].As<Napi::Number>().Uint32Value());
  }
  return info.Env().Undefined();
}

namespace {
// One plain object, its data properties defined in one napi call.
class Record {
 public:
  Record(napi_env env, napi_value* keys, napi_value keyArray) : env_(env), keys_(keys), keyArray_(keyArray) {}
  Record& Put(Key k, napi_value v) {
    if (keys_[k] == nullptr) napi_get_element(env_, keyArray_, k, &keys_[k]);
    props_[n_++] = {nullptr, keys_[k], nullptr, nullptr, nullptr, v, napi_default_jsproperty, nullptr};
    return *this;
  }
  Record& Num(Key k, double v) {
    napi_value x;
    napi_create_double(env_, v, &x);
    return Put(k, x);
  }
  Record& Bool(Key k, bool v) {
    napi_value x;
    napi_get_boolean(env_, v, &x);
    return Put(k, x);
  }
  // Absent when empty.
  Record& Str(Key k, const std::string& v) {
    if (v.empty()) return *this;
    napi_value x;
    napi_create_string_utf8(env_, v.data(), v.size(), &x);
    return Put(k, x);
  }
  napi_value Make() {
    napi_value o;
    napi_create_object(env_, &o);
    napi_define_properties(env_, o, n_, props_);
    n_ = 0;
    return o;
  }

 private:
  napi_env env_;
  napi_value* keys_;  // per wake-up: fetched from keyArray_ at first use
  napi_value keyArray_;
  napi_property_descriptor props_[12];
  size_t n_ = 0;
};
}  // namespace

// The batch goes to JavaScript as one record (MonitorBatch in src/netlink/monitor.ts), with
// progress() as it stands during the call (every datagram of this wake-up is read already):
// onBatch(batch, lastGeneration, runStart, delivered).
void NftMonitor::Deliver(Napi::Env env, Napi::Function cb, napi_value* keys, MonitorBatch* batch) {
  std::unique_ptr<MonitorBatch> b(batch);
  napi_value keyArray = keys_.Value();
  Record r(env, keys, keyArray);
  napi_value events;
  napi_create_array_with_length(env, b->events.size(), &events);
  for (uint32_t i = 0; i < b->events.size(); i++) {
    const MonitorEvent& e = b->events[i];
    napi_value elements = nullptr;
    if (!e.elements.empty()) {
      napi_create_array_with_length(env, e.elements.size(), &elements);
      for (uint32_t j = 0; j < e.elements.size(); j++) {
        const SetElem& x = e.elements[j];
        r.Str(kKey, x.key).Str(kKeyEnd, x.keyEnd).Num(kFlags, x.flags).Str(kData, x.data);
        if (x.hasVerdict) {
          const char* name = EnumToName(kVerdictMap, x.verdict);
          if (name != nullptr) r.Put(kVerdict, Napi::String::New(env, name)); else r.Num(kVerdict, x.verdict);
        }
        r.Str(kChain, x.chain).Str(kObjref, x.objref);
        if (x.hasTimeout) r.Num(kTimeout, static_cast<double>(x.timeout));
        if (x.hasExpiration) r.Num(kExpiration, static_cast<double>(x.expiration));
        r.Str(kUserdata, x.userdata);
        napi_set_element(env, elements, j, r.Make());
      }
    }
    r.Put(kType, Napi::String::New(env, e.type)).Put(kFamily, FamilyValue(env, e.family)).Put(kTable, Napi::String::New(env, e.table));
    r.Str(kName, e.name);
    if (e.handle != 0) r.Num(kHandle, static_cast<double>(e.handle));
    r.Num(kPortId, e.portId).Num(kFlags, e.flags);
    if (e.position != 0) r.Num(kPosition, static_cast<double>(e.position));
    if (e.elementsMalformed) r.Bool(kElementsMalformed, true);
    if (elements != nullptr) r.Put(kElements, elements);
    napi_set_element(env, events, i, r.Make());
  }
  // Who committed it (the NEWGEN's task): absent when the kernel did not say.
  napi_value by = nullptr;
  if (b->pid > 0 || !b->comm.empty()) by = r.Num(kPid, b->pid).Str(kComm, b->comm).Make();
  // The armed reaction's outcome (React).
  napi_value reacted = nullptr;
  if (b->reacted) {
    if (b->reactionErrno != 0) {
      r.Num(kErrno, b->reactionErrno);
    } else {
      napi_value handles;
      napi_create_array_with_length(env, b->reactionHandles.size(), &handles);
      for (uint32_t i = 0; i < b->reactionHandles.size(); i++) {
        napi_value pair, op, handle;
        napi_create_array_with_length(env, 2, &pair);
        napi_create_int32(env, b->reactionHandles[i].first, &op);
        napi_create_double(env, static_cast<double>(b->reactionHandles[i].second), &handle);
        napi_set_element(env, pair, 0, op);
        napi_set_element(env, pair, 1, handle);
        napi_set_element(env, handles, i, pair);
      }
      r.Put(kHandles, handles);
    }
    reacted = r.Num(kReaction, b->reaction).Num(kCommittedNs, b->reactedNs).Make();
  }
  r.Bool(kOverflow, b->overflow).Num(kGeneration, b->generation).Bool(kTruncated, b->truncated).Bool(kForeign, b->foreign);
  r.Num(kSince, b->since).Num(kReceivedNs, b->receivedNs).Put(kEvents, events);
  if (by != nullptr) r.Put(kBy, by);
  if (reacted != nullptr) r.Put(kReacted, reacted);
  napi_value args[] = {
      r.Make(), Napi::Number::New(env, batcher_.lastGeneration()), Napi::Number::New(env, batcher_.runStart()),
      Napi::Number::New(env, delivered_),
  };
  b.reset();
  napi_value undefined, result;
  napi_get_undefined(env, &undefined);
  if (napi_call_function(env, undefined, cb, sizeof(args) / sizeof(args[0]), args, &result) != napi_ok) {
    // The callback threw: as an uncaught exception. No exception pending: JavaScript cannot run here
    // any more (a worker being terminated, its loop still polling), so there is no one to deliver to;
    // node-addon-api's Call would build an Error for that, which fails there too and aborts the process.
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
      napi_value e;
      napi_get_and_clear_last_exception(env, &e);
      napi_fatal_exception(env, e);
    }
  }
}

void NftMonitor::OnReadable(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<NftMonitor*>(handle->data);
  int datagrams = 0;
  bool bounded = false;
  bool concerned = self->ReadAvailable(&datagrams, &bounded);
  // libuv stops a poll whose socket reports an error (POLLERR, here ENOBUFS after an overflow) and
  // says UV_EBADF; the read above took the error and reported the overflow: poll on.
  if (status < 0 && !self->closed_ && self->poll_ == handle && !self->failed_) uv_poll_start(handle, UV_READABLE, OnReadable);
  self->Gather(concerned, datagrams, bounded);
}

void NftMonitor::OnGathered(uv_timer_t* handle) {
  auto* self = static_cast<NftMonitor*>(handle->data);
  self->gathering_ = false;
  int datagrams = 0;
  bool bounded = false;
  bool concerned = self->ReadAvailable(&datagrams, &bounded);
  if (self->closed_ || self->failed_ || self->poll_ == nullptr) return;
  // Still a storm of nothing watched: read again after a longer wait.
  if (!concerned && datagrams > 0 && !bounded) {
    self->gatherMs_ = std::min(self->gatherMs_ * 2, kGatherMaxMs);
    uv_timer_start(handle, OnGathered, self->gatherMs_, 0);
    self->gathering_ = true;
    return;
  }
  self->quietWakes_ = 0;
  uv_poll_start(self->poll_, UV_READABLE, OnReadable);
}

void NftMonitor::Gather(bool concerned, int datagrams, bool bounded) {
  if (closed_ || failed_ || poll_ == nullptr || gather_ == nullptr || gathering_) return;
  const uint64_t now = uv_now(gather_->loop);
  if (concerned || datagrams == 0 || bounded) {
    quietWakes_ = 0;
    lastWakeMs_ = now;
    return;
  }
  quietWakes_ = now - lastWakeMs_ <= kGatherMs ? quietWakes_ + 1 : 1;
  lastWakeMs_ = now;
  if (quietWakes_ < kQuietWakes) return;
  uv_poll_stop(poll_);
  gatherMs_ = kGatherMs;
  uv_timer_start(gather_, OnGathered, gatherMs_, 0);
  gathering_ = true;
}

bool NftMonitor::ReadAvailable(int* datagrams, bool* bounded) {
  *datagrams = 0;
  *bounded = false;
  if (closed_) return false;
  std::vector<std::unique_ptr<MonitorBatch>> done;
  int fd = mnl_socket_get_fd(nl_);
  auto overflow = [&] {
    auto b = std::make_unique<MonitorBatch>();
    b->overflow = true;
    batcher_.Overflow();
    delivered_++;
    DisarmNow();
    done.push_back(std::move(b));
  };
  mmsghdr msgs[kSlots];
  iovec iov[kSlots];
  sockaddr_nl from[kSlots];
  int read = 0;
  while (read < kDatagramsPerWake) {
    for (int i = 0; i < kSlots; i++) {
      iov[i] = {buf_.data() + i * kSlotBytes, kSlotBytes};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(fd, msgs, kSlots, MSG_DONTWAIT, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ENOBUFS) {
        overflow();
        continue;
      }
      failed_ = true;
      break;
    }
    read += n;
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double receivedNs = static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
    for (int i = 0; i < n; i++) {
      // Only the kernel speaks for nf_tables; a process with CAP_NET_ADMIN can
      // also send to the multicast group, and its datagrams are not events.
      if (from[i].nl_pid != 0) continue;
      // Longer than a slot: its end is lost, and with it perhaps events. As if the kernel had dropped it.
      if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
        overflow();
        continue;
      }
      const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(iov[i].iov_base);
      int len = static_cast<int>(msgs[i].msg_len);
      for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        std::unique_ptr<MonitorBatch> b = batcher_.Feed(nlh, filter_);
        if (b) delivered_++;
        if (b) {
          b->receivedNs = receivedNs;
          done.push_back(std::move(b));
        }
      }
    }
    // Fewer than asked: the socket is empty, and what comes later wakes the poll again.
    if (n < kSlots) break;
  }
  *datagrams = read;
  *bounded = read >= kDatagramsPerWake;
  const bool concerned = !done.empty() || batcher_.pending();
  // A socket error other than the above ends the monitor's reading.
  if (failed_ && poll_ != nullptr) uv_poll_stop(poll_);
  if (done.empty()) return concerned;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  // A local handle roots the wrapper: no collection can finalize this object while JavaScript runs.
  Napi::Object self = Value();
  if (self.IsEmpty()) return concerned;
  Napi::Function cb = callback_.Value();
  napi_value keys[kKeyCount] = {};
  // One callback scope for the batches of this wake-up: promise jobs run after the last of them, so
  // the keeper's pass sees every batch read so far applied.
  Napi::CallbackScope callbackScope(env, asyncContext_);
  delivering_ = true;
  for (auto& b : done) {
    if (closed_) break;  // closed by a callback: the rest is dropped, as close() promises
    // After the armed reaction's commit, the CPU is given up once before the batch's JavaScript
    // runs: the kernel's notification woke this thread on the CPU of the process whose commit it
    // answers (that process is then still inside its commit), and the bookkeeping below would hold
    // that process up. Nothing else runnable: it costs a system call.
    if (armed_ && React(b.get()) && b->reactionErrno == 0) sched_yield();
    try {
      Deliver(env, cb, keys, b.release());
    } catch (const Napi::Error& e) {
      napi_fatal_exception(env, e.Value());
    }
  }
  delivering_ = false;
  return concerned;
}

// arm(socket, generation, reactions): reactions prepared by the caller, each
// { on: events[], ops: Op[], exprs?: exprBytes }, where events are { type, family, table, name?,
// handle? } as a batch's events carry them. The tables' state they answer is the caller's: they
// hold while the watched tables are as they were at `generation`. The first batch after
// `generation` that touches a watched table (with every commit since `generation` seen whole) is
// answered here, before JavaScript runs, when it is another writer's (not only ignored ports') and
// its events, in order, are exactly one reaction's `on` (type, family, table, name and handle
// compared): that reaction's ops are committed on `socket` as one batch guarded by the batch's
// generation, echoed, and the batch is handed over with the outcome (`repaired`). A reaction
// { on: [one delsetelem event], undo: true } has no ops: it answers a batch of one or more of that
// event (an element deletion the kernel sent in several messages), and commits each event's
// message back as a NEWSETELEM (the deleted elements added again, as the kernel reported them).
// Any such batch,
// answered or not, ends the arm: arm() again for the next one. Also disarmed by disarm(), close
// and an overflow. Returns whether it armed (false: closed, or no reactions).
Napi::Value NftMonitor::Arm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DisarmNow();
  if (info.Length() < 3 || !info[0].IsObject() || !info[1].IsNumber() || !info[2].IsArray()) {
    throw Napi::TypeError::New(env, "arm(socket, generation, reactions)");
  }
  Napi::Object so = info[0].As<Napi::Object>();
  AddonData* data = GetAddonData(env);
  if (data->socketCtor.IsEmpty() || !so.InstanceOf(data->socketCtor.Value())) {
    throw Napi::TypeError::New(env, "arm: the socket must be an NftSocket");
  }
  Napi::Array list = info[2].As<Napi::Array>();
  if (closed_ || list.Length() == 0) return Napi::Boolean::New(env, false);
  std::vector<Reaction> reactions(list.Length());
  std::unordered_map<std::string, uint32_t> triggers;
  size_t most = 0;
  for (uint32_t i = 0; i < list.Length(); i++) {
    const std::string at = "arm: reaction " + std::to_string(i);
    Napi::Value v = list.Get(i);
    if (!v.IsObject()) throw Napi::TypeError::New(env, at + " is not an object");
    Napi::Object x = v.As<Napi::Object>();
    Napi::Value on = x.Get("on"), ops = x.Get("ops"), undoValue = x.Get("undo");
    const bool undo = undoValue.IsBoolean() && undoValue.As<Napi::Boolean>().Value();
    if (undo) {
      if (!on.IsArray() || on.As<Napi::Array>().Length() != 1 || (ops.IsArray() && ops.As<Napi::Array>().Length() != 0)) {
        throw Napi::TypeError::New(env, at + ": an undo names one event (on) and no ops");
      }
      Napi::Value ev = on.As<Napi::Array>().Get(0u);
      if (!ev.IsObject() || !ev.As<Napi::Object>().Get("type").StrictEquals(Napi::String::New(env, "delsetelem"))) {
        throw Napi::TypeError::New(env, at + ": an undo answers an element deletion (delsetelem) only");
      }
    } else if (!on.IsArray() || on.As<Napi::Array>().Length() == 0 || !ops.IsArray() || ops.As<Napi::Array>().Length() == 0) {
      throw Napi::TypeError::New(env, at + ": needs events (on) and ops");
    }
    Napi::Array events = on.As<Napi::Array>();
    std::string key;
    for (uint32_t k = 0; k < events.Length(); k++) {
      Napi::Value ev = events.Get(k);
      if (!ev.IsObject()) throw Napi::TypeError::New(env, at + ": event " + std::to_string(k) + " is not an object");
      Napi::Object e = ev.As<Napi::Object>();
      Napi::Value type = e.Get("type"), fam = e.Get("family"), table = e.Get("table"), name = e.Get("name"), handle = e.Get("handle");
      int64_t f = 0;
      if (!type.IsString() || !table.IsString() || !fam.IsString() || !EnumFromName(kFamilyMap, fam.As<Napi::String>().Utf8Value().c_str(), &f)) {
        throw Napi::TypeError::New(env, at + ": event " + std::to_string(k) + " needs a type, a family and a table");
      }
      double h = handle.IsNumber() ? handle.As<Napi::Number>().DoubleValue() : 0;
      if (!(h >= 0) || h > 9007199254740991.0) throw Napi::TypeError::New(env, at + ": event " + std::to_string(k) + " has a bad handle");
      AppendTrigger(&key, type.As<Napi::String>().Utf8Value(), static_cast<uint32_t>(f), table.As<Napi::String>().Utf8Value(),
                    name.IsString() ? name.As<Napi::String>().Utf8Value() : std::string(), static_cast<uint64_t>(h));
    }
    if (!triggers.emplace(std::move(key), i).second) throw Napi::TypeError::New(env, at + ": the same events as an earlier one");
    if (events.Length() > most) most = events.Length();
    EncodedBatch enc;
    EncodeBatch(env, undo ? Napi::Array::New(env, 0) : ops.As<Napi::Array>(), 0, true, 0, &enc, x.Get("exprs"));
    Reaction& r = reactions[i];
    if (undo) {
      r.undo = true;
      r.endAt = reinterpret_cast<const nlmsghdr*>(enc.bytes.data())->nlmsg_len;
      r.endAt = MNL_ALIGN(r.endAt);
    }
    const nlmsghdr* begin = reinterpret_cast<const nlmsghdr*>(enc.bytes.data());
    nlattr* a;
    NFK_ATTR_FOR_EACH(a, begin, sizeof(nfgenmsg)) {
      if (mnl_attr_get_type(a) == NFNL_BATCH_GENID) r.genAt = reinterpret_cast<const uint8_t*>(mnl_attr_get_payload(a)) - enc.bytes.data();
    }
    if (r.genAt == 0) throw Napi::TypeError::New(env, at + ": the batch did not encode as expected");
    r.bytes = std::move(enc.bytes);
    r.messageOp = std::move(enc.messageOp);
  }
  undos_ = std::any_of(reactions.begin(), reactions.end(), [](const Reaction& r) { return r.undo; });
  reactions_ = std::move(reactions);
  triggers_ = std::move(triggers);
  triggerEvents_ = most;
  armSock_ = NftSocket::Unwrap(so);
  armSockRef_ = Napi::Persistent(so);
  armedGen_ = info[1].As<Napi::Number>().Uint32Value();
  armed_ = true;
  return Napi::Boolean::New(env, true);
}

Napi::Value NftMonitor::Disarm(const Napi::CallbackInfo& info) {
  DisarmNow();
  return info.Env().Undefined();
}

// pause(): answers nothing until resume(), keeping what arm() made.
Napi::Value NftMonitor::Pause(const Napi::CallbackInfo& info) {
  armed_ = false;
  return info.Env().Undefined();
}

// resume() -> boolean: armed again with what arm() made, when that still holds: no commit since its
// generation touched a watched table (as far as the monitor has read), and every one was seen whole.
// False: arm() again.
Napi::Value NftMonitor::Resume(const Napi::CallbackInfo& info) {
  bool ok = false;
  if (!closed_ && !reactions_.empty() && armSock_ != nullptr && !armSock_->closed()) {
    ok = batcher_.lastTouched() <= armedGen_ && batcher_.runStart() != 0 && batcher_.runStart() <= armedGen_ + 1;
  }
  armed_ = ok;
  return Napi::Boolean::New(info.Env(), ok);
}

void NftMonitor::DisarmNow() {
  armed_ = false;
  reactions_.clear();
  triggers_.clear();
  triggerEvents_ = 0;
  undos_ = false;
}

bool NftMonitor::React(MonitorBatch* b) {
  if (!armed_ || b->overflow || b->truncated || !b->foreign || (b->events.size() > triggerEvents_ && !undos_)) return false;
  // The first commit after armedGen_ that touches a watched table, every commit since seen whole.
  if (b->since == 0 || b->since > armedGen_ + 1 || b->prevTouched > armedGen_ || b->generation <= armedGen_) return false;
  armed_ = false;  // this batch ends the arm, answered or not
  std::string key;
  for (const MonitorEvent& e : b->events) AppendTrigger(&key, e.type, e.family, e.table, e.name, e.handle);
  auto it = triggers_.find(key);
  // An undo names one event, and answers a commit of one or more such events (the kernel sends an
  // element deletion in one message or several), each with its message kept.
  if (it == triggers_.end() && undos_) {
    std::string one;
    const MonitorEvent& e = b->events[0];
    AppendTrigger(&one, e.type, e.family, e.table, e.name, e.handle);
    it = key.size() % one.size() == 0 ? triggers_.find(one) : triggers_.end();
    for (size_t at = 0; it != triggers_.end() && at < key.size(); at += one.size()) {
      if (key.compare(at, one.size(), one) != 0) it = triggers_.end();
    }
    if (it != triggers_.end() && !reactions_[it->second].undo) it = triggers_.end();
  }
  bool kept = true;
  if (it != triggers_.end() && reactions_[it->second].undo) {
    for (const MonitorEvent& e : b->events) kept = kept && e.raw.size() >= sizeof(nlmsghdr) + sizeof(nfgenmsg);
  }
  NftSocket* sock = armSock_;
  if (it == triggers_.end() || !kept || sock == nullptr || sock->closed() || !sock->TryTakeGate()) {
    DisarmNow();
    return false;
  }
  const Reaction& r = reactions_[it->second];
  auto batch = std::make_unique<EncodedBatch>();
  batch->bytes = sock->TakeEncodeBuffer();
  if (!r.undo) {
    batch->bytes.assign(r.bytes.begin(), r.bytes.end());
    batch->messageOp = r.messageOp;
  } else {
    // Each deletion's own message, sent back as a request to add what it deleted (sequence 1 on,
    // between the markers: BATCH_END's sequence follows them).
    batch->bytes.assign(r.bytes.begin(), r.bytes.begin() + r.endAt);
    uint32_t seq = 1;
    for (const MonitorEvent& e : b->events) {
      const size_t at = batch->bytes.size();
      batch->bytes.insert(batch->bytes.end(), e.raw.begin(), e.raw.end());
      batch->bytes.resize(at + MNL_ALIGN(e.raw.size()), 0);
      nlmsghdr* nlh = reinterpret_cast<nlmsghdr*>(batch->bytes.data() + at);
      nlh->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM);
      nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
      nlh->nlmsg_seq = seq++;
      nlh->nlmsg_pid = 0;
    }
    const size_t endAt = batch->bytes.size();
    batch->bytes.insert(batch->bytes.end(), r.bytes.begin() + r.endAt, r.bytes.end());
    reinterpret_cast<nlmsghdr*>(batch->bytes.data() + endAt)->nlmsg_seq = seq;
    batch->messageOp.assign(b->events.size(), 0);
  }
  uint32_t gen = htonl(b->generation);
  std::memcpy(batch->bytes.data() + r.genAt, &gen, sizeof(gen));
  CommitRun run(sock, std::move(batch), true);
  run.Run();
  sock->ReleaseGate();
  b->reactionErrno = run.Settle(&b->reactionHandles);
  run.Release();
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  b->reactedNs = static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  b->reacted = true;
  b->reaction = it->second;
  DisarmNow();
  return true;
}

}  // namespace nfk
