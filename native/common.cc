#include "common.h"

#include <malloc.h>

namespace nfk {

thread_local Keys* Keys::current = nullptr;

AddonData* GetAddonData(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

Napi::Error MakeNetlinkError(Napi::Env env, const std::string& message, int err,
                             const std::string& operation, int opIndex) {
  AddonData* data = GetAddonData(env);
  if (data == nullptr || data->netlinkError.IsEmpty()) {
    return Napi::Error::New(env, message);
  }
  Napi::Object e = data->netlinkError.New({
      Napi::String::New(env, message),
      Napi::Number::New(env, err),
      Napi::String::New(env, operation),
      Napi::Number::New(env, opIndex),
  });
  return Napi::Error(env, e);
}

std::string ToHex(const void* data, size_t len) {
  static const char digits[] = "0123456789abcdef";
  const uint8_t* p = static_cast<const uint8_t*>(data);
  std::string out(len * 2, '0');
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 0xf];
  }
  return out;
}

static int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::vector<uint8_t> FromHex(Napi::Env env, const std::string& hex, const std::string& what) {
  if (hex.size() % 2 != 0) {
    throw Napi::TypeError::New(env, what + ": hex string has odd length");
  }
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); i++) {
    int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) throw Napi::TypeError::New(env, what + ": not a hex string");
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

bool Present(const Napi::Value& v) { return !v.IsUndefined() && !v.IsNull(); }

std::string StringOf(const Napi::Value& v, const char* key) {
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), std::string("'") + key + "' must be a string");
  return v.As<Napi::String>().Utf8Value();
}

int64_t I64Of(const Napi::Value& v, const char* key) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string("'") + key + "' must be a number");
  return v.As<Napi::Number>().Int64Value();
}

uint32_t U32Of(const Napi::Value& v, const char* key) {
  int64_t n = I64Of(v, key);
  if (n < 0 || n > 0xffffffffLL) {
    throw Napi::RangeError::New(v.Env(), std::string("'") + key + "' is out of u32 range");
  }
  return static_cast<uint32_t>(n);
}

bool Has(const Napi::Object& o, const char* key) { return o.Has(key) && Present(o.Get(key)); }
std::string GetString(const Napi::Object& o, const char* key) { return StringOf(o.Get(key), key); }
int64_t GetI64(const Napi::Object& o, const char* key) { return I64Of(o.Get(key), key); }
uint32_t GetU32(const Napi::Object& o, const char* key) { return U32Of(o.Get(key), key); }

void ReleaseFreedMemory(size_t bytes) {
  if (bytes >= (1u << 20)) malloc_trim(0);
}

// trimMemory(): malloc_trim(0) now; true if memory went back to the system.
Napi::Value TrimMemory(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), malloc_trim(0) != 0);
}

}  // namespace nfk
