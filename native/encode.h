// IR operations to one netfilter batch (BATCH_BEGIN ... BATCH_END). Runs on
// the JS thread; the bytes then go to the kernel from a worker thread.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nfk {

struct EncodedBatch {
  std::vector<uint8_t> bytes;
  uint32_t beginSeq = 0;
  // opIndex of each message after BATCH_BEGIN, by (seq - beginSeq - 1).
  std::vector<int32_t> messageOp;
  // Asked for (EncodeBatch's `digests`): per op index, the RuleDigest of the rule it adds, inserts
  // or replaces, from the bytes it is sent as; '' for other ops and rules without one.
  bool wantDigests = false;
  std::vector<std::string> digests;
  // With digests, per op index, for a rule that has no digest because it looks up anonymous sets:
  // its RuleDigest with those sets unnamed (digest.h), which its echo is compared with; '' else.
  std::vector<std::string> unnamed;
  // With digests, until DigestEncodedRules: (op index, offset in `bytes`) of each rule message to digest.
  std::vector<std::pair<uint32_t, size_t>> toDigest;
  // Asked for (EncodeBatch's `keepExprs`): each rule op's NFTA_RULE_EXPRESSIONS attribute as sent,
  // for the caller to keep (the compile cache's store after the start-up's install): per op index,
  // where it lies in `bytes`, from exprsAt[2i] to exprsAt[2i + 1] (equal: none). Once the commit
  // is done, `bytes` is handed to the caller with them (CommitRun::Outcome), not copied.
  bool wantExprs = false;
  std::vector<uint32_t> exprsAt;
  // A table op with NFT_TABLE_F_OWNER: the socket that sends it may own a table (NftSocket::MayOwn).
  bool claimsTable = false;
};

// Encodes `ops` (the Op type in src/netlink/batch.ts, checked by
// src/netlink/validate.ts) with sequence numbers from `seq` on. With `hasGeneration` the BATCH_BEGIN carries
// NFNL_BATCH_GENID so the kernel refuses the batch if the ruleset moved on.
// Throws a NetlinkError (EINVAL) naming the op index on malformed input.
// `exprBytes`, when an array, holds per op index either a Buffer from EncodeExpressions (that
// op's exprs, encoded before) or nothing (encode them now). With `digests`, the rules to digest
// are noted (EncodedBatch::toDigest) for DigestEncodedRules.
// `hints`, when a Uint32Array of at least one word per op (src/netlink/socket.ts, encodeHints),
// says what need not be read through N-API. An op's word: kHintPlain, that it is a rule op with
// no field but its verb, object, family, table, chain, expressions and userdata; kHintSamePlace,
// that it is moreover a rule added at the end of the same chain of the same table and family as
// the rule op before it (taken only where the op before was encoded as a rule op in this call);
// the other bits, where in the array its expressions' ids start (less than the op count: none). An id names one expression object of the batch (0: none); an expression whose
// id was encoded before in the call is copied, not read. The bytes are the same with or without hints.
// With `keepExprs`, where each rule's expressions attribute lies is noted (EncodedBatch::exprsAt).
constexpr uint32_t kHintSamePlace = 1u << 31;
constexpr uint32_t kHintPlain = 1u << 30;
void EncodeBatch(Napi::Env env, Napi::Array ops, uint32_t seq, bool hasGeneration,
                 uint32_t generation, EncodedBatch* out, Napi::Value exprBytes = Napi::Value(),
                 bool digests = false, Napi::Value hints = Napi::Value(), bool keepExprs = false);

// Fills out->digests (and unnamed) for the rules EncodeBatch noted, from the bytes encoded for
// them. It reads only the rules' attributes, never a message header: it may run on the JS thread
// while a worker sends the batch (which writes the headers' sequence numbers and flags).
void DigestEncodedRules(EncodedBatch* out);

// encodeExprs(exprs) -> Buffer: a rule's NFTA_RULE_EXPRESSIONS attribute, byte for byte what a
// commit would put in the rule's message; a commit can be handed it instead of the expressions.
Napi::Value EncodeExpressions(const Napi::CallbackInfo& info);

// ruleDigests(exprs, rules, userdata) -> string[]: each rule's digest (RuleDigest) computed from
// the bytes a commit would write for it, each distinct expression encoded once; '' where there is none.
Napi::Value DigestRules(const Napi::CallbackInfo& info);

// A single request message (for dumps and GETGEN), appended to `out`.
// `attrs` are (type, string) pairs put as NUL-terminated string attributes.
void EncodeRequest(std::vector<uint8_t>* out, uint16_t msgType, uint16_t family,
                   uint16_t flags, uint32_t seq,
                   const std::vector<std::pair<uint16_t, std::string>>& attrs);

}  // namespace nfk
