#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <unistd.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "batch.h"
#include "decode.h"
#include "dump.h"
#include "encode.h"
#include "expr_table.h"

namespace nfk {

namespace {

// One datagram can carry many dump messages; 256 KiB is a dozen NLMSG_GOODSIZE skbs.
constexpr size_t kRecvBuffer = 256 * 1024;

// Test only (test/netlink/watch-drop.test.ts): with NFKEEPER_TEST_DROP_NOTIFICATION set at load, a
// watched dump (Watch) reads the variable again when it joins and, if it holds K > 0, discards
// the K-th notification datagram it receives and reports ENOBUFS in its place: what the kernel
// does when one does not fit. Unset, Recv pays one comparison with zero.
const bool kDropSeam = getenv("NFKEEPER_TEST_DROP_NOTIFICATION") != nullptr;


// Unbound with `bind` false: NftSocket::Reopen binds it to the port it replaces.
mnl_socket* OpenHere(unsigned groups, std::string* failedStep, bool bind = true) {
  mnl_socket* nl = mnl_socket_open(NETLINK_NETFILTER);
  if (nl == nullptr) {
    *failedStep = "socket(NETLINK_NETFILTER)";
    return nullptr;
  }
  if (bind && mnl_socket_bind(nl, groups, MNL_SOCKET_AUTOPID) < 0) {
    int e = errno;
    mnl_socket_close(nl);
    errno = e;
    *failedStep = "bind";
    return nullptr;
  }
  int fd = mnl_socket_get_fd(nl);
  int one = 1;
  // Acks carry only the header of the message they answer (keeps big batches' acks small),
  // and errors may carry the kernel's extended-ack text.
  setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
  setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  // A wedged kernel answer must not hang a worker thread forever.
  timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return nl;
}

// OpenHere from a short-lived thread in the namespace of `nsfd`, since setns() only moves the
// calling thread; the socket stays bound to the namespace it was created in.
mnl_socket* OpenIn(int nsfd, unsigned groups, std::string* failedStep, bool bind) {
  mnl_socket* nl = nullptr;
  int err = 0;
  std::thread t([&] {
    if (setns(nsfd, CLONE_NEWNET) < 0) {
      err = errno;
      *failedStep = "setns";
      return;
    }
    nl = OpenHere(groups, failedStep, bind);
    if (nl == nullptr) err = errno;
  });
  t.join();
  if (nl == nullptr) errno = err;
  return nl;
}

}  // namespace

// Test only (test/reliability/reopen-kill.test.ts, resend-kill.test.ts, middle-run-kill.test.ts): NFKEEPER_TEST_KILL_AT
// names a point where the process kills itself (SIGKILL). Read once, when the addon is loaded;
// unset, each point is one comparison with null.
static const char* const kKillAt = getenv("NFKEEPER_TEST_KILL_AT");

void KillPoint(const char* point) {
  if (kKillAt == nullptr || strcmp(kKillAt, point) != 0) return;
  dprintf(2, "nfkeeper: killed at %s (NFKEEPER_TEST_KILL_AT)\n", point);
  raise(SIGKILL);
}

mnl_socket* OpenNetfilterSocket(const std::string& netnsPath, unsigned groups, std::string* failedStep) {
  if (netnsPath.empty()) return OpenHere(groups, failedStep);
  int nsfd = open(netnsPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) {
    *failedStep = "open " + netnsPath;
    return nullptr;
  }
  mnl_socket* nl = OpenIn(nsfd, groups, failedStep, true);
  int e = errno;
  close(nsfd);
  if (nl == nullptr && *failedStep == "setns") *failedStep = "setns " + netnsPath;
  errno = e;
  return nl;
}

Napi::Function NftSocket::Init(Napi::Env env) {
  return DefineClass(env, "NftSocket",
                     {
                         InstanceMethod<&NftSocket::Close>("close"),
                         InstanceMethod<&NftSocket::Generation>("generation"),
                         InstanceMethod<&NftSocket::Dump>("dump"),
                         InstanceMethod<&NftSocket::Commit>("commit"),
                         InstanceMethod<&NftSocket::CommitNow>("commitNow"),
                         InstanceMethod<&NftSocket::Recommit>("recommit"),
                         InstanceAccessor<&NftSocket::GetPortId>("portId"),
                         InstanceAccessor<&NftSocket::GetClosed>("closed"),
                         InstanceAccessor<&NftSocket::GetTakenInterrupted>("dumpsTakenInterrupted"),
                         InstanceAccessor<&NftSocket::GetTestDrops>("testNotificationsDropped"),
                         InstanceMethod<&NftSocket::NetnsCookie>("netnsCookie"),
                     });
}

// new NftSocket(netnsPath?: string, options?: { receiveBufferLimit?: number })
NftSocket::NftSocket(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NftSocket>(info) {
  Napi::Env env = info.Env();
  std::string path;
  if (info.Length() > 0 && info[0].IsString()) path = info[0].As<Napi::String>().Utf8Value();
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object o = info[1].As<Napi::Object>();
    if (Has(o, "receiveBufferLimit")) rcvbufLimit_ = GetU32(o, "receiveBufferLimit");
  }
  std::string step;
  ownNamespace_ = path.empty();
  nl_ = OpenNetfilterSocket(path, 0, &step);
  if (nl_ == nullptr) {
    int e = errno;
    throw MakeNetlinkError(env, step + ": " + std::strerror(e), e, "open");
  }
  portId_ = mnl_socket_get_portid(nl_);
  buf_.resize(kRecvBuffer);
  data_ = GetAddonData(env);
  data_->live.insert(this);
}

NftSocket::~NftSocket() {
  CloseNow();
  if (data_ != nullptr) data_->live.erase(this);
}

void NftSocket::CloseNow() {
  // Work still waiting runs after it and finds the socket closed (EBADF).
  JsGateHold hold(this);
  refused_.reset();
  if (dumpNl_ != nullptr) {
    mnl_socket_close(dumpNl_);
    dumpNl_ = nullptr;
  }
  if (nl_ != nullptr) {
    mnl_socket_close(nl_);
    nl_ = nullptr;
  }
}

mnl_socket* NftSocket::OpenBeside(bool bind) {
  std::string step;
  if (ownNamespace_) return OpenHere(0, &step, bind);
  // The socket's namespace itself, not the path it was opened by (which may be gone).
  int nsfd = ioctl(mnl_socket_get_fd(nl_), SIOCGSKNS);
  if (nsfd < 0) return nullptr;
  mnl_socket* fresh = OpenIn(nsfd, 0, &step, bind);
  int e = errno;
  close(nsfd);
  errno = e;
  return fresh;
}

mnl_socket* NftSocket::DumpSocket() {
  if (nl_ == nullptr || !mayOwn_) return nl_;
  if (dumpNl_ == nullptr) {
    dumpNl_ = OpenBeside(true);
    dumpRcvbuf_ = 0;
    if (dumpNl_ != nullptr) KillPoint("dump-socket-opened");
    if (dumpNl_ != nullptr && rcvbufLimit_ != 0) {
      // The limit is a promise for every socket of this one, as a commit keeps it (EnsureBuffers).
      int v = static_cast<int>(rcvbufLimit_);
      setsockopt(mnl_socket_get_fd(dumpNl_), SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
  }
  return dumpNl_ != nullptr ? dumpNl_ : nl_;
}

bool NftSocket::EndDump(mnl_socket* via) {
  if (via != nullptr && via == dumpNl_) {
    // Released, the socket takes the kernel's dump with it. It owns nothing and its port id is
    // nobody's concern (no commit goes over it): nothing to keep.
    KillPoint("dump-socket-closing");
    mnl_socket_close(dumpNl_);
    dumpNl_ = nullptr;
    KillPoint("dump-socket-closed");
    return true;
  }
  return Reopen();
}

bool NftSocket::Reopen() {
  if (nl_ == nullptr || mayOwn_) return false;
  const int fd = mnl_socket_get_fd(nl_);
  mnl_socket* fresh = OpenBeside(false);
  if (fresh == nullptr) return false;
  KillPoint("reopen-opened");
  // The new socket takes the old one's descriptor: the old one is released (the kernel ends its
  // dump, and frees the port), and nl_ stays the same for the JS thread's reads of it.
  if (dup3(mnl_socket_get_fd(fresh), fd, O_CLOEXEC) < 0) {
    mnl_socket_close(fresh);
    return false;
  }
  mnl_socket_close(fresh);
  KillPoint("reopen-replaced");
  // The same port id: the monitor tells our own commits by it. A forked child that has not
  // exec'd yet may hold the old socket a moment longer, keeping the port.
  for (int i = 0;; i++) {
    if (mnl_socket_bind(nl_, 0, portId_) == 0) break;
    if (errno != EADDRINUSE || i == 20) {
      // Another socket has the port: any port (portId says which) rather than no socket.
      if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0) break;
      portId_ = mnl_socket_get_portid(nl_);
      break;
    }
    usleep(1000);
  }
  KillPoint("reopen-bound");
  sndbuf_ = rcvbuf_ = rcvbufGranted_ = 0;  // the new socket has the default sizes
  return true;
}

void NftSocket::QueueGated(Napi::AsyncWorker* w) {
  if (TryTakeGate()) {
    w->Queue();
    return;
  }
  waiting_.push_back(w);
}

void NftSocket::StartWaiting() {
  while (!waiting_.empty() && gate_.try_lock()) {
    Napi::AsyncWorker* w = waiting_.front();
    waiting_.pop_front();
    w->Queue();
  }
}

void NftSocket::ThrowIfClosed(Napi::Env env, const char* op) {
  if (nl_ == nullptr) throw MakeNetlinkError(env, "socket is closed", EBADF, op);
}

Napi::Value NftSocket::Close(const Napi::CallbackInfo& info) {
  CloseNow();
  return info.Env().Undefined();
}

Napi::Value NftSocket::GetPortId(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), portId_);
}

// The namespace's cookie (SO_NETNS_COOKIE, Linux 5.14): unique among the namespaces of one boot,
// never reused as an inode number may be. A decimal string (64 bits); undefined where the kernel
// has no such option.
Napi::Value NftSocket::NetnsCookie(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ThrowIfClosed(env, "netnsCookie");
#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (getsockopt(mnl_socket_get_fd(nl_), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0 || len != sizeof(cookie)) return env.Undefined();
  return Napi::String::New(env, std::to_string(cookie));
}

Napi::Value NftSocket::GetClosed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), nl_ == nullptr);
}

Napi::Value NftSocket::GetTestDrops(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), testDrops_);
}

Napi::Value NftSocket::GetTakenInterrupted(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), takenInterrupted_);
}

int NftSocket::SendAll(mnl_socket* via, const void* data, size_t len) {
  ssize_t n = mnl_socket_sendto(via, data, len);
  if (n < 0) return -1;
  if (static_cast<size_t>(n) != len) {
    errno = EMSGSIZE;
    return -1;
  }
  return 0;
}

ssize_t NftSocket::Recv(mnl_socket* via, int flags, uint32_t* groups) {
  for (;;) {
    sockaddr_nl from = {};
    socklen_t fromLen = sizeof(from);
    ssize_t n = recvfrom(mnl_socket_get_fd(via), buf_.data(), buf_.size(), flags,
                         reinterpret_cast<sockaddr*>(&from), &fromLen);
    if (n < 0 && errno == EINTR) continue;
    // Only the kernel (port 0) answers our requests. Another process with
    // CAP_NET_ADMIN can unicast to our port id; its datagrams are dropped
    // rather than read as acknowledgements or dump messages.
    if (n >= 0 && from.nl_pid != 0) continue;
    if (dropAt_ != 0 && n >= 0 && from.nl_groups != 0 && ++notices_ == dropAt_) {
      testDrops_++;
      errno = ENOBUFS;
      return -1;
    }
    // (A commit's echo comes with the group set too: nlmsg_notify unicasts the skb it multicast.)
    if (groups != nullptr) *groups = n >= 0 ? from.nl_groups : 0;
    return n;
  }
}

bool NftSocket::Watch(mnl_socket* via, bool on) {
  const int fd = mnl_socket_get_fd(via);
  // Left: what came before leaving is read away too. Joined: an empty queue, so that the kernel
  // reports the first notification it drops for want of room (ENOBUFS; it reports one per
  // congestion, and a queue emptied ends it).
  int group = NFNLGRP_NFTABLES;
  if (!on) setsockopt(fd, SOL_NETLINK, NETLINK_DROP_MEMBERSHIP, &group, sizeof(group));
  if (on) WatchBuffer(via);
  notices_ = 0;
  dropAt_ = 0;
  if (kDropSeam && on) {
    const char* k = getenv("NFKEEPER_TEST_DROP_NOTIFICATION");
    dropAt_ = k != nullptr ? static_cast<uint32_t>(strtoul(k, nullptr, 10)) : 0;
  }
  for (int i = 0; i < 65536; i++) {
    ssize_t n = recv(fd, buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n < 0 && errno != EINTR && errno != ENOBUFS) break;
  }
  return !on || setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) == 0;
}

void NftSocket::WatchBuffer(mnl_socket* via) {
  // A commit elsewhere queues ~1.7 KB of notifications (its changes, its NEWGEN: two skbs of ~830
  // bytes' truesize each). The default 208 KiB held 12 ms of a 10,000 commits/s neighbour: any
  // longer stall of the reading thread overflowed it (ENOBUFS), and at load every one of a 20,000
  // rule export's 32 tries was spoiled so. 8 MiB (16 granted) holds ~270 ms at 35,000 commits/s;
  // it is memory charged only while notifications wait, and the thread drains them as they come.
  constexpr size_t kWatchRcvbuf = 8 << 20;
  size_t want = kWatchRcvbuf;
  if (rcvbufLimit_ != 0) want = std::min(want, rcvbufLimit_);
  const bool commitSocket = via == nl_;
  if (commitSocket && rcvbuf_ >= want) return;
  if (!commitSocket && dumpRcvbuf_ >= want) return;
  const int fd = mnl_socket_get_fd(via);
  int v = static_cast<int>(want);
  // A limit is a promise not to use more: no FORCE, which ignores rmem_max.
  if (rcvbufLimit_ != 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  }
  if (commitSocket) {
    rcvbuf_ = want;
    rcvbufGranted_ = 0;  // EnsureBuffers reads what was granted again
  } else {
    dumpRcvbuf_ = want;
  }
}

bool NftSocket::EnsureBuffers(size_t bytes, size_t messages) {
  int fd = mnl_socket_get_fd(nl_);
  // netlink_sendmsg refuses a datagram larger than sk_sndbuf - 32, and the
  // whole batch must travel in one datagram.
  size_t wantSnd = bytes + 64 * 1024;
  if (wantSnd > sndbuf_) {
    int v = static_cast<int>(std::min<size_t>(wantSnd, INT32_MAX / 2));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    sndbuf_ = wantSnd;
  }
  // Every message is acknowledged with its own skb, whose truesize (with
  // NETLINK_CAP_ACK; more with an error text) fits in 1536 bytes a message.
  size_t wantRcv = messages * 1536 + 256 * 1024;
  if (rcvbufLimit_ != 0) wantRcv = std::min(wantRcv, rcvbufLimit_);
  bool rcvbufChanged = false;
  if (wantRcv > rcvbuf_ || (rcvbufLimit_ != 0 && wantRcv != rcvbuf_)) {
    rcvbufChanged = true;
    int v = static_cast<int>(std::min<size_t>(wantRcv, INT32_MAX / 2));
    // A limit is a promise not to use more: no FORCE, which ignores rmem_max.
    if (rcvbufLimit_ != 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0) {
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
    rcvbuf_ = wantRcv;
  }
  // What the kernel granted (it doubles the request, caps SO_RCVBUF at
  // rmem_max); the kernel drops an ack once the queued truesize exceeds it.
  // Read again only after a change: a small commit pays no system call for it.
  if (rcvbufChanged || rcvbufGranted_ == 0) {
    int granted = 0;
    socklen_t len = sizeof(granted);
    if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &granted, &len) < 0) return false;
    rcvbufGranted_ = static_cast<size_t>(granted);
  }
  return rcvbufGranted_ >= messages * 1024 + 64 * 1024;
}

void NftSocket::ReturnEncodeBuffer(std::vector<uint8_t>&& b) {
  // Keep the bigger one, up to a bound: a big batch (an install, a rewrite) should not pin its
  // memory for the life of the daemon; small ones reuse it.
  constexpr size_t kKeepUpTo = 256 << 10;
  if (b.capacity() > kKeepUpTo) {
    const size_t bytes = b.capacity();
    std::vector<uint8_t>().swap(b);
    ReleaseFreedMemory(bytes);
    return;
  }
  if (b.capacity() <= encodeBuf_.capacity()) return;
  b.clear();
  encodeBuf_ = std::move(b);
}

// generation(ifFree?): the ruleset generation id, NFT_MSG_GETGEN -> NFT_MSG_NEWGEN.
// Synchronous: one round trip of a few microseconds, once the socket is free. With `ifFree`
// undefined instead of waiting while a dump or commit holds the socket (a dump of a long chain
// holds it for seconds, and the JS thread would wait with it).
Napi::Value NftSocket::Generation(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ifFree = info.Length() > 0 && info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value();
  if (ifFree && !TryTakeGate()) return env.Undefined();
  if (!ifFree) gate().lock();
  JsGateHold hold(this, true);
  ThrowIfClosed(env, "generation");
  uint32_t seq = NextSeq(1);
  std::vector<uint8_t> req;
  EncodeRequest(&req, NFT_MSG_GETGEN, AF_UNSPEC, 0, seq, {});
  if (SendAll(req.data(), req.size()) < 0) {
    int e = errno;
    throw MakeNetlinkError(env, std::string("send GETGEN: ") + std::strerror(e), e, "generation");
  }
  for (;;) {
    ssize_t n = Recv(0);
    if (n < 0) {
      int e = errno;
      throw MakeNetlinkError(env, std::string("recv GETGEN: ") + std::strerror(e), e, "generation");
    }
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(buf_.data());
    int len = static_cast<int>(n);
    for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_seq != seq) continue;  // a straggler from an earlier request
      if (nlh->nlmsg_type == NLMSG_ERROR) {
        const nlmsgerr* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
        if (err->error == 0) continue;
        throw MakeNetlinkError(env, std::string("GETGEN: ") + std::strerror(-err->error), -err->error,
                               "generation");
      }
      uint32_t id;
      if (DecodeGeneration(nlh, &id)) return Napi::Number::New(env, id);
    }
  }
}

// dump(kind, family, table?, name?, single?, objects?, ruleMode?) -> Promise<object[]> (ruleMode: see DumpRequest)
Napi::Value NftSocket::Dump(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ThrowIfClosed(env, "dump");
  std::string k = info[0].As<Napi::String>().Utf8Value();
  DumpRequest req;
  if (k == "table") req.kind = DumpKind::Table;
  else if (k == "chain") req.kind = DumpKind::Chain;
  else if (k == "rule") req.kind = DumpKind::Rule;
  else if (k == "set") req.kind = DumpKind::Set;
  else if (k == "element") req.kind = DumpKind::Element;
  else if (k == "obj") req.kind = DumpKind::Object;
  else throw Napi::TypeError::New(env, "unknown dump kind '" + k + "'");
  // Family by name; anything else (undefined) is AF_UNSPEC, every family.
  int64_t fam = 0;
  if (info[1].IsString() && !EnumFromName(kFamilyMap, info[1].As<Napi::String>().Utf8Value().c_str(), &fam)) {
    throw Napi::TypeError::New(env, "unknown family '" + info[1].As<Napi::String>().Utf8Value() + "'");
  }
  req.family = static_cast<uint16_t>(fam);
  req.table = info.Length() > 2 && info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "";
  req.name = info.Length() > 3 && info[3].IsString() ? info[3].As<Napi::String>().Utf8Value() : "";
  req.single = info.Length() > 4 && info[4].ToBoolean().Value();
  req.objects = info.Length() > 5 && info[5].ToBoolean().Value();
  req.ruleMode = info.Length() > 6 && info[6].IsNumber() ? info[6].As<Napi::Number>().Int32Value() : 0;
  return StartDump(env, this, info.This().As<Napi::Object>(), req);
}

// The commit of `info`'s batch (ops, generation?, echo?, exprBytes?, digests?, hints?, keepExprs?), encoded.
std::unique_ptr<CommitRun> NftSocket::PrepareCommit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ThrowIfClosed(env, "commit");
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "commit takes an array of operations");
  bool hasGen = info.Length() > 1 && info[1].IsNumber();
  uint32_t gen = hasGen ? info[1].As<Napi::Number>().Uint32Value() : 0;
  Napi::Array ops = info[0].As<Napi::Array>();
  refused_.reset();  // another batch: the refused one is not sent again
  auto batch = std::make_unique<EncodedBatch>();
  batch->bytes = TakeEncodeBuffer();
  // Sequence numbers are taken under the lock in Run(); encode with a
  // placeholder base and renumber there.
  bool digests = info.Length() > 4 && info[4].ToBoolean().Value();
  bool keepExprs = info.Length() > 6 && info[6].ToBoolean().Value();
  EncodeBatch(env, ops, 0, hasGen, gen, batch.get(), info.Length() > 3 ? info[3] : Napi::Value(), digests,
              info.Length() > 5 ? info[5] : Napi::Value(), keepExprs);
  // echo: true (every new rule's), or the op indices whose new rules are echoed (an array).
  std::vector<uint32_t> echoOps;
  bool echo = false;
  if (info.Length() > 2 && info[2].IsArray()) {
    Napi::Array a = info[2].As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value v = a.Get(i);
      if (!v.IsNumber()) throw Napi::TypeError::New(env, "commit: echo takes true or an array of op indices");
      echoOps.push_back(v.As<Napi::Number>().Uint32Value());
    }
    std::sort(echoOps.begin(), echoOps.end());
    echo = !echoOps.empty();
  } else {
    echo = info.Length() > 2 && info[2].ToBoolean().Value();
  }
  return std::make_unique<CommitRun>(this, std::move(batch), echo, std::move(echoOps));
}

// commit(ops, generation?, echo?, exprBytes?, digests?, hints?, keepExprs?) -> Promise<void | { handles?: [opIndex, handle][], held?: string[],
// echoCut?: true, digests?: string[], exprs?: Buffer, exprsAt?: Uint32Array }>: echo is true or the op indices whose new rules are echoed; handles with echo (where the receive buffer holds every echo; none, and echoCut, when
// the kernel dropped some), digests when asked (per op index, EncodedBatch::digests, and unnamed), with both the echoed
// rules' (held); with keepExprs, the batch's bytes as sent and where each op's expressions attribute lies in them (EncodedBatch::exprsAt).
Napi::Value NftSocket::Commit(const Napi::CallbackInfo& info) {
  return StartCommit(info.Env(), info.This().As<Napi::Object>(), PrepareCommit(info), true);
}

Napi::Value NftSocket::StartCommit(Napi::Env env, Napi::Object self, std::unique_ptr<CommitRun> run, bool digest) {
  if (run->Small() && TryTakeGate()) {
    // A small batch commits here and now, settling the promise before it is returned.
    if (digest) DigestEncodedRules(run->Batch());
    run->Run();
    ReleaseGate();
    auto deferred = Napi::Promise::Deferred::New(env);
    Napi::Value v;
    bool ok = run->Outcome(env, &v);
    if (run->RefusedByGeneration()) KeepRefused(std::move(run));
    if (ok) deferred.Resolve(v);
    else deferred.Reject(v);
    return deferred.Promise();
  }
  EncodedBatch* batch = run->Batch();
  auto* w = new CommitWorker(env, self, std::move(run), this);
  Napi::Promise p = w->Promise();
  QueueGated(w);
  if (!digest) return p;
  // The rules' digests while the worker sends the batch and the kernel takes it: the outcome that
  // returns them is settled on this thread, after this. The batch lives until then. A digest not
  // made (out of memory) stays '', no digest: the commit is then read back, not proved by its echo.
  try {
    DigestEncodedRules(batch);
  } catch (const std::exception&) {
  }
  return p;
}

void NftSocket::KeepRefused(std::unique_ptr<CommitRun> run) {
  if (closed()) {
    run->Release();
    return;
  }
  refused_ = std::move(run);
  KillPoint("refused-kept");
}

// recommit(generation) -> Promise (commit()'s outcome) | false: the last batch the kernel refused
// by its generation (commit() with one), sent again as it was encoded, its generation replaced by
// `generation`: nothing is encoded between the caller's choice of it and the send. False, nothing
// sent, when no refused batch is kept (another commit since, or none refused).
Napi::Value NftSocket::Recommit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ThrowIfClosed(env, "commit");
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "recommit takes a generation");
  std::unique_ptr<CommitRun> run = std::move(refused_);
  if (!run) return Napi::Boolean::New(env, false);
  if (!run->SetGeneration(info[0].As<Napi::Number>().Uint32Value())) {
    run->Release();
    return Napi::Boolean::New(env, false);
  }
  KillPoint("recommit-proved");
  // Digested at its first send already (DigestEncodedRules emptied its list).
  return StartCommit(env, info.This().As<Napi::Object>(), std::move(run), false);
}

// commitNow(ops, generation?, echo?, exprBytes?, digests?) -> void | { handles?, digests? } | false: commit()'s work for
// a small batch on this thread, its outcome returned or thrown, without a promise (the keeper's
// repair of a foreign change). False, with nothing sent, when the batch is not small or the socket
// is busy (a dump or commit on a worker): commit() then.
Napi::Value NftSocket::CommitNow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::unique_ptr<CommitRun> run = PrepareCommit(info);
  if (!run->Small() || !TryTakeGate()) {
    run->Release();
    return Napi::Boolean::New(env, false);
  }
  DigestEncodedRules(run->Batch());
  run->Run();
  ReleaseGate();
  Napi::Value v;
  bool ok = run->Outcome(env, &v);
  if (run->RefusedByGeneration()) KeepRefused(std::move(run));
  if (!ok) throw Napi::Error(env, v);
  return v;
}

}  // namespace nfk
