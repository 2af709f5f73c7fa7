// The primitives of src/lock.ts, which decides with them: an abstract unix socket bound in a
// network namespace (abstract names are per namespace and vanish with the last descriptor, so a
// process killed with -9 leaves nothing behind), the pid of the process listening on one
// (SO_PEERCRED of a connection to it), and a non-blocking flock.
#include <napi.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <sched.h>
#include <string>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace nfk {

namespace {

// Runs f in the namespace at `netns` (on a thread of its own that enters it), or here when empty.
int InNetns(const std::string& netns, const std::function<int()>& f) {
  if (netns.empty()) return f();
  int out = 0;
  std::thread t([&] {
    int nsfd = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) { out = -errno; return; }
    if (setns(nsfd, CLONE_NEWNET) < 0) { out = -errno; close(nsfd); return; }
    close(nsfd);
    out = f();
  });
  t.join();
  return out;
}

bool AbstractAddress(const std::string& name, sockaddr_un* a, socklen_t* len) {
  if (name.empty() || name.size() > sizeof(a->sun_path) - 1) return false;
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

std::string Arg(const Napi::CallbackInfo& info, size_t i) {
  return info.Length() > i && info[i].IsString() ? info[i].As<Napi::String>().Utf8Value() : std::string();
}

}  // namespace

namespace {

// Calls f(fd, address) with a new Unix stream socket, in the namespace of info[0], for the abstract
// name info[1]; f returns the result (and closes fd unless it keeps it). A number for JS: f's, or -errno.
Napi::Value WithAbstractSocket(const Napi::CallbackInfo& info, const std::function<int(int, const sockaddr*, socklen_t)>& f) {
  std::string netns = Arg(info, 0), name = Arg(info, 1);
  sockaddr_un a;
  socklen_t len;
  if (!AbstractAddress(name, &a, &len)) return Napi::Number::New(info.Env(), -ENAMETOOLONG);
  int r = InNetns(netns, [&] {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    return fd < 0 ? -errno : f(fd, reinterpret_cast<const sockaddr*>(&a), len);
  });
  return Napi::Number::New(info.Env(), r);
}

}  // namespace

// bindAbstract(netnsPath, name) -> a listening socket's fd, or -errno (EADDRINUSE: someone holds the name).
Napi::Value BindAbstract(const Napi::CallbackInfo& info) {
  return WithAbstractSocket(info, [](int fd, const sockaddr* a, socklen_t len) {
    if (bind(fd, a, len) == 0 && listen(fd, 16) == 0) return fd;
    int e = errno;
    close(fd);
    return -e;
  });
}

// abstractPeerPid(netnsPath, name) -> the pid of the process listening on the name, or -errno.
Napi::Value AbstractPeerPid(const Napi::CallbackInfo& info) {
  return WithAbstractSocket(info, [](int fd, const sockaddr* a, socklen_t len) {
    int out;
    if (connect(fd, a, len) < 0) {
      out = -errno;
    } else {
      struct ucred cred {};
      socklen_t cl = sizeof(cred);
      out = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 ? cred.pid : -errno;
    }
    close(fd);
    return out;
  });
}

// flockExclusive(fd) -> 0, or the errno (EWOULDBLOCK: another open file holds it).
Napi::Value FlockExclusive(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "flockExclusive(fd)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  return Napi::Number::New(info.Env(), flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno);
}

}  // namespace nfk
