#include "napi_shim.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

struct napi_env__ {};

struct napi_value__ {
  napi_valuetype type = napi_undefined;
  bool isArray = false;
  double number = 0;
  bool boolean = false;
  std::string string;
  std::vector<std::pair<std::string, napi_value>> props;
  std::vector<napi_value> elems;
};

struct napi_ref__ {
  napi_value value;
};

namespace {

napi_env__ theEnv;
std::vector<std::unique_ptr<napi_value__>> arena;

napi_value Make(napi_valuetype type) {
  arena.push_back(std::make_unique<napi_value__>());
  arena.back()->type = type;
  return arena.back().get();
}

napi_value* FindProp(napi_value obj, const std::string& key) {
  for (auto& p : obj->props) if (p.first == key) return &p.second;
  return nullptr;
}

napi_status MakeError(napi_value msg, napi_value* result) {
  napi_value e = Make(napi_object);
  e->props.push_back({"message", msg});
  *result = e;
  return napi_ok;
}

}  // namespace

extern "C" {

napi_env nfk_shim_env() { return &theEnv; }
void nfk_shim_reset() { arena.clear(); }

napi_status napi_create_object(napi_env, napi_value* result) {
  *result = Make(napi_object);
  return napi_ok;
}

napi_status napi_create_array(napi_env, napi_value* result) {
  *result = Make(napi_object);
  (*result)->isArray = true;
  return napi_ok;
}

napi_status napi_create_array_with_length(napi_env env, size_t length, napi_value* result) {
  napi_create_array(env, result);
  (*result)->elems.resize(length, nullptr);
  return napi_ok;
}

napi_status napi_get_array_length(napi_env, napi_value value, uint32_t* result) {
  if (!value->isArray) return napi_array_expected;
  *result = static_cast<uint32_t>(value->elems.size());
  return napi_ok;
}

napi_status napi_set_element(napi_env, napi_value object, uint32_t index, napi_value value) {
  if (object->elems.size() <= index) object->elems.resize(index + 1, nullptr);
  object->elems[index] = value;
  return napi_ok;
}

// (linked with object.cc, whose encoder reads arrays; the decoders do not)
napi_status napi_is_array(napi_env, napi_value value, bool* result) {
  *result = value->isArray;
  return napi_ok;
}

napi_status napi_get_element(napi_env, napi_value object, uint32_t index, napi_value* result) {
  if (index >= object->elems.size() || object->elems[index] == nullptr) return napi_generic_failure;
  *result = object->elems[index];
  return napi_ok;
}

napi_status napi_create_double(napi_env, double value, napi_value* result) {
  *result = Make(napi_number);
  (*result)->number = value;
  return napi_ok;
}

napi_status napi_get_boolean(napi_env, bool value, napi_value* result) {
  *result = Make(napi_boolean);
  (*result)->boolean = value;
  return napi_ok;
}

napi_status napi_create_string_utf8(napi_env, const char* str, size_t length, napi_value* result) {
  *result = Make(napi_string);
  (*result)->string = length == NAPI_AUTO_LENGTH ? std::string(str) : std::string(str, length);
  return napi_ok;
}

napi_status napi_get_value_string_utf8(napi_env, napi_value value, char* buf, size_t bufsize, size_t* result) {
  if (value->type != napi_string) return napi_string_expected;
  const std::string& s = value->string;
  if (buf == nullptr) {
    *result = s.size();
    return napi_ok;
  }
  size_t n = bufsize == 0 ? 0 : std::min(s.size(), bufsize - 1);
  std::memcpy(buf, s.data(), n);
  if (bufsize > 0) buf[n] = 0;
  if (result != nullptr) *result = n;
  return napi_ok;
}

napi_status napi_get_value_int64(napi_env, napi_value value, int64_t* result) {
  if (value->type != napi_number) return napi_number_expected;
  *result = static_cast<int64_t>(value->number);
  return napi_ok;
}

napi_status napi_typeof(napi_env, napi_value value, napi_valuetype* result) {
  *result = value == nullptr ? napi_undefined : value->type;
  return napi_ok;
}

napi_status napi_set_named_property(napi_env, napi_value object, const char* name, napi_value value) {
  if (napi_value* slot = FindProp(object, name)) *slot = value;
  else object->props.push_back({name, value});
  return napi_ok;
}

// The global object holds JSON.parse, which the decoders call on the JSON text they build (a set's
// and an element's expressions); the shim parses nothing and hands the text back, which the
// decoder's own reads of the input have produced by then.
napi_status napi_get_global(napi_env, napi_value* result) {
  napi_value parse = Make(napi_function);
  napi_value json = Make(napi_object);
  json->props.push_back({"parse", parse});
  napi_value global = Make(napi_object);
  global->props.push_back({"JSON", json});
  *result = global;
  return napi_ok;
}

napi_status napi_call_function(napi_env, napi_value, napi_value func, size_t argc, const napi_value* argv, napi_value* result) {
  if (func == nullptr || func->type != napi_function || argc < 1) return napi_invalid_arg;
  *result = argv[0];
  return napi_ok;
}

napi_status napi_get_named_property(napi_env, napi_value object, const char* name, napi_value* result) {
  napi_value* slot = FindProp(object, name);
  *result = slot != nullptr ? *slot : Make(napi_undefined);
  return napi_ok;
}

napi_status napi_has_named_property(napi_env, napi_value object, const char* name, bool* result) {
  *result = FindProp(object, name) != nullptr;
  return napi_ok;
}

napi_status napi_define_properties(napi_env, napi_value object, size_t count, const napi_property_descriptor* props) {
  for (size_t i = 0; i < count; i++) {
    if (props[i].utf8name != nullptr && props[i].value != nullptr) {
      object->props.push_back({props[i].utf8name, props[i].value});
    }
  }
  return napi_ok;
}

napi_status napi_create_error(napi_env, napi_value, napi_value msg, napi_value* result) {
  return MakeError(msg, result);
}
napi_status napi_create_type_error(napi_env, napi_value, napi_value msg, napi_value* result) {
  return MakeError(msg, result);
}
napi_status napi_create_range_error(napi_env, napi_value, napi_value msg, napi_value* result) {
  return MakeError(msg, result);
}

napi_status napi_create_reference(napi_env, napi_value value, uint32_t, napi_ref* result) {
  *result = new napi_ref__{value};
  return napi_ok;
}

napi_status napi_delete_reference(napi_env, napi_ref ref) {
  delete ref;
  return napi_ok;
}

napi_status napi_get_reference_value(napi_env, napi_ref ref, napi_value* result) {
  *result = ref->value;
  return napi_ok;
}

napi_status napi_get_instance_data(napi_env, void** data) {
  *data = nullptr;  // no NetlinkError class: MakeNetlinkError falls back to Error
  return napi_ok;
}

napi_status napi_new_instance(napi_env, napi_value, size_t, const napi_value*, napi_value*) {
  return napi_generic_failure;
}

napi_status napi_get_last_error_info(napi_env, const napi_extended_error_info** result) {
  static napi_extended_error_info info = {"napi shim", nullptr, 0, napi_generic_failure};
  *result = &info;
  return napi_ok;
}

napi_status napi_is_exception_pending(napi_env, bool* result) {
  *result = false;
  return napi_ok;
}

napi_status napi_get_and_clear_last_exception(napi_env, napi_value* result) {
  *result = Make(napi_undefined);
  return napi_ok;
}

napi_status napi_open_escapable_handle_scope(napi_env, napi_escapable_handle_scope* result) {
  *result = reinterpret_cast<napi_escapable_handle_scope>(&theEnv);
  return napi_ok;
}

napi_status napi_close_escapable_handle_scope(napi_env, napi_escapable_handle_scope) { return napi_ok; }

napi_status napi_escape_handle(napi_env, napi_escapable_handle_scope, napi_value escapee, napi_value* result) {
  *result = escapee;
  return napi_ok;
}

void napi_fatal_error(const char* location, size_t, const char* message, size_t) {
  std::fprintf(stderr, "napi_fatal_error: %s %s\n", location ? location : "", message ? message : "");
  std::abort();
}

}  // extern "C"
