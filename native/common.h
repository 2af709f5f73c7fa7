// Shared plumbing for the addon: per-environment state, hex conversion and
// errors. Errors are created from the JS class that src/base/errors.ts hands to
// the addon at init (better-sqlite3's pattern), so C++ never invents its own
// error shapes.
#pragma once

#include <napi.h>
#include <linux/netlink.h>

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

// mnl_attr_for_each() assigns a void*, which C++ refuses; the same loop, typed.
#define NFK_ATTR_FOR_EACH(attr, nlh, offset)                                                   \
  for ((attr) = static_cast<nlattr*>(mnl_nlmsg_get_payload_offset((nlh), (offset)));            \
       mnl_attr_ok((attr), static_cast<int>(static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh)) - \
                                            reinterpret_cast<const char*>(attr)));               \
       (attr) = mnl_attr_next(attr))

// mnl_attr_for_each_nested(), typed the same way.
#define NFK_NESTED_FOR_EACH(attr, nest)                                                          \
  for ((attr) = static_cast<const nlattr*>(mnl_attr_get_payload(nest));                          \
       mnl_attr_ok((attr), static_cast<int>(static_cast<const char*>(mnl_attr_get_payload(nest)) + \
                                            mnl_attr_get_payload_len(nest) -                     \
                                            reinterpret_cast<const char*>(attr)));               \
       (attr) = mnl_attr_next(attr))

namespace nfk {

// mnl_nlmsg_ok() compares (int)nlmsg_len with the bytes left, so a length of
// 2^31 or more turns negative and passes, and the walk reads far past the
// buffer (found by native/fuzz). This check does not.
inline bool MessageOk(const nlmsghdr* nlh, int len) {
  return len >= static_cast<int>(sizeof(nlmsghdr)) && nlh->nlmsg_len >= sizeof(nlmsghdr) &&
         nlh->nlmsg_len <= static_cast<uint32_t>(len);
}

class Closeable {
 public:
  virtual ~Closeable() = default;
  virtual void CloseNow() = 0;
};

// Per-environment data: the error class and every live native handle, so the
// environment's cleanup hook can close them (worker threads, process exit).
struct AddonData {
  Napi::FunctionReference netlinkError;
  Napi::FunctionReference socketCtor;
  Napi::FunctionReference monitorCtor;
  std::set<Closeable*> live;
};

AddonData* GetAddonData(Napi::Env env);

// Property keys as JS strings, made once per batch encode. napi's
// named-property calls create and internalize a V8 string on every access:
// for a 10,000-rule batch that was most of its encoding time. While a Keys
// is alive (on the stack of a JS-thread call with no inner handle scopes, so
// the cached handles stay valid) encode.cc's Prop uses it; otherwise it
// falls back to plain named-property calls.
class Keys {
 public:
  explicit Keys(Napi::Env env) : env_(env), prev_(current) { current = this; }
  ~Keys() { current = prev_; }
  Keys(const Keys&) = delete;
  Keys& operator=(const Keys&) = delete;
  // `key` is a string literal or a static table entry: its address identifies it.
  napi_value Of(const char* key) {
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    napi_value v;
    NAPI_THROW_IF_FAILED(env_, napi_create_string_utf8(env_, key, NAPI_AUTO_LENGTH, &v), nullptr);
    map_.emplace(key, v);
    return v;
  }
  static thread_local Keys* current;

 private:
  napi_env env_;
  Keys* prev_;  // nested use, e.g. a getter on an op that runs JS which commits again
  std::unordered_map<const char*, napi_value> map_;
};


// After an operation that allocated and freed `bytes` on the C heap (a big dump or batch): from
// 1 MiB on, return the freed memory to the system (malloc_trim), which glibc would otherwise keep
// in its arenas for the life of the daemon.
void ReleaseFreedMemory(size_t bytes);

// trimMemory(): the same for the JS side, after V8 shrank its heap (src/run.ts): the garbage
// collector's worker threads leave freed worklists in their own arenas.
Napi::Value TrimMemory(const Napi::CallbackInfo& info);

// A failure as a JS NetlinkError(message, errno, operation, opIndex).
Napi::Error MakeNetlinkError(Napi::Env env, const std::string& message, int err,
                             const std::string& operation, int opIndex = -1);

std::string ToHex(const void* data, size_t len);
// Throws a TypeError naming `what` when `hex` is not an even-length hex string.
std::vector<uint8_t> FromHex(Napi::Env env, const std::string& hex, const std::string& what);

// Typed checks of a value already read from property `key`: TypeError (or
// RangeError for u32) naming the key. The encoder reads each field once and
// checks it with these; option objects use the getters below.
bool Present(const Napi::Value& v);  // neither undefined nor null
std::string StringOf(const Napi::Value& v, const char* key);
int64_t I64Of(const Napi::Value& v, const char* key);
uint32_t U32Of(const Napi::Value& v, const char* key);

// Small typed getters for option objects; they throw TypeErrors naming the key.
bool Has(const Napi::Object& o, const char* key);
std::string GetString(const Napi::Object& o, const char* key);
uint32_t GetU32(const Napi::Object& o, const char* key);
int64_t GetI64(const Napi::Object& o, const char* key);

}  // namespace nfk
