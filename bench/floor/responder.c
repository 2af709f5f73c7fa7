/*
 * The kernel's floor for an event-driven repair, as a process of its own: the least a daemon can do
 * between an outside deletion and its repair's commit. It listens to the nftables multicast group
 * and answers each deletion in one table by adding it back:
 *   - a rule deleted from CHAIN: re-added at its place (after the rule that was before it), from the
 *     deletion's own notification (which carries the rule's expressions and userdata);
 *   - elements deleted from SET: the notification's message sent back as NEWSETELEM.
 * No library, no parsing beyond attribute headers, no guard, no verification, no logging: what is
 * left is the kernel's two commits and the cross-process wake-ups, which nfkeeper also pays.
 *
 *   responder NETNS_PATH FAMILY TABLE rule CHAIN
 *   responder NETNS_PATH FAMILY TABLE element SET
 *
 * FAMILY is the number (ip = 2). It prints "ready" once it listens (and, for rules, has read the
 * chain's handles in order), then runs until killed. Built by bench/scenarios/s8.ts with cc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <endian.h>

#define BUF (1 << 20)
#define MSG(t) ((NFNL_SUBSYS_NFTABLES << 8) | (t))

static int family;
static const char *table, *object;
static int rules_mode;
static uint64_t *handles;  /* the chain's rules in order */
static size_t nhandles, caphandles;
static uint32_t seq = 1;

static void die(const char *what) {
  fprintf(stderr, "responder: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int nl_open(unsigned groups) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) die("socket");
  struct sockaddr_nl a = { .nl_family = AF_NETLINK, .nl_groups = groups };
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
  int sz = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
  return fd;
}

/* Appends an attribute to the message at m (its nlmsg_len grows). */
static void put(struct nlmsghdr *m, uint16_t type, const void *data, size_t len) {
  struct nlattr *a = (struct nlattr *)((char *)m + NLMSG_ALIGN(m->nlmsg_len));
  a->nla_type = type;
  a->nla_len = NLA_HDRLEN + len;
  memcpy((char *)a + NLA_HDRLEN, data, len);
  m->nlmsg_len = NLMSG_ALIGN(m->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

static struct nlmsghdr *start(char *at, uint16_t type, uint16_t flags, int fam, uint16_t res) {
  struct nlmsghdr *m = (struct nlmsghdr *)at;
  m->nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
  m->nlmsg_type = type;
  m->nlmsg_flags = NLM_F_REQUEST | flags;
  m->nlmsg_seq = seq++;
  m->nlmsg_pid = 0;
  struct nfgenmsg *g = NLMSG_DATA(m);
  g->nfgen_family = fam;
  g->version = NFNETLINK_V0;
  g->res_id = htobe16(res);
  return m;
}

/* The attribute of type t at the top level of an nftables message, or NULL. */
static struct nlattr *attr(const struct nlmsghdr *m, uint16_t t) {
  int len = m->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg));
  struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(m) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
  while (len >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= len) {
    if ((a->nla_type & NLA_TYPE_MASK) == t) return a;
    len -= NLA_ALIGN(a->nla_len);
    a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
  }
  return NULL;
}

static int str_is(const struct nlattr *a, const char *s) {
  return a && strcmp((const char *)a + NLA_HDRLEN, s) == 0;
}

static uint64_t be64_of(const struct nlattr *a) {
  uint64_t v;
  memcpy(&v, (const char *)a + NLA_HDRLEN, 8);
  return be64toh(v);
}

static void keep_handle(size_t at, uint64_t h) {
  if (nhandles == caphandles) {
    caphandles = caphandles ? caphandles * 2 : 1024;
    handles = realloc(handles, caphandles * sizeof *handles);
    if (!handles) die("realloc");
  }
  memmove(handles + at + 1, handles + at, (nhandles - at) * sizeof *handles);
  handles[at] = h;
  nhandles++;
}

/* Reads the chain's rules' handles in order (one dump). */
static void read_chain(int fd, char *buf) {
  struct nlmsghdr *m = start(buf, MSG(NFT_MSG_GETRULE), NLM_F_DUMP | NLM_F_ACK, family, 0);
  put(m, NFTA_RULE_TABLE, table, strlen(table) + 1);
  put(m, NFTA_RULE_CHAIN, object, strlen(object) + 1);
  if (send(fd, m, m->nlmsg_len, 0) < 0) die("send dump");
  for (;;) {
    ssize_t n = recv(fd, buf, BUF, 0);
    if (n < 0) die("recv dump");
    for (struct nlmsghdr *r = (struct nlmsghdr *)buf; NLMSG_OK(r, n); r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_type == NLMSG_DONE) return;
      if (r->nlmsg_type == NLMSG_ERROR) {
        errno = -((struct nlmsgerr *)NLMSG_DATA(r))->error;
        if (errno) die("dump");
        continue;
      }
      struct nlattr *h = attr(r, NFTA_RULE_HANDLE);
      if (h) keep_handle(nhandles, be64_of(h));
    }
  }
}

/* Commits the one message already built after the batch's begin, and waits for its ack; returns
 * the echoed rule's handle for a rule, 0 otherwise. */
static uint64_t commit(int fd, char *out, size_t body_len, char *in) {
  struct nlmsghdr *b = start(out, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  size_t len = NLMSG_ALIGN(b->nlmsg_len);
  len += body_len;
  struct nlmsghdr *e = start(out + len, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  len += NLMSG_ALIGN(e->nlmsg_len);
  if (send(fd, out, len, 0) < 0) die("send batch");
  uint64_t handle = 0;
  for (;;) {
    ssize_t n = recv(fd, in, BUF, 0);
    if (n < 0) die("recv batch");
    for (struct nlmsghdr *r = (struct nlmsghdr *)in; NLMSG_OK(r, n); r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_type == NLMSG_ERROR) {
        int err = -((struct nlmsgerr *)NLMSG_DATA(r))->error;
        if (err) {
          errno = err;
          perror("responder: the kernel refused the repair");
        }
        return handle;  /* the ack of the one message */
      }
      if (r->nlmsg_type == MSG(NFT_MSG_NEWRULE)) {
        struct nlattr *h = attr(r, NFTA_RULE_HANDLE);
        if (h) handle = be64_of(h);
      }
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: responder NETNS_PATH FAMILY TABLE rule CHAIN | element SET\n");
    return 2;
  }
  int ns = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (ns < 0 || setns(ns, CLONE_NEWNET) < 0) die(argv[1]);
  family = atoi(argv[2]);
  table = argv[3];
  rules_mode = strcmp(argv[4], "rule") == 0;
  object = argv[5];
  char *in = malloc(BUF), *out = malloc(BUF), *ev = malloc(BUF);
  if (!in || !out || !ev) die("malloc");
  int listen = nl_open(0);
  unsigned group = NFNLGRP_NFTABLES;
  if (setsockopt(listen, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) < 0) die("membership");
  int cfd = nl_open(0);
  if (rules_mode) read_chain(cfd, in);
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    ssize_t n = recv(listen, ev, BUF, 0);
    if (n < 0) {
      if (errno == ENOBUFS) continue;
      die("recv events");
    }
    for (struct nlmsghdr *m = (struct nlmsghdr *)ev; NLMSG_OK(m, n); m = NLMSG_NEXT(m, n)) {
      struct nfgenmsg *g = NLMSG_DATA(m);
      if (g->nfgen_family != family) continue;
      if (rules_mode && m->nlmsg_type == MSG(NFT_MSG_DELRULE)) {
        if (!str_is(attr(m, NFTA_RULE_TABLE), table) || !str_is(attr(m, NFTA_RULE_CHAIN), object)) continue;
        struct nlattr *h = attr(m, NFTA_RULE_HANDLE);
        if (!h) continue;
        uint64_t gone = be64_of(h);
        size_t at = 0;
        while (at < nhandles && handles[at] != gone) at++;
        if (at == nhandles) continue;
        memmove(handles + at, handles + at + 1, (nhandles - at - 1) * sizeof *handles);
        nhandles--;
        /* NEWRULE: the deletion's attributes but its handle, at its place. */
        char *body = out + NLMSG_ALIGN(NLMSG_LENGTH(sizeof(struct nfgenmsg)));
        struct nlmsghdr *r = start(body, MSG(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_ACK | NLM_F_ECHO | (at > 0 ? NLM_F_APPEND : 0), family, 0);
        int left = m->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg));
        struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(m) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
        for (; left >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left;
             left -= NLA_ALIGN(a->nla_len), a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len))) {
          uint16_t t = a->nla_type & NLA_TYPE_MASK;
          if (t == NFTA_RULE_HANDLE || t == NFTA_RULE_POSITION) continue;
          struct nlattr *c = (struct nlattr *)((char *)r + NLMSG_ALIGN(r->nlmsg_len));
          memcpy(c, a, a->nla_len);
          r->nlmsg_len = NLMSG_ALIGN(r->nlmsg_len) + NLA_ALIGN(a->nla_len);
        }
        if (at > 0) {
          uint64_t pos = htobe64(handles[at - 1]);
          put(r, NFTA_RULE_POSITION, &pos, 8);
        }
        uint64_t added = commit(cfd, out, NLMSG_ALIGN(r->nlmsg_len), in);
        if (added) keep_handle(at, added);
      } else if (!rules_mode && m->nlmsg_type == MSG(NFT_MSG_DELSETELEM)) {
        if (!str_is(attr(m, NFTA_SET_ELEM_LIST_TABLE), table) || !str_is(attr(m, NFTA_SET_ELEM_LIST_SET), object)) continue;
        char *body = out + NLMSG_ALIGN(NLMSG_LENGTH(sizeof(struct nfgenmsg)));
        memcpy(body, m, m->nlmsg_len);
        struct nlmsghdr *r = (struct nlmsghdr *)body;
        r->nlmsg_type = MSG(NFT_MSG_NEWSETELEM);
        r->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
        r->nlmsg_seq = seq++;
        r->nlmsg_pid = 0;
        commit(cfd, out, NLMSG_ALIGN(r->nlmsg_len), in);
      }
    }
  }
}
