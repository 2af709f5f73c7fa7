/**
 * systemd's notify protocol (Type=notify): READY=1 once the desired ruleset
 * is verified in the kernel, WATCHDOG=1 from the loop, STOPPING=1 on the way
 * out; while starting, STATUS= and EXTEND_TIMEOUT_USEC= (src/run.ts). Without
 * $NOTIFY_SOCKET every call is a no-op.
 */
import { sdNotify } from './netlink/unix.js';
import { errnoName } from './base/errors.js';

export class Notifier {
  readonly socket: string | undefined;
  /** Half of $WATCHDOG_USEC, in ms, when the watchdog is on for this process. */
  readonly watchdogMs: number | undefined;

  constructor(env: NodeJS.ProcessEnv = process.env) {
    this.socket = env.NOTIFY_SOCKET || undefined;
    const usec = Number(env.WATCHDOG_USEC);
    const forUs = env.WATCHDOG_PID === undefined || Number(env.WATCHDOG_PID) === process.pid;
    this.watchdogMs = this.socket && usec > 0 && forUs ? usec / 2000 : undefined;
  }

  /** Sends one notification; throws with the errno name if the socket refuses it. */
  notify(message: string): void {
    if (!this.socket) return;
    const err = sdNotify(this.socket, message);
    if (err !== 0) throw new Error(`sd_notify to ${this.socket}: ${errnoName(err)}`);
  }
}
