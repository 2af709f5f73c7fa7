// Kernel messages (one nlmsghdr each) to IR objects. Runs on the JS thread:
// dumps gather raw messages off-thread and decode here.
#pragma once

#include <napi.h>
#include <linux/netlink.h>

#include <cstdint>
#include <string>

namespace nfk {

Napi::Value FamilyValue(Napi::Env env, uint32_t family);

Napi::Object DecodeTable(Napi::Env env, const nlmsghdr* nlh);
Napi::Object DecodeChain(Napi::Env env, const nlmsghdr* nlh);
// Rules are decoded to JSON text only (decode_json.h AppendRuleJson).
Napi::Object DecodeSet(Napi::Env env, const nlmsghdr* nlh);
// Appends the elements of one NEWSETELEM message to `out`.
void DecodeSetElems(Napi::Env env, const nlmsghdr* nlh, Napi::Array out);
// NFTA_GEN_ID of a NEWGEN message; false if absent. `pid` and `comm`, when given: the committing
// task (NFTA_GEN_PROC_PID, NFTA_GEN_PROC_NAME), 0 and "" when the kernel did not say.
bool DecodeGeneration(const nlmsghdr* nlh, uint32_t* id, uint32_t* pid = nullptr, std::string* comm = nullptr);

}  // namespace nfk
