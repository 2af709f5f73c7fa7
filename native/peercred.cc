// peerCred(fd): the credentials of the process at the other end of a
// connected AF_UNIX stream socket (SO_PEERCRED), as the kernel recorded them
// at connect(). Node does not expose this; the control API refuses requests
// from peers that are not root with it.
#include <napi.h>

#include <cerrno>
#include <sys/socket.h>
#include <sys/types.h>

namespace nfk {

// peerCred(fd) -> { pid, uid, gid } or a number (the errno) when the fd has none.
Napi::Value PeerCred(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "peerCred(fd)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return Napi::Number::New(env, errno);
  if (len != sizeof(cred)) return Napi::Number::New(env, EINVAL);
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", Napi::Number::New(env, cred.pid));
  out.Set("uid", Napi::Number::New(env, cred.uid));
  out.Set("gid", Napi::Number::New(env, cred.gid));
  return out;
}

}  // namespace nfk
