// sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET. Node has
// no AF_UNIX datagram sockets, so this tiny piece lives here.
#include <napi.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace nfk {

// sdNotify(socketPath, message) -> 0 or an errno
Napi::Value SdNotify(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsString()) throw Napi::TypeError::New(env, "sdNotify(path, message)");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  std::string msg = info[1].As<Napi::String>().Utf8Value();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return Napi::Number::New(env, EINVAL);
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Napi::Number::New(env, errno);
  ssize_t n = sendto(fd, msg.data(), msg.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len);
  int err = n < 0 ? errno : 0;
  close(fd);
  return Napi::Number::New(env, err);
}

}  // namespace nfk
