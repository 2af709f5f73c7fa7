#include "dump.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "attr.h"
#include "object.h"
#include "decode.h"
#include "attr.h"
#include "object.h"
#include "decode_json.h"
#include "digest.h"
#include "encode.h"

namespace nfk {

namespace {

// Datagrams read on the JS thread before a dump that is still going is
// handed to a worker. The kernel builds the first chunk inside sendmsg() and
// each next one inside the recvmsg() that drains the previous, so this bounds
// the kernel work done on the JS thread to about three skbs of one chain.
constexpr int kInlineDatagrams = 2;

// Test only (test/netlink/dump-pause.test.ts): with NFKEEPER_TEST_DUMP_PAUSE set at load, a watched
// dump reads it again when it is sent and, if it holds K >= 0, pauses once it has sent its request
// (K = 0) or received its K-th datagram: it writes "K\n" to fd 3 and waits for a byte on fd 4, while
// the test commits. The kernel built the next datagram inside the recv that took this one, so a
// commit then lands between datagrams K + 1 and K + 2 (K = 0: 1 and 2). Unset, a dump pays one
// comparison.
const bool kPauseSeam = getenv("NFKEEPER_TEST_DUMP_PAUSE") != nullptr;

long TestPauseAt() {
  if (!kPauseSeam) return -1;
  const char* k = getenv("NFKEEPER_TEST_DUMP_PAUSE");
  return k != nullptr && *k != '\0' ? strtol(k, nullptr, 10) : -1;
}

void TestPause(long k) {
  dprintf(3, "%ld\n", k);
  char c;
  for (;;) {
    const ssize_t r = read(4, &c, 1);
    if (r >= 0 || (errno != EINTR && errno != EAGAIN)) break;
    pollfd p{4, POLLIN, 0};
    if (errno == EAGAIN) poll(&p, 1, -1);
  }
}

// One dump request and what came back: shared by the inline path on the JS
// thread and the worker that finishes a big dump.
struct DumpState : DumpRequest {
  explicit DumpState(const DumpRequest& req) : DumpRequest(req) {}
  bool filterTable = false;
  // The socket the request went over (NftSocket::DumpSocket); set by Send.
  mnl_socket* via = nullptr;
  uint32_t seq = 0;
  bool interrupted = false;
  // A rule dump of one table watches the commits made while it runs (NftSocket::Watch), so that an
  // interrupted one is still taken when none of them named the table (Notice, Confirm).
  bool watch = false;
  // Since the request: a commit named the table (or a notification could not be read), or
  // notifications were dropped (ENOBUFS). Either way an interrupted dump is not taken.
  bool spoiled = false;
  uint32_t lastGen = 0;  // the last NEWGEN's generation, if sawGen
  bool sawGen = false;
  // A set's element dump: the kernel never flags it interrupted (6.18: a commit deleting an element
  // between two of its datagrams gave a view of neither ruleset, unflagged). Watched all the same,
  // and one of more than one datagram is confirmed as an interrupted one is (Confirm): taken when no
  // commit since its request named the table. Its first message's generation (nfgenmsg res_id, the
  // low 16 bits) lets Confirm take it at once when no commit came since that datagram was built.
  bool confirmElements = false;
  bool haveStartGen = false;
  uint16_t startGen = 0;
  long dataDatagrams = 0;
  long lastDataDatagram = -1;
  // The test seam's pause (TestPauseAt; -1: none) and the dump's datagrams received so far.
  long pauseAt = -1;
  long received = 0;
  bool done = false;
  int err = 0;
  std::string message;
  std::vector<uint8_t> messages;
  // ruleMode 2: the answer as it is built, message by message as they come (on the worker thread
  // for a big dump), instead of a copy of every message decoded at the end: a big chain's
  // messages were held until then (the start-up's adoption and read-back).
  std::string digests = "[";
  std::string digestChain;
  bool digestOpen = false;
  const char* digestError = nullptr;

  void ForgetDigests() {
    digests.assign("[");
    digestChain.clear();
    digestOpen = false;
    digestError = nullptr;
  }

  // [[chain, [handle, digest, ...]], ...]: what a keeper that decoded these rules before needs.
  void TakeDigest(const nlmsghdr* nlh) {
    if (digestError != nullptr) return;
    if (!HasNfgenmsg(nlh)) {
      digestError = "cannot parse rule message: truncated";
      return;
    }
    AttrTable t(NFTA_RULE_MAX);
    mnl_attr_parse(nlh, sizeof(nfgenmsg), CollectAttr, &t);
    const char* c = AttrStr(t.at[NFTA_RULE_CHAIN]);
    uint64_t handle = 0;
    if (c == nullptr || !AttrU64(t.at[NFTA_RULE_HANDLE], &handle)) {
      digestError = "cannot parse rule message: no chain or handle";
      return;
    }
    if (!digestOpen || digestChain != c) {
      if (digestOpen) digests.append("]],");
      digestChain = c;
      digests.append("[");
      AppendJsonString(&digests, c);
      digests.append(",[");
      digestOpen = true;
    } else {
      digests.push_back(',');
    }
    digests.append(std::to_string(handle));
    digests.append(",\"");
    digests.append(RuleDigest(t.at[NFTA_RULE_USERDATA], t.at[NFTA_RULE_EXPRESSIONS]));
    digests.push_back('"');
  }

  void Fail(int e, std::string m) {
    err = e;
    message = std::move(m);
    done = true;
  }

  // The interrupted dump's messages can still be taken: no commit since the request named the table.
  bool Exact() const { return watch && !spoiled; }
  // An interrupted dump that can no longer be taken keeps nothing.
  void Spoil() {
    spoiled = true;
    if (interrupted) {
      messages.clear();
      ForgetDigests();
    }
  }
  // An interrupted dump taken only after Confirm.
  bool NeedsConfirm() const { return done && err == 0 && interrupted && Exact(); }

  // A datagram of notifications (the watch): each commit's changes, each naming its table in its
  // first attribute (type 1 for tables, chains, rules, sets, elements, objects and flowtables),
  // then its NEWGEN. Anything else, or anything unreadable, counts as naming this table.
  void Notice(const uint8_t* data, ssize_t n) {
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(data);
    int len = static_cast<int>(n);
    for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES || !HasNfgenmsg(nlh)) {
        Spoil();
        continue;
      }
      const uint16_t type = NFNL_MSG_TYPE(nlh->nlmsg_type);
      if (type == NFT_MSG_NEWGEN) {
        uint32_t id = 0;
        if (!DecodeGeneration(nlh, &id)) {
          Spoil();
          continue;
        }
        lastGen = id;
        sawGen = true;
        continue;
      }
      if (!NamesAnotherTable(nlh, type)) Spoil();
    }
    if (len > 0) Spoil();  // a truncated message
  }

  bool NamesAnotherTable(const nlmsghdr* nlh, uint16_t type) const {
    switch (type) {
      case NFT_MSG_NEWTABLE: case NFT_MSG_DELTABLE: case NFT_MSG_NEWCHAIN: case NFT_MSG_DELCHAIN:
      case NFT_MSG_NEWRULE: case NFT_MSG_DELRULE: case NFT_MSG_NEWSET: case NFT_MSG_DELSET:
      case NFT_MSG_NEWSETELEM: case NFT_MSG_DELSETELEM: case NFT_MSG_NEWOBJ: case NFT_MSG_DELOBJ:
      case NFT_MSG_NEWFLOWTABLE: case NFT_MSG_DELFLOWTABLE:
        break;
      default:
        return false;
    }
    const nfgenmsg* g = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh));
    if (family != 0 && g->nfgen_family != family) return true;
    // A chain dump counts the chains of every table of the family (below): a chain added or deleted
    // in any of them can shift it, and names this dump's table as far as it goes.
    if (kind == DumpKind::Chain && (type == NFT_MSG_NEWCHAIN || type == NFT_MSG_DELCHAIN)) return false;
    const nlattr* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
    const int left = static_cast<int>(reinterpret_cast<const char*>(nlh) + nlh->nlmsg_len - reinterpret_cast<const char*>(a));
    if (!mnl_attr_ok(a, left) || mnl_attr_get_type(a) != 1) return false;
    const char* name = static_cast<const char*>(mnl_attr_get_payload(a));
    return table != std::string(name, strnlen(name, mnl_attr_get_payload_len(a)));
  }

  // After an interrupted dump's end (watched, nothing spoiled yet): the generation now, then the
  // notifications up to its NEWGEN. Every commit between the dump's first and last datagram is one of
  // these, seen whole (they come after the request, changes before their NEWGEN; ENOBUFS if any was
  // dropped): none named the table, so every datagram saw the table as it is, and the dump is taken.
  // Gate held; may wait for a commit in progress to announce itself (SO_RCVTIMEO bounds it).
  void Confirm(NftSocket* sock) {
    const uint32_t gseq = sock->NextSeq(1);
    std::vector<uint8_t> req;
    EncodeRequest(&req, NFT_MSG_GETGEN, AF_UNSPEC, 0, gseq, {});
    if (sock->SendAll(via, req.data(), req.size()) < 0) Spoil();
    bool have = false;
    uint32_t now = 0;
    // (An element dump: no commit since its first datagram, none to wait for.)
    auto unmoved = [&] { return confirmElements && haveStartGen && static_cast<uint16_t>(now) == startGen; };
    while (Exact() && !(have && (unmoved() || (sawGen && static_cast<int32_t>(lastGen - now) >= 0)))) {
      uint32_t groups = 0;
      ssize_t n = sock->Recv(via, 0, &groups);
      if (n < 0) {
        Spoil();  // ENOBUFS (a notification dropped), or no answer in time
        break;
      }
      if (groups != 0) {
        Notice(sock->buffer().data(), n);
        continue;
      }
      const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(sock->buffer().data());
      int len = static_cast<int>(n);
      for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        if (nlh->nlmsg_seq != gseq) continue;
        if (nlh->nlmsg_type == NLMSG_ERROR) {
          if (static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh))->error != 0) Spoil();
          continue;
        }
        if (DecodeGeneration(nlh, &now)) have = true;
      }
    }
    if (Exact()) {
      interrupted = false;
      if (!confirmElements) sock->NoteTakenInterrupted();
    }
  }

  // Gate held, the dump over: an interrupted one confirmed or not, and the watch left.
  void Finish(NftSocket* sock) {
    if (NeedsConfirm()) Confirm(sock);
    if (watch) sock->Watch(via, false);
    watch = false;
  }

  // Builds and sends the request; false (with err set) on failure.
  bool Send(NftSocket* sock) {
    uint16_t type = 0;
    std::vector<std::pair<uint16_t, std::string>> attrs;
    switch (kind) {
      case DumpKind::Table:
        type = NFT_MSG_GETTABLE;
        if (single) attrs.push_back({NFTA_TABLE_NAME, table});
        break;
      case DumpKind::Chain:
        type = NFT_MSG_GETCHAIN;
        if (!table.empty()) attrs.push_back({NFTA_CHAIN_TABLE, table});
        if (single) attrs.push_back({NFTA_CHAIN_NAME, name});
        break;
      case DumpKind::Rule:
        type = NFT_MSG_GETRULE;
        // The kernel filters rule dumps by table and chain (nf_tables_dump_rules_start).
        if (!table.empty()) attrs.push_back({NFTA_RULE_TABLE, table});
        if (!name.empty()) attrs.push_back({NFTA_RULE_CHAIN, name});
        break;
      case DumpKind::Set:
        type = NFT_MSG_GETSET;
        if (!table.empty()) attrs.push_back({NFTA_SET_TABLE, table});
        if (single) attrs.push_back({NFTA_SET_NAME, name});
        break;
      case DumpKind::Object:
        type = NFT_MSG_GETOBJ;
        // The kernel filters object dumps by table (nf_tables_dump_obj).
        if (!table.empty()) attrs.push_back({NFTA_OBJ_TABLE, table});
        if (single) attrs.push_back({NFTA_OBJ_NAME, name});
        break;
      case DumpKind::Element:
        type = NFT_MSG_GETSETELEM;
        attrs.push_back({NFTA_SET_ELEM_LIST_TABLE, table});
        attrs.push_back({NFTA_SET_ELEM_LIST_SET, name});
        break;
    }
    // A chain dump ignores NFTA_CHAIN_TABLE in the kernel (checked on 6.18),
    // so it is filtered here, before decoding, and only this table's chains
    // are decoded.
    filterTable = kind == DumpKind::Chain && !single && !table.empty();
    seq = sock->NextSeq(1);
    std::vector<uint8_t> req;
    EncodeRequest(&req, type, family, single ? NLM_F_ACK : NLM_F_DUMP, seq, attrs);
    via = sock->DumpSocket();
    // The rules, sets or objects of one table: the kernel's walk counts that table's only
    // (nf_tables_dump_rules, _sets, _obj skip other tables before counting), so commits elsewhere
    // cannot shift it. The chains of one table: the kernel counts every table's of the family
    // (nf_tables_dump_chains), so only commits that add or delete no chain can be told apart (Notice).
    if ((kind == DumpKind::Rule || kind == DumpKind::Set || kind == DumpKind::Object || kind == DumpKind::Chain) && !single && !table.empty()) {
      watch = sock->Watch(via, true);
    }
    if (kind == DumpKind::Element) confirmElements = watch = sock->Watch(via, true);
    if (sock->SendAll(via, req.data(), req.size()) < 0) {
      Fail(errno, std::string("send: ") + std::strerror(errno));
      return false;
    }
    if (kPauseSeam && watch && (pauseAt = TestPauseAt()) == 0) TestPause(0);
    return true;
  }

  // Takes one datagram; sets `done` at NLMSG_DONE, the closing ack or an error. `groups`: a
  // notification (the watch).
  void Feed(const uint8_t* data, ssize_t n, uint32_t groups) {
    if (groups != 0) {
      Notice(data, n);
      return;
    }
    if (++received == pauseAt) TestPause(received);
    const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(data);
    int len = static_cast<int>(n);
    for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_seq != seq) continue;  // a straggler from an earlier request
      // The kernel flags a message, NLMSG_DONE included, when the ruleset's
      // generation differs from the one the previous chunk was built at
      // (nl_dump_check_consistent): what came before and after it are two
      // different rulesets. Unless the watch may still take it (Exact), nothing
      // more is kept; the worker ends the dump (NftSocket::EndDump) or, where it
      // cannot, reads the rest, so the next request starts on a clean socket.
      if (nlh->nlmsg_flags & NLM_F_DUMP_INTR) {
        interrupted = true;
        if (!Exact()) Spoil();
      }
      if (nlh->nlmsg_type == NLMSG_DONE) {
        done = true;
        // An element dump built in one datagram is one walk of the set at one generation; of more,
        // it is confirmed as an interrupted one is.
        if (confirmElements && dataDatagrams > 1) {
          interrupted = true;
          if (!Exact()) Spoil();
        }
        return;
      }
      if (nlh->nlmsg_type == NLMSG_ERROR) {
        const nlmsgerr* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
        if (e->error == 0) {
          done = true;  // the ack that ends a single GET
        } else {
          Fail(-e->error, std::strerror(-e->error));
        }
        return;
      }
      if ((interrupted && !Exact()) || (filterTable && !ChainInTable(nlh))) continue;
      if (confirmElements && lastDataDatagram != received) {
        lastDataDatagram = received;
        dataDatagrams++;
        if (!haveStartGen && HasNfgenmsg(nlh)) {
          startGen = ntohs(static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(nlh))->res_id);
          haveStartGen = true;
        }
      }
      if (kind == DumpKind::Rule && ruleMode == 2) {
        TakeDigest(nlh);
        continue;
      }
      // The last message of a datagram may lack its alignment padding: copy
      // no more than was received.
      const uint8_t* p = reinterpret_cast<const uint8_t*>(nlh);
      messages.insert(messages.end(), p, p + std::min<size_t>(MNL_ALIGN(nlh->nlmsg_len), static_cast<size_t>(len)));
    }
  }

  bool ChainInTable(const nlmsghdr* nlh) const {
    nlattr* attr;
    NFK_ATTR_FOR_EACH(attr, nlh, sizeof(nfgenmsg)) {
      if (mnl_attr_get_type(attr) == NFTA_CHAIN_TABLE) {
        // Bounded by the attribute: a name without its NUL is compared, not overrun.
        const char* name = static_cast<const char*>(mnl_attr_get_payload(attr));
        return table == std::string(name, strnlen(name, mnl_attr_get_payload_len(attr)));
      }
    }
    return false;
  }

  // A switch, not a table indexed by the kind: the table lacked objects, and an object dump's
  // error (an interrupted one) read past it and aborted the process (std::string from null).
  std::string Describe() const {
    switch (kind) {
      case DumpKind::Table: return "list tables";
      case DumpKind::Chain: return "list chains";
      case DumpKind::Rule: return "list rules";
      case DumpKind::Set: return "list sets";
      case DumpKind::Element: return "list set elements";
      case DumpKind::Object: return "list objects";
    }
    return "list";
  }

  // Decodes what came back and settles the promise. JS thread only.
  void Settle(Napi::Env env, Napi::Promise::Deferred& deferred) {
    const size_t bytes = messages.size() + digests.capacity();
    SettleDecoded(env, deferred);
    // A dump of many rules leaves tens of MB freed on the C heap (the messages, the JSON text);
    // give them back to the system rather than keep them for a dump that may never come.
    std::vector<uint8_t>().swap(messages);
    std::string().swap(digests);
    ReleaseFreedMemory(bytes);
  }

  void SettleDecoded(Napi::Env env, Napi::Promise::Deferred& deferred) {
    if (err != 0) {
      if (err == ENOENT && single) {
        deferred.Resolve(Napi::Array::New(env));  // asked for one object: there is none
      } else {
        deferred.Reject(MakeNetlinkError(env, Describe() + ": " + message, err, Describe()).Value());
      }
      return;
    }
    if (interrupted) {
      // Never a view of the ruleset: `dumpInterrupted` tells it apart from
      // any other EINTR, and the caller retries (src/netlink/socket.ts).
      Napi::Error e = MakeNetlinkError(env, Describe() + ": interrupted by a concurrent change (NLM_F_DUMP_INTR)",
                                       EINTR, Describe());
      e.Value().Set("dumpInterrupted", true);
      deferred.Reject(e.Value());
      return;
    }
    try {
      if (kind == DumpKind::Rule && ruleMode == 2) {
        if (digestError != nullptr) throw MakeNetlinkError(env, digestError, EBADMSG, "decode rule");
        if (digestOpen) digests.append("]]");
        digests.push_back(']');
        Napi::Object JSON = env.Global().Get("JSON").As<Napi::Object>();
        deferred.Resolve(JSON.Get("parse").As<Napi::Function>().Call(JSON, {Napi::String::New(env, digests)}));
        return;
      }
      if (kind == DumpKind::Rule) {
        // Rules as JSON text, parsed once by V8 (see decode_json.h).
        std::string json = "[";
        const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(messages.data());
        int len = static_cast<int>(messages.size());
        for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
          if (json.size() > 1) json.push_back(',');
          std::string error;
          if (!AppendRuleJson(nlh, &json, &error, ruleMode == 1)) throw MakeNetlinkError(env, error, EBADMSG, "decode rule");
        }
        json.push_back(']');
        Napi::Object JSON = env.Global().Get("JSON").As<Napi::Object>();
        deferred.Resolve(JSON.Get("parse").As<Napi::Function>().Call(JSON, {Napi::String::New(env, json)}));
        return;
      }
      if (kind == DumpKind::Element && !objects) {
        // Elements as JSON text too: 100,000 elements were seconds of napi property sets.
        std::string json = "[";
        bool first = true;
        const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(messages.data());
        int len = static_cast<int>(messages.size());
        for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
          if (!HasNfgenmsg(nlh)) {
            throw MakeNetlinkError(env, "cannot parse set element message: truncated", EBADMSG, "decode set element");
          }
          std::string error;
          if (!AppendSetElemsJson(nlh, &json, &first, &error)) throw MakeNetlinkError(env, error, EBADMSG, "decode set element");
        }
        json.push_back(']');
        Napi::Object JSON = env.Global().Get("JSON").As<Napi::Object>();
        deferred.Resolve(JSON.Get("parse").As<Napi::Function>().Call(JSON, {Napi::String::New(env, json)}));
        return;
      }
      Napi::Array out = Napi::Array::New(env);
      const nlmsghdr* nlh = reinterpret_cast<const nlmsghdr*>(messages.data());
      int len = static_cast<int>(messages.size());
      uint32_t i = 0;
      for (; MessageOk(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        switch (kind) {
          case DumpKind::Table: out.Set(i++, DecodeTable(env, nlh)); break;
          case DumpKind::Chain: out.Set(i++, DecodeChain(env, nlh)); break;
          case DumpKind::Rule: break;  // decoded above
          case DumpKind::Set: out.Set(i++, DecodeSet(env, nlh)); break;
          case DumpKind::Element: DecodeSetElems(env, nlh, out); break;
          case DumpKind::Object: out.Set(i++, DecodeObject(env, nlh)); break;
        }
      }
      deferred.Resolve(out);
    } catch (const Napi::Error& e) {
      deferred.Reject(e.Value());
    }
  }
};

class DumpWorker : public Napi::AsyncWorker {
 public:
  // Queued holding the gate (NftSocket::QueueGated); with `sent` the request is already on the
  // wire (started inline).
  DumpWorker(Napi::Env env, NftSocket* sock, Napi::Object self, std::unique_ptr<DumpState> state,
             Napi::Promise::Deferred deferred, bool sent)
      : Napi::AsyncWorker(env, "nfkeeper.dump"),
        deferred_(deferred),
        sock_(sock),
        self_(Napi::Persistent(self)),
        state_(std::move(state)),
        sent_(sent) {}

  void Execute() override {
    if (!sent_) {
      if (sock_->closed()) {
        state_->Fail(EBADF, "socket is closed");
      } else {
        state_->Send(sock_);
      }
    }
    while (!state_->done) {
      // The kernel walks a long chain again for each datagram: the rest of an interrupted dump
      // of one was seconds of reading, with the socket held and a repair waiting behind it.
      if (state_->interrupted && !state_->Exact() && sock_->EndDump(state_->via)) {
        state_->done = true;
        state_->watch = false;  // the socket is gone, or a new one
        break;
      }
      uint32_t groups = 0;
      ssize_t n = sock_->Recv(state_->via, 0, &groups);
      if (n < 0 && errno == ENOBUFS && state_->watch) {
        state_->Spoil();  // a notification dropped: the rest of the dump still comes
        continue;
      }
      if (n < 0) {
        state_->Fail(errno, std::string("recv: ") + std::strerror(errno));
        break;
      }
      state_->Feed(sock_->buffer().data(), n, groups);
    }
    if (!sock_->closed()) state_->Finish(sock_);
    sock_->gate().unlock();
  }

  void OnOK() override {
    sock_->StartWaiting();
    state_->Settle(Env(), deferred_);
  }
  void OnError(const Napi::Error& e) override {
    sock_->StartWaiting();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  NftSocket* sock_;
  Napi::ObjectReference self_;  // keeps the socket alive while we use it
  std::unique_ptr<DumpState> state_;
  bool sent_;
};

}  // namespace

Napi::Promise StartDump(Napi::Env env, NftSocket* sock, Napi::Object self, const DumpRequest& req) {
  auto st = std::make_unique<DumpState>(req);
  Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);

  // Inline fast path, only for requests the kernel answers from one object:
  // a single GET, or the rules, sets or stateful objects of one table (the
  // kernel filters by table), and only when the socket is free right now. A
  // big answer is finished by a worker after kInlineDatagrams. (A check of a
  // small table so starts no libuv worker: its objects' dump went first, to a
  // worker, and the requests queued behind it followed it there.)
  bool small = st->single || ((st->kind == DumpKind::Rule || st->kind == DumpKind::Set || st->kind == DumpKind::Object) && !st->table.empty());
  bool inlineStarted = false;
  if (small && sock->TryTakeGate()) {
    inlineStarted = true;
    if (st->Send(sock)) {
      for (int i = 0; i < kInlineDatagrams && !st->done; i++) {
        uint32_t groups = 0;
        ssize_t n = sock->Recv(st->via, MSG_DONTWAIT, &groups);
        if (n < 0 && errno == ENOBUFS && st->watch) {
          st->Spoil();
          continue;
        }
        if (n < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK) st->Fail(errno, std::string("recv: ") + std::strerror(errno));
          break;
        }
        st->Feed(sock->buffer().data(), n, groups);
      }
    }
    // An interrupted dump to confirm waits for notifications: a worker does it.
    if (st->done && !st->NeedsConfirm()) {
      st->Finish(sock);
      sock->ReleaseGate();
      st->Settle(env, deferred);
      return deferred.Promise();
    }
    // Still going: a worker finishes it, with the gate still held.
  }
  auto* w = new DumpWorker(env, sock, self, std::move(st), deferred, inlineStarted);
  if (inlineStarted) w->Queue();  // the gate is still held for it
  else sock->QueueGated(w);
  return deferred.Promise();
}

}  // namespace nfk
