import { afterEach, describe, expect, it } from 'vitest';
import { Keeper, cleanup } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import { open } from '../../src/netlink/socket.js';
import { withKeeper } from '../helpers/keeper.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { sleep } from '../helpers/wait.js';
import { withSocket } from '../netlink/fixtures.js';
import { FLANNEL_RULES, FLANNEL_YAML, captureLog, chainLines, flannelConfig, handles, nextRepair, startKeeper } from './helpers.js';

const CHAIN = ['ip', 'nfkeeper', 'postrouting'] as const;

describe('keeper on the real kernel', () => {
  const { ns, sock } = socketPerTest('keeper');
  let keeper: Keeper | undefined;

  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  it('installs the desired rules in order at start-up', async () => {
    keeper = await startKeeper(ns);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    expect(keeper.isReady()).toBe(true);
  });

  it('adopts a correct existing ruleset without writing anything', async () => {
    ns.nft(`add table ip nfkeeper
add chain ip nfkeeper postrouting { type nat hook postrouting priority srcnat; policy accept; }
${FLANNEL_RULES.map((r) => `add rule ip nfkeeper postrouting ${r}`).join('\n')}
`);
    const before = sock.generation();
    const h = handles(ns, ...CHAIN);
    keeper = await startKeeper(ns);
    expect(sock.generation()).toBe(before);
    expect(handles(ns, ...CHAIN)).toEqual(h);
    // Every cause is exported from the start, and all of them are still 0.
    const repairs = (await keeper.metrics.repairs.get()).values;
    expect(repairs.length).toBeGreaterThan(0);
    expect(repairs.filter((v) => v.value !== 0)).toEqual([]);
  });

  const tamperings: [string, (h: number[]) => string][] = [
    ['a deleted rule', (h) => `delete rule ip nfkeeper postrouting handle ${h[1]}`],
    ['a deleted first rule', (h) => `delete rule ip nfkeeper postrouting handle ${h[0]}`],
    ['a foreign rule inserted first', () => 'insert rule ip nfkeeper postrouting ip saddr 192.0.2.1 accept'],
    ['a foreign rule appended', () => 'add rule ip nfkeeper postrouting counter'],
    ['a rule changed in place', (h) => `replace rule ip nfkeeper postrouting handle ${h[2]} ip saddr != 10.244.0.0/16 ip daddr 10.244.2.0/24 return`],
    ['reordered rules', (h) => `delete rule ip nfkeeper postrouting handle ${h[0]}\nadd rule ip nfkeeper postrouting ${FLANNEL_RULES[0]}`],
    ['a flushed chain', () => 'flush chain ip nfkeeper postrouting'],
    ['a deleted chain', () => 'flush chain ip nfkeeper postrouting\ndelete chain ip nfkeeper postrouting'],
    ['a changed base chain', () => 'delete chain ip nfkeeper postrouting\nadd chain ip nfkeeper postrouting { type nat hook postrouting priority 50; }'],
    ['an extra chain', () => 'add chain ip nfkeeper intruder'],
    ['a deleted table', () => 'delete table ip nfkeeper'],
    ['nft flush ruleset', () => 'flush ruleset'],
  ];

  for (const [what, script] of tamperings) {
    it(`repairs ${what} through the event path, in exact order`, async () => {
      keeper = await startKeeper(ns);  // the tick is an hour: only events can trigger this repair
      const repaired = nextRepair(keeper);
      ns.nft(script(handles(ns, ...CHAIN)));
      const r = await repaired;
      await keeper.idle();
      expect(r.cause).toBe('event');
      expect(r.drift.length).toBeGreaterThan(0);
      expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
      expect(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper'])).not.toMatch(/intruder/);
      expect(ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting'])).toMatch(/priority srcnat/);
    });
  }

  it('repairs through the 1 Hz generation check when events are off', async () => {
    keeper = await startKeeper(ns, { events: false, intervalMs: 100 });
    const repaired = nextRepair(keeper);
    ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, ...CHAIN)[0]}`);
    const r = await repaired;
    expect(r.cause).toBe('tick');
    await keeper.idle();
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
  });

  it('does not dump or log on ticks when nothing changed, and logs one line per repair', async () => {
    const log = captureLog();
    keeper = await startKeeper(ns, { events: false, intervalMs: 20, logger: log.logger });
    const dumps = (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;
    const startLines = log.lines.length;
    await sleep(300);
    expect((await keeper.metrics.ticks.get()).values[0]!.value).toBeGreaterThan(5);
    expect((await keeper.metrics.dumps.get()).values[0]?.value ?? 0).toBe(dumps);
    expect(log.lines.length).toBe(startLines);
    const repaired = nextRepair(keeper);
    ns.nft('flush chain ip nfkeeper postrouting');
    await repaired;
    await sleep(200);
    const repairs = log.lines.slice(startLines);
    expect(repairs).toHaveLength(1);
    expect(repairs[0]).toMatchObject({ msg: 'repaired', cause: 'tick' });
    expect(repairs[0]!.drift).toEqual([expect.stringMatching(/rule 1 .* is missing/)]);
    expect(typeof repairs[0]!.latencyMs).toBe('number');
  });

  it('does not count its own commits as tampering', async () => {
    keeper = await startKeeper(ns);
    const events = (await keeper.metrics.events.get()).values[0]?.value ?? 0;
    ns.nft('flush chain ip nfkeeper postrouting');
    await nextRepair(keeper);
    await keeper.idle();
    await sleep(100);
    // One wake-up for the foreign flush; none for the repair that followed.
    expect((await keeper.metrics.events.get()).values[0]!.value).toBe(events + 1);
  });

  it('retries from a fresh read when the ruleset moves between read and commit', async () => {
    // The full pass's guard: without the followed part (seeded from the install, it would repair
    // from the events, by the monitor's armed reaction).
    keeper = await startKeeper(ns, { follow: false });
    const s = keeper.socket!;
    const realCommit = s.commit.bind(s);
    let interfered = false;
    s.commit = async (batch, options) => {
      if (!interfered) {
        interfered = true;
        ns.nft('add table ip bystander');  // moves the generation under the keeper's feet
      }
      return realCommit(batch, options);
    };
    const repaired = nextRepair(keeper);
    ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, ...CHAIN)[3]}`);
    const r = await repaired;
    expect(interfered).toBe(true);
    expect(r.attempts).toBeGreaterThan(1);
    expect((await keeper.metrics.generationRetries.get()).values[0]!.value).toBeGreaterThanOrEqual(1);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    expect(ns.exec('nft', ['list', 'tables'])).toMatch(/bystander/);
  });

  it('leaves its rules in place when it stops, and cleanup removes every trace', async () => {
    ns.nft('add table ip foreign\nadd chain ip foreign c\nadd rule ip foreign c counter accept');
    const foreign = ns.exec('nft', ['list', 'table', 'ip', 'foreign']);
    keeper = await startKeeper(ns);
    await keeper.stop();
    keeper = undefined;
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    expect(await cleanup(sock, flannelConfig())).toEqual(['ip nfkeeper']);
    expect(ns.exec('nft', ['list', 'tables']).trim()).toBe('table ip foreign');
    expect(ns.exec('nft', ['list', 'table', 'ip', 'foreign'])).toBe(foreign);
  });

  it('backs off when a neighbour keeps undoing its work, and recovers after', async () => {
    keeper = await startKeeper(ns, { fight: { threshold: 3, windowMs: 5000, baseMs: 50, capMs: 400, quietMs: 500 } });
    const levels: number[] = [];
    keeper.on('fight', (l: number) => levels.push(l));
    let tampers = 0;
    const until = Date.now() + 2500;
    while (Date.now() < until) {
      // Through a socket, not a forked nft: under load an nft exec is slower
      // than the back-off, and the test would measure the load.
      await sock.commit(new Batch().flush('chain', { family: 'ip', table: 'nfkeeper', name: 'postrouting' }))
        .then(() => tampers++, () => undefined /* chain momentarily gone */);
      await sleep(10);
    }
    const repairs = (await keeper.metrics.repairs.get()).values.reduce((a, v) => a + v.value, 0);
    expect(Math.max(...levels)).toBeGreaterThanOrEqual(2);
    expect(repairs).toBeLessThan(tampers);
    // The neighbour has stopped: the rules are back within one back-off step (≤ 400 ms here).
    await sleep(600);
    await keeper.idle();
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    await sleep(700);
    ns.exec('nft', ['list', 'ruleset']);
    await keeper.request('manual', performance.now());
    expect(levels.at(-1)).toBe(0);
  });

  it('a reload during a fight is applied before setConfig returns, not held back by the back-off', async () => {
    // A 10 s back-off step and a minute-long quiet spell: the fight outlasts the test.
    keeper = await startKeeper(ns, { fight: { threshold: 2, windowMs: 60_000, baseMs: 10_000, capMs: 10_000, quietMs: 60_000 } });
    const levels: number[] = [];
    keeper.on('fight', (l: number) => levels.push(l));
    for (let i = 0; i < 100 && !levels.some((l) => l > 0); i++) {
      await sock.commit(new Batch().flush('chain', { family: 'ip', table: 'nfkeeper', name: 'postrouting' }))
        .catch(() => undefined);
      await sleep(50);
    }
    expect(levels.some((l) => l > 0)).toBe(true);
    const extra = 'ip saddr 10.99.0.0/16 masquerade';
    const { parseConfig } = await import('../../src/config/config.js');
    await keeper.setConfig(parseConfig(`${FLANNEL_YAML}          - ${extra}\n`, 'reload.yaml'));
    expect(chainLines(ns, ...CHAIN)).toEqual([...FLANNEL_RULES, extra]);
  });
});

describe('config reload', () => {
  it('applies a reload that adds a rule, drops a chain and drops a table in one batch', async () => {
    await withKeeper({
      tag: 'reload',
      config: (await import('../../src/config/config.js')).parseConfig(`
tables:
  - family: ip
    name: nfkeeper
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat
        rules: ["ip saddr 10.244.0.0/16 masquerade"]
      - name: extra
        rules: ["return"]
  - family: ip6
    name: nfkeeper6
    chains: []
`),
    }, async ({ ns, keeper }) => {
      const sock = keeper.socket!;
      const gen = sock.generation();
      await keeper.setConfig(flannelConfig());
      await keeper.idle();
      expect(sock.generation()).toBe(gen + 1);  // one transaction
      expect(ns.exec('nft', ['list', 'tables']).trim()).toBe('table ip nfkeeper');
      expect(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper'])).not.toMatch(/chain extra/);
      expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    });
  });
});

describe('config reload refused by the kernel', () => {
  it('keeps the old desired state in force and reports the failure', async () => {
    await withKeeper({ tag: 'reload-refused', config: flannelConfig() }, async ({ ns, keeper }) => {
      const h = handles(ns, ...CHAIN);
      // The kernel refuses more elements than a set's size (ENFILE), which only the commit can tell.
      const refused = (await import('../../src/config/config.js')).parseConfig(`
tables:
  - family: ip
    name: nfkeeper
    sets:
      - name: few
        type: ipv4_addr
        size: 2
        elements: [10.0.0.1, 10.0.0.2, 10.0.0.3]
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat
        rules: ["return"]
`);
      await expect(keeper.setConfig(refused)).rejects.toThrow(/ENFILE|Too many open files/);
      expect((await keeper.metrics.reloadFailed.get()).values[0]!.value).toBe(1);
      expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
      expect(handles(ns, ...CHAIN)).toEqual(h);
      expect(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper'])).not.toMatch(/set few/);
    });
  });
});

describe('observing owned tables', () => {
  it('never lists the family\'s chains while the table holds only what the config names', async () => {
    const { observeTable } = await import('../../src/keeper/observe.js');
    await withSocket(async (sock, ns) => {
      ns.nft(Array.from({ length: 2000 }, (_, i) => `add chain ip foreign c${i}`).join('\n').replace(/^/, 'add table ip foreign\n'));
      await (await import('../../src/keeper/keeper.js')).checkOnce(sock, flannelConfig(), true);
      let listed = 0;
      const real = sock.listChains.bind(sock);
      sock.listChains = (f) => { listed++; return real(f); };
      const seen = await observeTable(sock, 'ip', 'nfkeeper', ['postrouting']);
      expect([...seen.chains.keys()]).toEqual(['postrouting']);
      expect(seen.rules.get('postrouting')).toHaveLength(4);
      expect(listed).toBe(0);
      // An extra chain raises the table's use count, and then the chain list is read.
      ns.nft('add chain ip nfkeeper intruder');
      const again = await observeTable(sock, 'ip', 'nfkeeper', ['postrouting']);
      expect(listed).toBe(1);
      expect([...again.chains.keys()].sort()).toEqual(['intruder', 'postrouting']);
    }, 'observe');
  });
});
