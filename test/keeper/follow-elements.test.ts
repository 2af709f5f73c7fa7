/**
 * Set elements in the followed part (src/keeper/follow-events.ts), on the real kernel: a foreign element
 * deletion, addition or change of data in an owned 10,000-element verdict map is repaired by
 * exactly that element's ops, planned from the elements the events carry, with no element read
 * and no dump; a reload that changes one element commits just its ops, again without a read; when
 * the proof is missing (a commit with more events than a batch keeps, ENOBUFS on the event socket)
 * the keeper reads the kernel instead. And a timed-element bug found on the way: a timed element a
 * reload adds is installed, and one that expired is not put back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNftConfig, type Config } from '../../src/config/config.js';
import type { Keeper, RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import type { CommitOptions, NftConn, NftHost } from '../../src/netlink/conn.js';
import { Monitor } from '../../src/netlink/monitor.js';
import type { SetElement } from '../../src/netlink/objects.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { sleep, until } from '../helpers/wait.js';
import { nextRepair, startKeeper } from './helpers.js';

const N = 10_000;
const CHAINS = 10;
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const elem = (i: number, chain = i % CHAINS) => `${ip(i)} . tcp . ${80 + (i % 3)} : goto svc-${chain}`;

/** A kube-proxy-like table: a verdict map of N elements and the rule that looks it up. */
function kpConfig(change: (lines: string[]) => void = () => undefined): Config {
  const els = Array.from({ length: N }, (_, i) => elem(i));
  change(els);
  const text = ['table ip kp {',
    ...Array.from({ length: CHAINS }, (_, c) => `\tchain svc-${c} {\n\t\tcounter\n\t}`),
    '\tmap service-ips {', '\t\ttype ipv4_addr . inet_proto . inet_service : verdict',
    `\t\telements = { ${els.join(',\n\t\t\t')} }`, '\t}',
    '\tchain services {', '\t\ttype nat hook prerouting priority dstnat; policy accept;',
    '\t\tip daddr . meta l4proto . th dport vmap @service-ips', '\t}', '}'].join('\n');
  return parseNftConfig(`${text}\n`, 'kp.nft');
}


const dumps = async (k: Keeper) => (await k.metrics.dumps.get()).values[0]?.value ?? 0;

/** The keeper's own connection, counting its element reads and keeping the batches it commits. */
function countingHost(ns: Netns, receiveBuffer?: number): NftHost & { elementReads: number; batches: Op[][] } {
  const host = {
    elementReads: 0,
    batches: [] as Op[][],
    connect: () => {
      const real = open({ netns: ns.path });
      return new Proxy(real, {
        get(target, p, recv) {
          if (p === 'listElements') {
            return (f: Parameters<NftSocket['listElements']>[0]) => {
              host.elementReads++;
              return target.listElements(f);
            };
          }
          if (p === 'commit') {
            return (batch: Batch, options?: CommitOptions) => {
              host.batches.push([...batch.ops]);
              return target.commit(batch, options);
            };
          }
          // The event's repair commits inline, at once (Keeper.repairNow).
          if (p === 'commitNow') {
            return (batch: Batch, options?: CommitOptions) => {
              const r = target.commitNow(batch, options);
              if (r !== false) host.batches.push([...batch.ops]);
              return r;
            };
          }
          const v = Reflect.get(target, p, recv);
          return typeof v === 'function' ? v.bind(target) : v;
        },
      }) as NftConn;
    },
    // Without the monitor's armed repair, which would answer a lone element deletion before any
    // JavaScript runs (test/keeper/armed-repair.test.ts): this file holds the view's own repair.
    watch: (o: Parameters<NftHost['watch']>[0]) => Object.assign(new Monitor({ ...o, netns: ns.path, ...(receiveBuffer ? { receiveBuffer } : {}) }), { arm: undefined }),
  };
  return host;
}

/** What an op says, shortly: `add element kp service-ips [keys]`. */
function opText(op: Op): string {
  if (op.object !== 'element') return `${op.verb} ${op.object}`;
  return `${op.verb} element ${op.table} ${op.set} ${op.elements.map((e: SetElement) => `${e.key}${e.verdict ? `:${e.verdict} ${e.chain}` : ''}`).join(',')}`;
}

/** An element's key as the kernel holds it (ipv4 . proto . port, each padded to 4 bytes). */
function keyOf(i: number): string {
  const a = Buffer.from([10, (i >> 16) & 255, (i >> 8) & 255, i & 255]).toString('hex');
  return `${a}06000000${(80 + (i % 3)).toString(16).padStart(4, '0')}0000`;
}

describe('element repairs from the followed part, a 10,000-element verdict map', () => {
  let ns: Netns;
  let sock: NftSocket;
  let keeper: Keeper;
  let host: ReturnType<typeof countingHost>;
  const map = { family: 'ip', table: 'kp', set: 'service-ips' } as const;
  const kernel = async () => new Map((await sock.listElements(map)).map((e) => [e.key!, `${e.verdict} ${e.chain}`]));

  beforeAll(async () => {
    ns = createNetns('followel');
    sock = open({ netns: ns.path });
    host = countingHost(ns);
    keeper = await startKeeper(ns, { config: kpConfig(), fight: { threshold: 1e9 }, host });
    await until('the followed part to be seeded', () => keeper.followState()?.exact === true);
    await keeper.idle();
  }, 120_000);
  afterAll(async () => {
    await keeper?.stop();
    sock?.close();
    ns?.remove();
  });

  /** Runs `tamper`, waits for the repair: one batch, no read of any kind, the followed part exact again. */
  async function repairOf(tamper: () => void | Promise<void>): Promise<{ r: RepairReport; ops: string[] }> {
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    await keeper.idle();
    const d0 = await dumps(keeper);
    const reads0 = host.elementReads;
    const batches0 = host.batches.length;
    const repaired = nextRepair(keeper, 20_000);
    await tamper();
    const r = await repaired;
    await keeper.idle();
    expect(await dumps(keeper)).toBe(d0);
    expect(host.elementReads).toBe(reads0);  // no element dump to plan or verify it
    expect(host.batches.length).toBe(batches0 + 1);
    await until('the followed part to learn its own commit', () => keeper.followState()?.exact === true && keeper.followState()!.generation === r.generation);
    expect(keeper.state.view.elementsDiffering('ip', 'kp', 'service-ips')).toBe(0);
    return { r, ops: host.batches.at(-1)!.map(opText) };
  }

  it('a foreign element deletion is repaired by adding that element back, alone', async () => {
    const { r, ops } = await repairOf(() => { ns.nft(`delete element ip kp service-ips { ${ip(4321)} . tcp . ${80 + (4321 % 3)} }`); });
    expect(ops).toEqual([`add element kp service-ips ${keyOf(4321)}:goto svc-1`]);
    expect(r.ops).toBe(1);
    expect(r.drift[0]!.detail).toMatch(/map service-ips: 1 kernel elements to add, 0 to delete; repair from events/);
    const k = await kernel();
    expect(k.size).toBe(N);
    expect(k.get(keyOf(4321))).toBe('goto svc-1');
  });

  it('a foreign element is deleted, alone', async () => {
    const { ops } = await repairOf(() => { ns.nft('add element ip kp service-ips { 192.0.2.1 . udp . 53 : goto svc-3 }'); });
    expect(ops).toEqual(['delete element kp service-ips c00002011100000000350000']);
    expect((await kernel()).size).toBe(N);
  });

  it('an element whose verdict a foreign commit changed gets its own back: its delete and add in one batch', async () => {
    const e = `${ip(777)} . tcp . ${80 + (777 % 3)}`;
    const { ops } = await repairOf(() => {
      ns.nft(`delete element ip kp service-ips { ${e} }; add element ip kp service-ips { ${e} : goto svc-9 }`);
    });
    expect(ops).toEqual([`delete element kp service-ips ${keyOf(777)}`, `add element kp service-ips ${keyOf(777)}:goto svc-7`]);
    expect((await kernel()).get(keyOf(777))).toBe('goto svc-7');
  });

  it('a reload that changes one element and adds one commits just those element ops, reading nothing', async () => {
    const next = kpConfig((els) => {
      els[123] = elem(123, 5);
      els.push('192.0.2.7 . tcp . 443 : goto svc-2');
    });
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    const d0 = await dumps(keeper);
    const reads0 = host.elementReads;
    const batches0 = host.batches.length;
    const repaired = nextRepair(keeper, 20_000);
    await keeper.setConfig(next);
    const r = await repaired;
    expect(r.cause).toBe('reload');
    expect(await dumps(keeper)).toBe(d0);
    expect(host.elementReads).toBe(reads0);
    expect(host.batches.slice(batches0).map((b) => b.map(opText))).toEqual([[
      `delete element kp service-ips ${keyOf(123)}`,
      `add element kp service-ips ${keyOf(123)}:goto svc-5,c00002070600000001bb0000:goto svc-2`,
    ]]);
    const k = await kernel();
    expect(k.size).toBe(N + 1);
    expect(k.get(keyOf(123))).toBe('goto svc-5');
    expect(k.get('c00002070600000001bb0000')).toBe('goto svc-2');
    await until('the followed part to learn the reload commit', () => keeper.followState()?.exact === true && keeper.followState()!.generation === r.generation);
    // And a foreign deletion after it is repaired against the new desired state.
    const { ops } = await repairOf(() => { ns.nft(`delete element ip kp service-ips { ${ip(123)} . tcp . ${80 + (123 % 3)} }`); });
    expect(ops).toEqual([`add element kp service-ips ${keyOf(123)}:goto svc-5`]);
  });

  it('a foreign flush of the map (more events than a batch keeps) is repaired from a full read', async () => {
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    await keeper.idle();
    const reads0 = host.elementReads;
    const reasons: (string | undefined)[] = [];
    const onFollowed = (m: { exact: boolean; reason?: string }) => { if (!m.exact) reasons.push(m.reason); };
    keeper.on('followed', onFollowed);
    const repaired = nextRepair(keeper, 30_000);
    ns.nft('flush map ip kp service-ips');
    await repaired;
    keeper.off('followed', onFollowed);
    expect(reasons[0]).toMatch(/more events than a batch keeps/);
    expect(host.elementReads).toBeGreaterThan(reads0);
    await until('every element back', async () => (await kernel()).size === N + 1);
    await until('the followed part to be seeded again', () => keeper.followState()?.exact === true);
  });
});

describe('the followed elements gives way on a gap in the events', () => {
  it('after ENOBUFS, a deleted element is repaired from a full read, and the followed part is seeded again', async () => {
    const ns = createNetns('followelgap');
    const sock = open({ netns: ns.path });
    // A receive buffer this small overflows on any big commit: ENOBUFS, a gap in the generations.
    const host = countingHost(ns, 4096);
    const keeper = await startKeeper(ns, { config: kpConfig(), fight: { threshold: 1e9 }, host });
    try {
      await until('the followed part to be seeded', () => keeper.followState()?.exact === true);
      await keeper.idle();
      const reads0 = host.elementReads;
      const overflows = async () => (await keeper.metrics.overflows.get()).values[0]?.value ?? 0;
      const o0 = await overflows();
      const flood = `add table ip flood\nflush table ip flood\nadd chain ip flood c\n${Array.from({ length: 5000 }, (_, i) => `add rule ip flood c ip saddr 10.9.${i >> 8}.${i & 255} accept`).join('\n')}\n`;
      const victim = `${ip(42)} . tcp . ${80 + (42 % 3)}`;
      for (let k = 0; k < 20 && (await overflows()) === o0; k++) {
        ns.nft(`${flood}delete element ip kp service-ips { ${victim} }\n`);
        await sleep(50);
        await until('the element back', async () => (await sock.listElements({ family: 'ip', table: 'kp', set: 'service-ips' })).length === N);
      }
      expect(await overflows()).toBeGreaterThan(o0);
      await until('the element back', async () => (await sock.listElements({ family: 'ip', table: 'kp', set: 'service-ips' })).length === N);
      expect(host.elementReads).toBeGreaterThan(reads0);  // the proof was missing: the set was read
      await until('the followed part to be seeded again', () => keeper.followState()?.exact === true);
    } finally {
      await keeper.stop();
      sock.close();
      ns.remove();
    }
  }, 120_000);
});

describe('timed elements', () => {
  const timed = (els: string[]) => parseNftConfig(`table ip tm {
\tset ts {
\t\ttype ipv4_addr
\t\tflags timeout
\t\telements = { ${els.join(', ')} }
\t}
\tchain c {
\t\tip saddr @ts accept
\t}
}
`, 'tm.nft');

  it('a timed element a reload adds is installed; one that expired is not put back', async () => {
    const ns = createNetns('timedel');
    const sock = open({ netns: ns.path });
    const keeper = await startKeeper(ns, { config: timed(['10.0.0.1 timeout 1h', '10.0.0.3 timeout 2s']), fight: { threshold: 1e9 } });
    const keys = async () => (await sock.listElements({ family: 'ip', table: 'tm', set: 'ts' })).map((e) => e.key).sort();
    try {
      expect(await keys()).toEqual(['0a000001', '0a000003']);
      // The reload adds a timed element to the existing set: it must reach the kernel.
      await keeper.setConfig(timed(['10.0.0.1 timeout 1h', '10.0.0.2 timeout 1h', '10.0.0.3 timeout 2s']));
      await keeper.idle();
      expect(await keys()).toEqual(['0a000001', '0a000002', '0a000003']);
      const [two] = (await sock.listElements({ family: 'ip', table: 'tm', set: 'ts' })).filter((e) => e.key === '0a000002');
      expect(two!.timeout).toBe(3_600_000);
      // 10.0.0.3 expires (the kernel removes it, without an event); a pass leaves it gone.
      await until('10.0.0.3 to expire', async () => !(await keys()).includes('0a000003'), 20_000);
      ns.nft('add rule ip tm c counter');  // a foreign change: a pass runs and reads the table
      await until('the foreign rule to go', () => !ns.nft('list chain ip tm c').includes('counter'));
      await keeper.idle();
      expect(await keys()).toEqual(['0a000001', '0a000002']);
      // Dropped from the config and given again, a timed element is installed again.
      await keeper.setConfig(timed(['10.0.0.1 timeout 1h']));
      await keeper.setConfig(timed(['10.0.0.1 timeout 1h', '10.0.0.3 timeout 1h']));
      await keeper.idle();
      expect(await keys()).toEqual(['0a000001', '0a000003']);
    } finally {
      await keeper.stop();
      sock.close();
      ns.remove();
    }
  }, 60_000);
});
