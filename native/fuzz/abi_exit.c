// libnftnl 1.2.4 calls exit(EXIT_FAILURE) ("nf_tables kernel ABI is broken,
// contact your vendor") when an attribute inside a message fails its type
// check. For the fuzzer that is a finding to count, not the end of the run:
// while the harness is decoding, exit() becomes a C++ exception that unwinds
// back to the harness (libnftnl is built with unwind tables). Any other exit()
// is the real one. Compiled with -fexceptions.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

extern int nfk_fuzz_decoding;
void nfk_fuzz_abi_exit(int status);

void exit(int status) {
  if (nfk_fuzz_decoding) nfk_fuzz_abi_exit(status);
  void (*real)(int) = (void (*)(int))dlsym(RTLD_NEXT, "exit");
  real(status);
  __builtin_unreachable();
}
