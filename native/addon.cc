// Module entry: registers the native classes and the environment cleanup
// hook that closes every live socket and monitor (worker exit, process exit).
#include <napi.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common.h"
#include "encode.h"
#include "monitor.h"
#include "socket.h"

namespace nfk {

Napi::Value SdNotify(const Napi::CallbackInfo& info);
Napi::Value PeerCred(const Napi::CallbackInfo& info);
Napi::Value ListLinks(const Napi::CallbackInfo& info);
Napi::Value BindAbstract(const Napi::CallbackInfo& info);
Napi::Value AbstractPeerPid(const Napi::CallbackInfo& info);
Napi::Value FlockExclusive(const Napi::CallbackInfo& info);

namespace {

// init(NetlinkError): the JS error class every native failure is made from.
Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  if (!info[0].IsFunction()) throw Napi::TypeError::New(info.Env(), "init needs the NetlinkError class");
  GetAddonData(info.Env())->netlinkError = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

void Cleanup(void* arg) {
  AddonData* data = static_cast<AddonData*>(arg);
  // CloseNow() leaves the object registered; copy first since destructors erase.
  std::vector<Closeable*> live(data->live.begin(), data->live.end());
  for (Closeable* c : live) c->CloseNow();
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
#ifdef __GLIBC__
  // Blocks of 128 KiB and more straight from mmap, given back when freed. glibc's default raises
  // that threshold to the size of each mmapped block freed (up to 32 MiB), after which a big
  // dump's or batch's buffers, and V8's, come from the arenas and stay there, freed, until a
  // malloc_trim: much of a big start-up's peak (bench/rss.ts shows it).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);
  napi_add_env_cleanup_hook(env, Cleanup, data);
  Napi::Function socket = NftSocket::Init(env);
  Napi::Function monitor = NftMonitor::Init(env);
  data->socketCtor = Napi::Persistent(socket);
  data->monitorCtor = Napi::Persistent(monitor);
  exports.Set("NftSocket", socket);
  exports.Set("NftMonitor", monitor);
  exports.Set("init", Napi::Function::New(env, SetErrorClass));
  exports.Set("sdNotify", Napi::Function::New(env, SdNotify));
  exports.Set("peerCred", Napi::Function::New(env, PeerCred));
  exports.Set("links", Napi::Function::New(env, ListLinks));
  exports.Set("bindAbstract", Napi::Function::New(env, BindAbstract));
  exports.Set("abstractPeerPid", Napi::Function::New(env, AbstractPeerPid));
  exports.Set("flockExclusive", Napi::Function::New(env, FlockExclusive));
  exports.Set("encodeExprs", Napi::Function::New(env, EncodeExpressions));
  exports.Set("ruleDigests", Napi::Function::New(env, DigestRules));
  exports.Set("trimMemory", Napi::Function::New(env, TrimMemory));
  return exports;
}

}  // namespace nfk

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return nfk::Init(env, exports); }

NODE_API_MODULE(nfkeeper, InitModule)
