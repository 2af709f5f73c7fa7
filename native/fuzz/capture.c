// Captures real nf_tables netlink traffic as seed inputs for fuzz_decode:
// every recv() buffer of a dump of tables, chains, rules, sets and set
// elements, or of the event multicast group, one file each. Run it inside a
// network namespace (scripts/fuzz-seeds.sh does).
//   capture dump DIR
//   capture monitor DIR MILLISECONDS
#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char buf[1 << 20];
static int files;

static void save(const char* dir, const char* kind, const void* data, size_t len) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s-%03d", dir, kind, files++);
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, len, f) != len) {
    perror(path);
    exit(1);
  }
  fclose(f);
}

struct sets {
  int n;
  struct nftnl_set* s[256];
};

static int collect_set(const struct nlmsghdr* nlh, void* data) {
  struct sets* out = data;
  struct nftnl_set* s = nftnl_set_alloc();
  if (nftnl_set_nlmsg_parse(nlh, s) < 0 || out->n == 256) {
    nftnl_set_free(s);
    return MNL_CB_OK;
  }
  out->s[out->n++] = s;
  return MNL_CB_OK;
}

static void dump(struct mnl_socket* nl, const char* dir, const char* kind, uint16_t type,
                 struct nftnl_set* set, struct sets* sets) {
  static uint32_t seq = 1;
  struct nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | type;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  nlh->nlmsg_seq = ++seq;
  struct nfgenmsg* nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
  nfg->nfgen_family = set ? nftnl_set_get_u32(set, NFTNL_SET_FAMILY) : NFPROTO_UNSPEC;
  nfg->version = NFNETLINK_V0;
  if (set) nftnl_set_elems_nlmsg_build_payload(nlh, set);
  if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
    perror("send");
    exit(1);
  }
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    if (n <= 0) break;
    const struct nlmsghdr* h = (const struct nlmsghdr*)buf;
    if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) break;
    save(dir, kind, buf, n);
    if (sets) mnl_cb_run(buf, n, 0, 0, collect_set, sets);
    if (mnl_cb_run(buf, n, 0, 0, NULL, NULL) <= MNL_CB_STOP) break;
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: capture dump DIR | capture monitor DIR MS\n");
    return 2;
  }
  int monitor = strcmp(argv[1], "monitor") == 0;
  struct mnl_socket* nl = mnl_socket_open(NETLINK_NETFILTER);
  if (nl == NULL || mnl_socket_bind(nl, monitor ? 1u << (NFNLGRP_NFTABLES - 1) : 0, MNL_SOCKET_AUTOPID) < 0) {
    perror("netlink");
    return 1;
  }
  if (monitor) {
    printf("ready\n");
    fflush(stdout);
    int ms = argc > 3 ? atoi(argv[3]) : 1000;
    struct pollfd p = {mnl_socket_get_fd(nl), POLLIN, 0};
    while (poll(&p, 1, ms) > 0) {
      ssize_t n = recv(p.fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      save(argv[2], "event", buf, n);
    }
    return 0;
  }
  struct sets sets = {0};
  dump(nl, argv[2], "table", NFT_MSG_GETTABLE, NULL, NULL);
  dump(nl, argv[2], "chain", NFT_MSG_GETCHAIN, NULL, NULL);
  dump(nl, argv[2], "rule", NFT_MSG_GETRULE, NULL, NULL);
  dump(nl, argv[2], "set", NFT_MSG_GETSET, NULL, &sets);
  for (int i = 0; i < sets.n; i++) {
    dump(nl, argv[2], "setelem", NFT_MSG_GETSETELEM, sets.s[i], NULL);
    nftnl_set_free(sets.s[i]);
  }
  mnl_socket_close(nl);
  return 0;
}
