// A stand-in for the part of Node-API the decoders use, so the fuzz harness
// can run the addon's real decode.cc without Node. Values are plain C++
// objects (strings are copied, so every read of the input really happens),
// kept in an arena that nfk_shim_reset() frees.
#pragma once

#include <node_api.h>

extern "C" {
napi_env nfk_shim_env();
void nfk_shim_reset();
}
