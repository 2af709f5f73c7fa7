// libnftnl 1.2.4 calls exit(EXIT_FAILURE) ("nf_tables kernel ABI is broken,
// contact your vendor") when an attribute fails its type check. In nfkeeper
// that would end the process, so the decoders refuse such a message before
// libnftnl sees it (attr.h CheckRule and the rest). The harness checks that:
// before the decoders see a message, nfk_fuzz_libnftnl_exits() parses it with
// libnftnl under setjmp(), where an exit() jumps back and its objects are
// abandoned (lsan.supp names this function; unwinding through libnftnl's
// half-built objects by an exception once crashed freeing a half-parsed set),
// and the harness aborts if the addon's checks passed a message libnftnl
// exits on. An exit() while the decoders run (nfk_fuzz_decoding) aborts too.
// Any other exit() is the real one (libFuzzer's own).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libnftnl/chain.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <linux/netlink.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf* probing;
int nfk_fuzz_decoding;

void exit(int status) {
  if (probing != NULL) longjmp(*probing, 1);
  if (nfk_fuzz_decoding) {
    fprintf(stderr, "exit(%d) while the decoders ran: libnftnl was handed a message it exits on\n", status);
    abort();
  }
  void (*real)(int) = (void (*)(int))dlsym(RTLD_NEXT, "exit");
  real(status);
  __builtin_unreachable();
}

// kinds: bit 0 rule, 1 chain, 2 set, 4 object (bit 3, set elements, is not
// probed: the addon reads elements itself). Returns the kinds whose libnftnl
// parse called exit().
int nfk_fuzz_libnftnl_exits(const struct nlmsghdr* nlh, int kinds) {
  volatile int exits = 0;
  for (volatile int k = 0; k < 5; k++) {
    if (!(kinds & (1 << k))) continue;
    jmp_buf here;
    if (setjmp(here) != 0) {
      probing = NULL;
      exits |= 1 << k;
      continue;
    }
    probing = &here;
    if (k == 0) {
      struct nftnl_rule* r = nftnl_rule_alloc();
      nftnl_rule_nlmsg_parse(nlh, r);
      nftnl_rule_free(r);
    } else if (k == 1) {
      struct nftnl_chain* c = nftnl_chain_alloc();
      nftnl_chain_nlmsg_parse(nlh, c);
      nftnl_chain_free(c);
    } else if (k == 2) {
      struct nftnl_set* s = nftnl_set_alloc();
      nftnl_set_nlmsg_parse(nlh, s);
      nftnl_set_free(s);
    } else if (k == 4) {
      struct nftnl_obj* o = nftnl_obj_alloc();
      nftnl_obj_nlmsg_parse(nlh, o);
      nftnl_obj_free(o);
    }
    probing = NULL;
  }
  return exits;
}
