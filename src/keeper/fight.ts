/**
 * Fight detection. When something keeps undoing our work, repairing at once
 * every time would turn two keepers into a busy loop; instead each run of
 * `threshold` repairs within `windowMs` raises the level, and at level L the
 * next repair waits baseMs * 2^(L-1), capped. A quiet spell with nothing to
 * repair ends the fight.
 */
export interface FightOptions {
  threshold: number;
  windowMs: number;
  baseMs: number;
  capMs: number;
  /** Quiet time (no repair needed) that ends a fight; at least twice the current delay. */
  quietMs: number;
}

export const DEFAULT_FIGHT: FightOptions = { threshold: 5, windowMs: 10_000, baseMs: 100, capMs: 5_000, quietMs: 10_000 };

export class Fight {
  level = 0;
  lastRepairAt = -Infinity;
  private recent: number[] = [];

  constructor(readonly options: FightOptions = DEFAULT_FIGHT) {}

  /** How long to wait before the next repair may run. */
  delay(): number {
    if (this.level === 0) return 0;
    return Math.min(this.options.baseMs * 2 ** (this.level - 1), this.options.capMs);
  }

  /** Milliseconds from `now` until a repair is allowed. */
  waitFrom(now: number): number {
    return Math.max(0, this.lastRepairAt + this.delay() - now);
  }

  /** Records a repair; returns true when this repair raised the level. */
  repaired(now: number): boolean {
    this.lastRepairAt = now;
    // Oldest first: drop from the front, no new array per repair (with a high threshold, as the
    // benches set, the window held hundreds of repairs and filtering it showed in their profiles).
    while (this.recent.length > 0 && now - this.recent[0]! >= this.options.windowMs) this.recent.shift();
    this.recent.push(now);
    if (this.recent.length >= this.options.threshold) {
      this.recent = [];
      if (this.delay() < this.options.capMs) {
        this.level++;
        return true;
      }
    }
    return false;
  }

  /** Records a pass that found nothing to repair; returns true when that ended a fight. */
  quiet(now: number): boolean {
    if (this.level === 0) return false;
    const quietFor = Math.max(this.options.quietMs, 2 * this.delay());
    if (now - this.lastRepairAt < quietFor) return false;
    this.level = 0;
    this.recent = [];
    return true;
  }
}
