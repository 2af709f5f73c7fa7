// links(netnsPath?) -> [{ index, name }] or a number (the errno): the
// network interfaces of a namespace, from an RTM_GETLINK dump on a
// NETLINK_ROUTE socket. `iif`/`oif` rules name interfaces but the kernel
// matches their index, which only the target namespace can tell; as with
// the nftables socket, only a short-lived thread enters that namespace.
#include <napi.h>

#include <cerrno>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace nfk {

namespace {

using Links = std::vector<std::pair<unsigned, std::string>>;

int OnLink(const nlmsghdr* nlh, void* arg) {
  auto* out = static_cast<Links*>(arg);
  if (nlh->nlmsg_type != RTM_NEWLINK || nlh->nlmsg_len < mnl_nlmsg_size(sizeof(ifinfomsg))) return MNL_CB_OK;
  const auto* ifm = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  std::string name;
  // mnl_attr_for_each, spelled out: its void* arithmetic is not C++.
  const char* end = reinterpret_cast<const char*>(nlh) + nlh->nlmsg_len;
  for (const nlattr* attr = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(*ifm)));
       mnl_attr_ok(attr, static_cast<int>(end - reinterpret_cast<const char*>(attr)));
       attr = mnl_attr_next(attr)) {
    if (mnl_attr_get_type(attr) != IFLA_IFNAME) continue;
    const char* s = static_cast<const char*>(mnl_attr_get_payload(attr));
    size_t len = mnl_attr_get_payload_len(attr);
    // Bounded by the attribute, NUL or not.
    size_t n = 0;
    while (n < len && n < IFNAMSIZ && s[n] != '\0') n++;
    name.assign(s, n);
  }
  if (ifm->ifi_index > 0 && !name.empty()) out->emplace_back(static_cast<unsigned>(ifm->ifi_index), name);
  return MNL_CB_OK;
}

// The dump in the calling thread's namespace; 0 or an errno.
int DumpLinks(Links* out) {
  mnl_socket* nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (nl == nullptr) return errno;
  int err = 0;
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
    err = errno;
    mnl_socket_close(nl);
    return err;
  }
  timeval tv = {10, 0};
  setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  unsigned seq = static_cast<unsigned>(time(nullptr));
  nlh->nlmsg_seq = seq;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  unsigned portid = mnl_socket_get_portid(nl);
  if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
    err = errno;
  } else {
    for (;;) {
      ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
      if (n < 0) { err = errno; break; }
      int r = mnl_cb_run(buf, static_cast<size_t>(n), seq, portid, OnLink, out);
      if (r == MNL_CB_STOP) break;
      if (r < 0) { err = errno; break; }
    }
  }
  mnl_socket_close(nl);
  return err;
}

}  // namespace

Napi::Value ListLinks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  if (info.Length() > 0 && info[0].IsString()) path = info[0].As<Napi::String>().Utf8Value();
  Links links;
  int err = 0;
  if (path.empty()) {
    err = DumpLinks(&links);
  } else {
    std::thread t([&] {
      int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0) { err = errno; return; }
      if (setns(nsfd, CLONE_NEWNET) < 0) { err = errno; close(nsfd); return; }
      close(nsfd);
      err = DumpLinks(&links);
    });
    t.join();
  }
  if (err != 0) return Napi::Number::New(env, err);
  Napi::Array out = Napi::Array::New(env, links.size());
  for (size_t i = 0; i < links.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", Napi::Number::New(env, links[i].first));
    o.Set("name", Napi::String::New(env, links[i].second));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

}  // namespace nfk
