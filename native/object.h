// Named stateful objects (NFT_MSG_NEWOBJ / DELOBJ / GETOBJ): counter, quota, limit, ct helper,
// ct expectation, synproxy and secmark, encoded and decoded through one field table.
#pragma once

#include <napi.h>
#include <linux/netlink.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nfk {

// Appends the NEWOBJ (add, create) or DELOBJ (delete) message of `op` (an ObjOp of
// src/netlink/batch.ts), built in the scratch buffer `buf`, to `out`.
void EncodeObject(std::vector<uint8_t>* out, char* buf, const std::string& verb, const Napi::Object& op,
                  uint16_t family, uint32_t seq);

// One NEWOBJ message (a GETOBJ dump's) to an NftObj.
Napi::Object DecodeObject(Napi::Env env, const nlmsghdr* nlh);

}  // namespace nfk
