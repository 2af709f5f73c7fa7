#include "monitor.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <cerrno>
#include <cstring>

#include "decode.h"
#include "expr_table.h"
#include "socket.h"

namespace nfk {

namespace {

constexpr size_t kMaxEventsPerBatch = 256;

const char* EventName(uint16_t type) {
  switch (type) {
    case NFT_MSG_NEWTABLE: return "newtable";
    case NFT_MSG_DELTABLE: return "deltable";
    case NFT_MSG_NEWCHAIN: return "newchain";
    case NFT_MSG_DELCHAIN: return "delchain";
    case NFT_MSG_NEWRULE: return "newrule";
    case NFT_MSG_DELRULE: return "delrule";
    case NFT_MSG_NEWSET: return "newset";
    case NFT_MSG_DELSET: return "delset";
    case NFT_MSG_NEWSETELEM: return "newsetelem";
    case NFT_MSG_DELSETELEM: return "delsetelem";
    case NFT_MSG_NEWOBJ: return "newobj";
    case NFT_MSG_DELOBJ: return "delobj";
    case NFT_MSG_NEWFLOWTABLE: return "newflowtable";
    case NFT_MSG_DELFLOWTABLE: return "delflowtable";
    default: return nullptr;
  }
}

// Attribute 1 is the table name in every object message (NFTA_TABLE_NAME,
// NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE,
// NFTA_OBJ_TABLE, NFTA_FLOWTABLE_TABLE); the second name differs per object.
void ParseEvent(const nlmsghdr* nlh, uint16_t type, MonitorEvent* ev) {
  uint16_t nameAttr = 0, handleAttr = 0;
  switch (type) {
    case NFT_MSG_NEWCHAIN: case NFT_MSG_DELCHAIN:
      nameAttr = NFTA_CHAIN_NAME; handleAttr = NFTA_CHAIN_HANDLE; break;
    case NFT_MSG_NEWRULE: case NFT_MSG_DELRULE:
      nameAttr = NFTA_RULE_CHAIN; handleAttr = NFTA_RULE_HANDLE; break;
    case NFT_MSG_NEWSET: case NFT_MSG_DELSET: nameAttr = NFTA_SET_NAME; break;
    case NFT_MSG_NEWSETELEM: case NFT_MSG_DELSETELEM: nameAttr = NFTA_SET_ELEM_LIST_SET; break;
    default: break;
  }
  nlattr* attr;
  NFK_ATTR_FOR_EACH(attr, nlh, sizeof(nfgenmsg)) {
    uint16_t t = mnl_attr_get_type(attr);
    if (t == 1 && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0) ev->table = mnl_attr_get_str(attr);
    else if (nameAttr != 0 && t == nameAttr && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) >= 0)
      ev->name = mnl_attr_get_str(attr);
    else if (handleAttr != 0 && t == handleAttr && mnl_attr_get_payload_len(attr) == 8)
      ev->handle = be64toh(mnl_attr_get_u64(attr));
  }
}

}  // namespace

Napi::Function NftMonitor::Init(Napi::Env env) {
  return DefineClass(env, "NftMonitor",
                     {
                         InstanceMethod<&NftMonitor::Close>("close"),
                         InstanceMethod<&NftMonitor::SetFilter>("setFilter"),
                         InstanceMethod<&NftMonitor::Ref>("ref"),
                         InstanceMethod<&NftMonitor::Unref>("unref"),
                     });
}

// new NftMonitor(netnsPath: string | undefined, onBatch: (batch) => void,
//                tables: [family, name][] | null, ignorePorts: number[])
NftMonitor::NftMonitor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NftMonitor>(info) {
  Napi::Env env = info.Env();
  std::string path;
  if (info[0].IsString()) path = info[0].As<Napi::String>().Utf8Value();
  if (!info[1].IsFunction()) throw Napi::TypeError::New(env, "NftMonitor needs a callback");
  ParseFilter(env, info[2], info[3]);
  std::string step;
  nl_ = OpenNetfilterSocket(path, 1u << (NFNLGRP_NFTABLES - 1), &step);
  if (nl_ == nullptr) {
    int e = errno;
    throw MakeNetlinkError(env, step + ": " + std::strerror(e), e, "monitor");
  }
  int fd = mnl_socket_get_fd(nl_);
  // A foreign storm should not overflow us; if it still does we see ENOBUFS.
  int size = 8 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  timeval none = {0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  wakeFd_ = eventfd(0, EFD_CLOEXEC);
  tsfn_ = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "nfkeeper.monitor", 0, 1);
  data_ = GetAddonData(env);
  data_->live.insert(this);
  thread_ = std::thread([this] { Run(); });
}

NftMonitor::~NftMonitor() {
  CloseNow();
  if (data_ != nullptr) data_->live.erase(this);
}

void NftMonitor::CloseNow() {
  if (closed_) return;
  closed_ = true;
  stopping_ = true;
  uint64_t one = 1;
  if (wakeFd_ >= 0 && write(wakeFd_, &one, sizeof(one)) < 0) { /* the thread also polls stopping_ */ }
  if (thread_.joinable()) thread_.join();
  tsfn_.Release();
  if (nl_ != nullptr) mnl_socket_close(nl_), nl_ = nullptr;
  if (wakeFd_ >= 0) close(wakeFd_), wakeFd_ = -1;
}

Napi::Value NftMonitor::Close(const Napi::CallbackInfo& info) {
  CloseNow();
  return info.Env().Undefined();
}

Napi::Value NftMonitor::Ref(const Napi::CallbackInfo& info) {
  if (!closed_) tsfn_.Ref(info.Env());
  return info.Env().Undefined();
}

Napi::Value NftMonitor::Unref(const Napi::CallbackInfo& info) {
  if (!closed_) tsfn_.Unref(info.Env());
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
  std::set<uint32_t> ports;
  if (ignorePorts.IsArray()) {
    Napi::Array arr = ignorePorts.As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) ports.insert(arr.Get(i).As<Napi::Number>().Uint32Value());
  }
  std::lock_guard<std::mutex> lock(filterMutex_);
  tables_ = std::move(t);
  allTables_ = all;
  ignorePorts_ = std::move(ports);
}

// setFilter(tables: [family, name][] | null, ignorePorts: number[])
Napi::Value NftMonitor::SetFilter(const Napi::CallbackInfo& info) {
  ParseFilter(info.Env(), info[0], info[1]);
  return info.Env().Undefined();
}

bool NftMonitor::Wanted(const MonitorEvent& e) {
  if (e.type == "deltable") return true;  // any table deletion may be `nft flush ruleset`
  std::lock_guard<std::mutex> lock(filterMutex_);
  return allTables_ || tables_.count({e.family, e.table}) > 0;
}

void NftMonitor::Deliver(MonitorBatch* batch) {
  napi_status st = tsfn_.BlockingCall(batch, [](Napi::Env env, Napi::Function cb, MonitorBatch* b) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("overflow", b->overflow);
    o.Set("generation", b->generation);
    o.Set("truncated", b->truncated);
    Napi::Array events = Napi::Array::New(env, b->events.size());
    for (size_t i = 0; i < b->events.size(); i++) {
      const MonitorEvent& e = b->events[i];
      Napi::Object eo = Napi::Object::New(env);
      eo.Set("type", e.type);
      eo.Set("family", FamilyValue(env, e.family));
      eo.Set("table", e.table);
      if (!e.name.empty()) eo.Set("name", e.name);
      if (e.handle != 0) eo.Set("handle", static_cast<double>(e.handle));
      eo.Set("portId", e.portId);
      events.Set(i, eo);
    }
    o.Set("events", events);
    delete b;
    cb.Call({o});
  });
  if (st != napi_ok) delete batch;
}

void NftMonitor::Run() {
  std::vector<uint8_t> buf(256 * 1024);
  int fd = mnl_socket_get_fd(nl_);
  auto pending = std::make_unique<MonitorBatch>();
  bool foreign = false;  // the pending batch holds an event not from an ignored port
  while (!stopping_) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {wakeFd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents || stopping_) break;
    ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == ENOBUFS) {
        auto b = new MonitorBatch();
        b->overflow = true;
        Deliver(b);
        pending = std::make_unique<MonitorBatch>();
        foreign = false;
        continue;
      }
      break;
    }
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(buf.data());
    int len = static_cast<int>(n);
    for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES) continue;
      uint16_t type = NFNL_MSG_TYPE(nlh->nlmsg_type);
      if (type == NFT_MSG_NEWGEN) {
        if (!pending->events.empty() && foreign) {
          DecodeGeneration(nlh, &pending->generation);
          Deliver(pending.release());
        }
        pending = std::make_unique<MonitorBatch>();
        foreign = false;
        continue;
      }
      const char* name = EventName(type);
      if (name == nullptr) continue;
      MonitorEvent ev;
      ev.type = name;
      ev.family = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh))->nfgen_family;
      ev.portId = nlh->nlmsg_pid;
      ParseEvent(nlh, type, &ev);
      if (!Wanted(ev)) continue;
      {
        std::lock_guard<std::mutex> lock(filterMutex_);
        if (ignorePorts_.count(ev.portId) == 0) foreign = true;
      }
      if (pending->events.size() < kMaxEventsPerBatch) pending->events.push_back(std::move(ev));
      else pending->truncated = true;
    }
  }
}

}  // namespace nfk
