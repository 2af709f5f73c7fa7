/**
 * An independent, out-of-process repair-latency probe: against any running
 * keeper (nfkeeper run, or bench/s6-keeper.ts), its own netlink socket
 * deletes one rule of an owned chain, and the clock runs from just before
 * that deletion's commit (so it includes the probe's own commit) until the nftables multicast group
 * (NFNLGRP_NFTABLES) shows another socket's commit adding a rule back to that
 * chain. Nothing in the daemon is asked or trusted: after each sample the
 * chain is read back and must hold the same rules, in the same order, as
 * before the deletion.
 *
 *   sudo npx tsx bench/probe.ts --netns /run/netns/NAME --table ip:nfkeeper --chain postrouting \
 *     [--index 1] [--count 20] [--interval-ms 2500] [--json]
 *
 * A running nfkeeper backs off when something keeps undoing its rules (5
 * repairs within 10 s raise the fight level, see docs/design.md), so the
 * default spacing is 2.5 s; bench/s6-keeper.ts runs the keeper with the
 * back-off off, for tight loops.
 */
import { performance } from 'node:perf_hooks';
import { Batch } from '../src/netlink/batch.js';
import type { Family } from '../src/netlink/expr.js';
import { Monitor } from '../src/netlink/monitor.js';
import type { MonitorBatch } from '../src/netlink/events.js';
import type { SetElement } from '../src/netlink/objects.js';
import { open, type NftSocket } from '../src/netlink/socket.js';
import { ruleKey } from '../src/rules/index.js';
import { collectGarbage, enableCollections } from '../src/base/heap.js';
import { summarize, type Summary } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

export interface ProbeTarget {
  netns?: string;
  family: Family;
  table: string;
  chain: string;
  /** The rule to delete, by position; default: the middle of the chain. */
  index?: number;
}

export class RepairProbe {
  private readonly sock: NftSocket;
  private readonly monitor: Monitor;
  private waiter?: (b: MonitorBatch, at: number) => void;

  constructor(private readonly target: ProbeTarget) {
    this.sock = open({ netns: target.netns });
    this.monitor = new Monitor({
      netns: target.netns,
      tables: [{ family: target.family, name: target.table }],
      ignorePorts: [this.sock.portId],  // our own deletion is not the answer
      onBatch: (b) => this.waiter?.(b, performance.now()),
    });
  }

  private get where() {
    return { family: this.target.family, table: this.target.table, chain: this.target.chain };
  }

  /**
   * One sample: µs from our deletion committed to the keeper's commit adding the rule back.
   * `collect`: a full collection of the probe's own heap just before the clock starts (see settle).
   */
  async once(timeoutMs = 10_000, verify = true, collect = false): Promise<number> {
    const before = await this.sock.listRules(this.where);
    if (before.length === 0) throw new Error(`chain ${this.target.table} ${this.target.chain} is empty`);
    const i = Math.min(this.target.index ?? before.length >> 1, before.length - 1);
    const victim = before[i]!;
    const answered = new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no repair of ${this.target.chain} within ${timeoutMs} ms`)), timeoutMs);
      this.waiter = (b, at) => {
        const ours = b.overflow || b.events.some((e) => e.type === 'newrule' && e.table === this.target.table && e.name === this.target.chain);
        if (!ours) return;
        clearTimeout(timer);
        this.waiter = undefined;
        resolve(at);
      };
    });
    if (collect) settle();
    // The clock starts before our own commit: the keeper can be notified and answer while our
    // acknowledgement is still on its way back, and a clock started after it would miss that part.
    const t0 = performance.now();
    await this.sock.commit(new Batch().delete('rule', { ...this.where, handle: victim.handle! }));
    const t1 = await answered;
    if (verify) {
      const after = await this.sock.listRules(this.where);
      const key = (r: typeof victim) => ruleKey({ exprs: r.exprs, userdata: r.userdata });
      if (after.length !== before.length || key(after[i]!) !== key(victim)) {
        throw new Error(`after the repair the chain holds ${after.length} rules (was ${before.length}), rule ${i + 1} ${key(after[i]!) === key(victim) ? 'is back' : 'is not the deleted one'}`);
      }
    }
    return (t1 - t0) * 1000;
  }

  close(): void {
    this.monitor.close();
    this.sock.close();
  }
}

export interface ElementProbeTarget {
  netns?: string;
  family: Family;
  table: string;
  set: string;
}

/** What identifies an element and what it holds, as a notification and a dump both give it. */
const elementText = (e: SetElement) => JSON.stringify([e.key, e.keyEnd, e.flags ?? 0, e.data, e.verdict, e.chain, e.userdata]);

/** The element version of RepairProbe: delete one element, time until another socket adds it back. */
export class ElementRepairProbe {
  private readonly sock: NftSocket;
  private readonly monitor: Monitor;
  private waiter?: (b: MonitorBatch, at: number) => void;
  private elements: SetElement[] = [];
  private next = 0;

  constructor(private readonly target: ElementProbeTarget) {
    this.sock = open({ netns: target.netns });
    this.monitor = new Monitor({
      netns: target.netns,
      tables: [{ family: target.family, name: target.table }],
      ignorePorts: [this.sock.portId],
      onBatch: (b) => this.waiter?.(b, performance.now()),
    });
  }

  private get where() {
    return { family: this.target.family, table: this.target.table, set: this.target.set };
  }

  /** Reads the set once (the victims come from it); returns its size. */
  async load(): Promise<number> {
    this.elements = await this.sock.listElements(this.where);
    if (this.elements.length === 0) throw new Error(`set ${this.target.table} ${this.target.set} is empty`);
    return this.elements.length;
  }

  /** One sample: µs from our deletion committed to the keeper's commit adding the element back (`collect`: see settle). */
  async once(timeoutMs = 10_000, collect = false): Promise<number> {
    if (this.elements.length === 0) await this.load();
    // Spread over the set (a stride prime to any size we use), never the same twice in a row.
    const victim = this.elements[(this.next++ * 7919) % this.elements.length]!;
    const want = elementText(victim);
    const answered = new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no repair of ${this.target.set} within ${timeoutMs} ms`)), timeoutMs);
      this.waiter = (b, at) => {
        if (b.overflow) {
          clearTimeout(timer);
          reject(new Error('the probe\'s event socket overflowed'));
          return;
        }
        const back = b.events.find((e) => e.type === 'newsetelem' && e.table === this.target.table && e.name === this.target.set
          && e.elements?.some((x) => x.key === victim.key));
        if (!back) return;
        clearTimeout(timer);
        this.waiter = undefined;
        const got = back.elements!.find((x) => x.key === victim.key)!;
        if (elementText({ ...got, timeout: undefined, expiration: undefined }) !== want) {
          reject(new Error(`the element came back as ${elementText(got)}, was ${want}`));
          return;
        }
        resolve(at);
      };
    });
    if (collect) settle();
    const t0 = performance.now();
    await this.sock.commit(new Batch().delete('element', { ...this.where,
      elements: [{ key: victim.key, ...(victim.keyEnd !== undefined ? { keyEnd: victim.keyEnd } : {}), flags: victim.flags ?? 0 }] }));
    const t1 = await answered;
    return (t1 - t0) * 1000;
  }

  /** The set read back holds as many elements as at load(). */
  async verify(): Promise<void> {
    const now = await this.sock.listElements(this.where);
    if (now.length !== this.elements.length) throw new Error(`the set holds ${now.length} elements, had ${this.elements.length}`);
  }

  close(): void {
    this.monitor.close();
    this.sock.close();
  }
}

/**
 * The probe's own garbage collected before a sample's clock starts: a probe that reads a big chain
 * before each deletion (and holds a big set's elements) otherwise has V8 collect its heap at any
 * moment, also between its deletion and the repair, and its pause (tens of ms) is then counted as
 * the keeper's. For samples seconds apart; a loop of samples milliseconds apart would pay it each time.
 */
function settle(): void {
  enableCollections();
  collectGarbage();
}

/** `count` element repairs, `intervalMs` apart; the set is read back at the end. `collect`: see settle. */
export async function probeElementRepairs(target: ElementProbeTarget, count: number, intervalMs: number,
  opts: { warmup?: number; timeoutMs?: number; collect?: boolean } = {}): Promise<{ summary: Summary; samples: number[]; elements: number }> {
  const probe = new ElementRepairProbe(target);
  const samples: number[] = [];
  try {
    const elements = await probe.load();
    for (let k = 0; k < (opts.warmup ?? 0) + count; k++) {
      const us = await probe.once(opts.timeoutMs ?? 10_000, opts.collect ?? false);
      if (k >= (opts.warmup ?? 0)) samples.push(us);
      await new Promise((r) => setTimeout(r, intervalMs));
    }
    await probe.verify();
    return { summary: summarize(samples), samples, elements };
  } finally {
    probe.close();
  }
}

/** `count` samples, `intervalMs` apart (the keeper's verify pass after each repair runs in between). `collect`: see settle. */
export async function probeRepairs(target: ProbeTarget, count: number, intervalMs: number,
  opts: { warmup?: number; verify?: boolean; timeoutMs?: number; collect?: boolean } = {}): Promise<{ summary: Summary; samples: number[] }> {
  const probe = new RepairProbe(target);
  const samples: number[] = [];
  try {
    for (let k = 0; k < (opts.warmup ?? 0) + count; k++) {
      const us = await probe.once(opts.timeoutMs ?? 10_000, opts.verify ?? true, opts.collect ?? false);
      if (k >= (opts.warmup ?? 0)) samples.push(us);
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  } finally {
    probe.close();
  }
  return { summary: summarize(samples), samples };
}

async function main(): Promise<void> {
  const cli = parseArgs(import.meta.url, { '--netns': 1, '--table': 1, '--chain': 1, '--set': 1, '--index': 1, '--count': 1, '--interval-ms': 1, '--json': 0 });
  const arg = cli.value;
  const [family, table] = (arg('--table') ?? 'ip:nfkeeper').split(':') as [Family, string];
  const chain = arg('--chain') ?? 'postrouting';
  const count = Number(arg('--count') ?? 20);
  const intervalMs = Number(arg('--interval-ms') ?? 2500);
  const set = arg('--set');
  if (set !== undefined) {
    if (!table || !Number.isInteger(count) || count < 1 || !(intervalMs >= 0)) {
      throw new Error('usage: probe.ts --netns PATH --table FAMILY:NAME --set NAME [--count N] [--interval-ms MS] [--json]');
    }
    const r = await probeElementRepairs({ netns: arg('--netns'), family, table, set }, count, intervalMs);
    if (cli.has('--json')) process.stdout.write(`${JSON.stringify(r)}\n`);
    else {
      const ms = (us: number) => (us / 1000).toFixed(3);
      process.stdout.write(`${r.summary.n} element repairs of ${family} ${table} ${set} (${r.elements} elements): median ${ms(r.summary.median)} ms, ` +
        `p99 ${ms(r.summary.p99)} ms, min ${ms(r.summary.min)} ms, max ${ms(r.summary.max)} ms\n`);
    }
    return;
  }
  const index = arg('--index') !== undefined ? Number(arg('--index')) : undefined;
  if (!table || !Number.isInteger(count) || count < 1 || !(intervalMs >= 0)) {
    throw new Error('usage: probe.ts --netns PATH --table FAMILY:NAME --chain NAME [--index I] [--count N] [--interval-ms MS] [--json]');
  }
  const { summary, samples } = await probeRepairs({ netns: arg('--netns'), family, table, chain, index }, count, intervalMs);
  if (cli.has('--json')) {
    process.stdout.write(`${JSON.stringify({ summary, samples })}\n`);
  } else {
    const ms = (us: number) => (us / 1000).toFixed(3);
    process.stdout.write(`${summary.n} repairs of ${family} ${table} ${chain}: median ${ms(summary.median)} ms, p99 ${ms(summary.p99)} ms, ` +
      `min ${ms(summary.min)} ms, max ${ms(summary.max)} ms\n`);
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  main().catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exitCode = 1;
  });
}
