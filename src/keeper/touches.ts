import type { MonitorBatch, MonitorProgress } from '../netlink/events.js';

/**
 * Which commits touched the owned tables, from the monitor's batches: the proof that lets a pass
 * keep what is known when only the generation moved (a commit in another table), with
 * no read at all. The monitor delivers every commit that touched a watched table (and every table
 * deletion); with its progress (the run of commits it saw whole, and how many batches it handed
 * over) a pass can tell that no commit since the known generation touched an owned table.
 */
export class OwnedTouches {
  /** Batches noted: every one the monitor delivered, to compare with MonitorProgress.delivered. */
  noted = 0;
  /** The last generation whose commit touched an owned table (ours included), as far as noted. */
  lastTouch = 0;
  /** Owned table names by family (no key string built per event: note() runs on the repair's path). */
  private owned = new Map<string, Set<string>>();

  /** The owned tables (the monitor's filter). */
  setOwned(tables: readonly { family: string; name: string }[]): void {
    this.owned = new Map();
    for (const t of tables) {
      let names = this.owned.get(t.family);
      if (!names) this.owned.set(t.family, names = new Set());
      names.add(t.name);
    }
  }

  note(b: MonitorBatch): void {
    this.noted++;
    // An overflow lost commits: the monitor's run starts again (runStart), which the proof checks.
    if (b.overflow) return;
    let touched = b.truncated;
    for (let i = 0; !touched && i < b.events.length; i++) touched = this.owned.get(b.events[i]!.family)?.has(b.events[i]!.table) === true;
    if (touched) this.lastTouch = Math.max(this.lastTouch, b.generation);
  }

  /** Our own commit that made `generation` touched an owned table, learnt without its batch (Monitor.skipOwn). */
  touched(generation: number): void {
    this.lastTouch = Math.max(this.lastTouch, generation);
  }

  /**
   * True when no commit after `from` up to `to` (the kernel's generation now) touched an owned
   * table: the monitor saw every commit whole from `from + 1` on, up to `to` at least, and every
   * batch it handed over was noted, none touching an owned table after `from`.
   */
  untouched(from: number, to: number, p: MonitorProgress): boolean {
    return p.delivered === this.noted && p.runStart !== 0 && p.runStart <= from + 1 && p.lastGeneration >= to
      && this.lastTouch <= from && from <= to;
  }

  /** The monitor has not caught up with `to` yet (its thread, or the delivery to this one, trails the kernel). */
  lagging(to: number, p: MonitorProgress): boolean {
    return p.lastGeneration < to || p.delivered > this.noted;
  }
}
