/**
 * The monitor's armed repair (NftWatch.arm): the repair of a foreign deletion of each owned rule,
 * handed to the addon ahead of time so that it commits it on the event's wake-up, before any
 * JavaScript runs. This keeps track of whether the monitor holds a current one.
 */
import type { KeeperState } from './state.js';

/** Owned rules up to which the monitor is armed with their repairs. */
const ARM_MAX_RULES = 256;

export class Arming {
  /** The monitor holds an armed repair that is still current, as far as this thread knows. */
  armed = false;
  /** The generation the monitor's arm holds the owned tables at (arm(), and each armed repair's). */
  armedAt = -1;
  /** The generation at which arming last failed. */
  private failedAt = -1;

  /** `busy`: a pass is running or queued (the scheduler's), which plans and commits on its own. */
  constructor(private readonly k: KeeperState, private readonly busy: () => boolean) {}

  /**
   * Arms the monitor (Monitor.arm) with the repair of a foreign deletion of each owned rule, while
   * the mirror is exact and clean at the monitor's last generation and the event repair would
   * repair at once (no pass running, no fight delay, no retired table): the repair then costs the
   * event's wake-up and the commit, no JavaScript before it. Small rulesets only (ARM_MAX_RULES).
   */
  arm(): void {
    const { mirror, monitor, sock } = this.k;
    if (this.k.stopped || this.busy() || !mirror?.valid || !monitor?.arm || !monitor.progress || !sock || this.k.retired.length > 0
      || this.k.fight.delay() > 0) return;
    const p = monitor.progress();
    if (p.lastGeneration === this.k.refusedAt || !mirror.exactAt(p.lastGeneration, p)) return;
    // Not again at a generation where it could not (an addon without it, a socket it cannot use): the tick asks each second.
    if (p.lastGeneration === this.failedAt || !mirror.clean(ARM_MAX_RULES)) return;
    // Nothing touched the owned tables since the last arm (the pass in between committed nothing there): take it up.
    if (monitor.resume?.()) {
      this.armed = true;  // at the armedAt it had
      return;
    }
    const a = mirror.armable(ARM_MAX_RULES);
    if (!a) return;
    try {
      this.armed = monitor.arm(sock, p.lastGeneration, a.ops, a.handles);
      this.armedAt = p.lastGeneration;
    } catch (e) {
      this.armed = false;
      this.k.log.debug({ err: (e as Error).message }, 'the monitor could not be armed');
    }
    if (!this.armed) this.failedAt = p.lastGeneration;
  }

  /** Arms the monitor unless it is armed. */
  ensure(): void {
    if (!this.armed) this.arm();
  }

  /** The monitor's armed repair is forgotten: the next foreign change is this thread's to answer. */
  disarm(): void {
    this.armed = false;
    this.k.monitor?.disarm?.();
  }

  /**
   * A pass plans and commits on its own: the monitor must not repair meanwhile. Paused, not
   * forgotten: after a pass that committed nothing to the owned tables (a tick's, when only
   * commits elsewhere moved the generation) it takes up the same arm (arm()).
   */
  pause(): void {
    this.armed = false;
    this.k.monitor?.pause?.();
  }

  /** Whether arming after the keeper has waited once is worth asking for. */
  wanted(): boolean {
    return !this.armed && !!this.k.monitor?.arm;
  }

  /** Whether the next arm after a wait may be asked for at all (armSoon). */
  possible(): boolean {
    return !this.armed && !this.k.stopped && !!this.k.monitor?.arm;
  }
}
