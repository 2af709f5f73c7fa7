/**
 * The restart record (src/keeper/record.ts) on the real kernel. A keeper that verified its tables
 * by a read writes the record at stop; the next keeper, finding it matching (same boot, namespace,
 * generation, desired state, version), adopts the tables without reading a rule and writes
 * nothing, and still repairs a deleted rule from the events. Every way the record can fail to
 * match (a foreign commit while no keeper ran, another config, another namespace, another boot,
 * another version, a record cut short or corrupt at any byte, one others may write, none) takes
 * the ordinary start-up: the tables are read, and the kernel ends as desired.
 */
import { chmodSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { loadConfigCached } from '../../src/config/compile-cache.js';
import { runNow } from '../../src/base/sliced.js';
import { compactAsCompiled } from '../../src/model/compact.js';
import { ruleCount, rulesMade } from '../../src/model/desired.js';
import { checkOnce, type Keeper } from '../../src/keeper/keeper.js';
import { compileOwner } from '../../src/owners/spec.js';
import { readRecord, recordPathOf, writeRecord, type RestartRecord } from '../../src/keeper/record.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { open } from '../../src/netlink/socket.js';
import { countingHost, observedHost, startKeeper } from '../helpers/keeper.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';
import { damagedCopies } from '../helpers/mutate.js';
import { captureLog, chainLines, handles, postroutingYaml } from './helpers.js';

const RULES = [
  ...Array.from({ length: 20 }, (_, i) => `ip saddr 10.1.0.${i} ip daddr 192.0.2.1 return`),
  'ip saddr @allowed return',
  'ip daddr != 224.0.0.0/4 masquerade fully-random comment "masq"',
];
// One postrouting chain and a regular one, with a named set the rules look up.
const yaml = (extra: string[] = []) => postroutingYaml('rec', [...RULES, ...extra].map((r) => `'${r}'`), 'post', { side: ['ip daddr 198.51.100.1 return'] })
  .replace('    name: rec\n', '    name: rec\n    sets:\n      - name: allowed\n        type: ipv4_addr\n        elements: [192.0.2.7, 192.0.2.8]\n');
const config = (extra?: string[]): Config => parseConfig(yaml(extra), 'rec.yaml');
const BOOT = '5c1f3b5e-6a0c-4d8e-9a61-2f4b7c9d0e11';

/** The boot id the records are written under, in a file of the test's. */
function bootIdFile(): string {
  const file = join(tempDir('boot'), 'boot_id');
  writeFileSync(file, `${BOOT}\n`);
  return file;
}

/**
 * An earlier keeper installs `config`; its own commit is read back once (as the safety net does),
 * and at stop, verified by that read, it writes the record.
 */
async function installRecorded(ns: Netns, config: Config, record: Parameters<typeof startKeeper>[1]['record']): Promise<void> {
  const first = await startKeeper(ns, { config, record });
  await first.readBack('tick', performance.now(), true);
  await first.idle();
  await first.stop();
}

describe('the restart record', { timeout: 120_000 }, () => {
  const { ns, sock } = socketPerTest('record');
  let dir: string;
  let bootFile: string;
  let keeper: Keeper | undefined;
  const record = (version = 'test') => ({ dir, version, bootIdPath: bootFile });
  const fileOf = (netns = ns.path) => recordPathOf(dir, netns, config().tables);

  beforeEach(async () => {
    dir = tempDir('record');
    bootFile = bootIdFile();
    await installRecorded(ns, config(), record());
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  /** A keeper on `ns` with the record, counting its rule reads; its log captured. */
  async function restart(o: { config?: Config; version?: string; netns?: Netns } = {}) {
    const host = countingHost(o.netns ?? ns);
    const log = captureLog();
    keeper = await startKeeper(o.netns ?? ns, { config: o.config ?? config(), record: record(o.version), host, logger: log.logger });
    await keeper.idle();
    const said = log.lines.find((l) => String(l.msg).startsWith('restart record'));
    return { host, said: `${String(said?.msg)}: ${String(said?.why ?? '')}` };
  }

  /** The kernel holds `c` exactly: a decoding one-shot read finds no drift. */
  const asDesired = (c: Config, netns = ns): Promise<void> => asDesiredIn(netns, c);

  it('matching: no rule read, nothing written; a rule deleted afterwards is put back from the events', async () => {
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const gen = sock.generation();
    const { host, said } = await restart();
    expect(said).toMatch(/^restart record matches the kernel/);
    expect(host.ruleReads).toBe(0);
    expect(sock.generation()).toBe(gen);
    expect(keeper!.isReady()).toBe(true);
    expect(keeper!.followState()?.exact).toBe(true);
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);

    const want = chainLines(ns, 'ip', 'rec', 'post');
    const victim = handles(ns, 'ip', 'rec', 'post')[7]!;
    ns.nft(`delete rule ip rec post handle ${victim}\n`);
    await until('the deleted rule back', () => chainLines(ns, 'ip', 'rec', 'post').length === want.length);
    expect(chainLines(ns, 'ip', 'rec', 'post')).toEqual(want);
    // Repaired from what the events followed: still no rule read.
    expect(host.ruleReads).toBe(0);
    ns.nft('delete element ip rec allowed { 192.0.2.8 }\n');
    await until('the deleted element back', () => ns.exec('nft', ['list', 'set', 'ip', 'rec', 'allowed']).includes('192.0.2.8'));
    await asDesired(config());
  });

  it('a foreign commit while no keeper ran: the generation moved, the tables are read and repaired', async () => {
    ns.nft(`delete rule ip rec post handle ${handles(ns, 'ip', 'rec', 'post')[3]!}\n`);
    const { host, said } = await restart();
    expect(said).toMatch(/^restart record not used.*generation moved/);
    expect(host.ruleReads).toBeGreaterThan(0);
    await asDesired(config());
  });

  it('another config: the desired state differs, the tables are read and the new rule installed', async () => {
    const next = config(['ip daddr 198.51.100.9 return']);
    const { host, said } = await restart({ config: next });
    expect(said).toMatch(/^restart record not used.*desired state/);
    expect(host.ruleReads).toBeGreaterThan(0);
    await asDesired(next);
  });

  it('another namespace: a record moved to where its keeper looks is not used there', async () => {
    const other = createNetns('record-other');
    try {
      // The same ruleset there, and the first namespace's record under the second's name.
      const k = await startKeeper(other, { config: config() });
      await k.stop();
      renameSync(fileOf(), fileOf(other.path));
      const { host, said } = await restart({ netns: other });
      expect(said).toMatch(/^restart record not used.*another network namespace/);
      expect(host.ruleReads).toBeGreaterThan(0);
      await asDesired(config(), other);
    } finally {
      await keeper?.stop();
      keeper = undefined;
      other.remove();
    }
  });

  it('the namespace deleted under the keeper: the record at stop still names the one it was opened in, and nothing is warned', async () => {
    const other = createNetns('record-gone');
    try {
      const log = captureLog();
      keeper = await startKeeper(other, { config: config(), record: record(), logger: log.logger });
      await keeper.idle();
      const id = statSync(other.path);
      // A repair moves the generation past what the ready-time record holds: the stop writes again.
      const want = chainLines(other, 'ip', 'rec', 'post');
      other.nft(`delete rule ip rec post handle ${handles(other, 'ip', 'rec', 'post')[2]!}\n`);
      await until('the deleted rule back', () => chainLines(other, 'ip', 'rec', 'post').length === want.length);
      await keeper.idle();
      const file = fileOf(other.path);
      const s = open({ netns: other.path });
      const gen = s.generation();
      s.close();
      other.remove();
      await keeper.stop();
      keeper = undefined;
      expect(log.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
      const read = readRecord(file, dir);
      expect('record' in read && read.record).toMatchObject({ generation: gen, netns: { dev: id.dev, ino: id.ino } });
    } finally {
      await keeper?.stop();
      keeper = undefined;
      other.remove();
    }
  });

  it('another boot and another version: not used', async () => {
    writeFileSync(bootFile, '0d6a2f4e-0000-4000-8000-000000000000\n');
    let r = await restart();
    expect(r.said).toMatch(/^restart record not used.*another boot/);
    expect(r.host.ruleReads).toBeGreaterThan(0);
    await keeper!.stop();
    // That keeper verified by its read and wrote the record anew, for this boot.
    r = await restart({ version: 'other' });
    expect(r.said).toMatch(/^restart record not used.*nfkeeper test, this is other/);
    await asDesired(config());
  });

  it('none, or one others may write: not used', async () => {
    const file = fileOf();
    chmodSync(file, 0o622);
    let r = await restart();
    expect(r.said).toMatch(/^restart record not used.*not trusted.*may be written by others/);
    await keeper!.stop();
    keeper = undefined;
    for (const f of readdirSync(dir)) renameSync(join(dir, f), join(dir, `${f}.gone`));
    r = await restart();
    expect(r.said).toMatch(/^restart record not used.*there is none/);
    expect(r.host.ruleReads).toBeGreaterThan(0);
    await asDesired(config());
  });

  it('written on the tick once a read verified the tables, before any stop (a crash leaves it)', async () => {
    for (const f of readdirSync(dir)) renameSync(join(dir, f), join(dir, `${f}.gone`));
    const log = captureLog();
    keeper = await startKeeper(ns, { config: config(), record: record(), intervalMs: 50, logger: log.logger });
    await until('the record written', () => readdirSync(dir).includes(fileOf().split('/').pop()!));
    expect(readFileSync(fileOf(), 'utf8')).toContain(`"generation":${sock.generation()},`);
  });

  it('a protected table: adopted from the record, and claimed again (the earlier keeper\'s ownership ended with its socket)', async () => {
    const prot = parseConfig(yaml().replace('    name: rec\n', '    name: rec\n    protect: true\n'), 'rec.yaml');
    await restart({ config: prot });
    await keeper!.readBack('tick', performance.now(), true);
    await keeper!.idle();
    await keeper!.stop();
    keeper = undefined;
    const gen = sock.generation();
    const { host, said } = await restart({ config: prot });
    expect(said).toMatch(/^restart record matches the kernel/);
    expect(host.ruleReads).toBe(0);
    // Ownership is the socket's: the new keeper's commit takes it (the one write a restart of a protected table makes).
    expect(sock.generation()).toBe(gen + 1);
    expect(ns.exec('nft', ['list', 'table', 'ip', 'rec'])).toMatch(/flags owner/);
    await asDesired(prot);
  });

  it('cut short or corrupt at any byte: the ordinary start-up, nothing lost, nothing written', { timeout: 600_000 }, async () => {
    // A small record: one chain of one rule (the table's other chains and its set go with the first start).
    const tiny = parseConfig(postroutingYaml('rec', ['ip daddr 192.0.2.1 return']), 'tiny.yaml');
    await restart({ config: tiny });
    await keeper!.readBack('tick', performance.now(), true);
    await keeper!.idle();
    await keeper!.stop();
    keeper = undefined;
    const file = fileOf();
    const whole = readFileSync(file);
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const gen = sock.generation();
    // Cut at every offset of a small record, and one byte changed at every offset of it.
    const variants = damagedCopies(whole);
    const reasons = new Set<string>();
    for (const [what, bytes] of variants) {
      writeFileSync(file, bytes, { mode: 0o600 });
      const { said } = await restart({ config: tiny });
      expect(said, what).toMatch(/^restart record not used/);
      reasons.add(said.replace(/ \(.*$/, '').replace(/\/[^ ]*/g, 'FILE'));
      expect(keeper!.isReady(), what).toBe(true);
      expect(sock.generation(), what).toBe(gen);
      await keeper!.stop();
      keeper = undefined;
    }
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);
    expect([...reasons].join('\n')).toMatch(/cut short or corrupt/);
    // After all that, the record the last keeper wrote is whole again and used.
    const { said, host } = await restart({ config: tiny });
    expect(said).toMatch(/^restart record matches the kernel/);
    expect(host.ruleReads).toBe(0);
  });
});

/**
 * The record written at ready, not verified (src/keeper/record.ts): a start from empty installs by
 * its own commit, which no read has verified yet; its record says so, and a start that adopts it
 * reads the tables back trustOwnCommitMs later, catches a rule the kernel holds otherwise than the
 * record says, and then rewrites the record as verified. A record of format 1 (written only after a
 * read) is adopted as verified, as before.
 */
describe('the record written at ready, before the read-back', { timeout: 120_000 }, () => {
  const { ns, sock } = socketPerTest('record-early');
  let dir: string;
  let bootFile: string;
  let keeper: Keeper | undefined;
  const record = () => ({ dir, version: 'test', bootIdPath: bootFile });
  const fileOf = () => recordPathOf(dir, ns.path, config().tables);
  const recorded = (): RestartRecord => {
    const r = readRecord(fileOf(), dir);
    if ('why' in r) throw new Error(r.why);
    return r.record;
  };
  /** Replaces the record's body (sealed anew, as nfkeeper writes it). */
  const rewrite = (f: (r: RestartRecord) => object) => writeRecord(fileOf(), dir, f(recorded()) as RestartRecord);

  beforeEach(() => {
    dir = tempDir('record-early');
    bootFile = bootIdFile();
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  /** A start from empty, stopped before any read-back: the record it wrote at ready. */
  async function install(): Promise<RestartRecord> {
    const first = await startKeeper(ns, { config: config(), record: record() });
    await until('the record written', () => readdirSync(dir).includes(fileOf().split('/').pop()!));
    await first.stop();
    return recorded();
  }

  /** A keeper on `ns` with the record and a short trustOwnCommitMs, counting its rule reads. */
  async function restart(trustOwnCommitMs: number) {
    const host = countingHost(ns);
    const log = captureLog();
    keeper = await startKeeper(ns, { config: config(), record: record(), host, logger: log.logger, intervalMs: 50, trustOwnCommitMs });
    const line = log.lines.find((l) => String(l.msg).startsWith('restart record'));
    return { host, line: line!, readsAtReady: host.ruleReads };
  }

  it('written right after the install, marked not verified, every table with the kernel\'s handles', async () => {
    const gen = sock.generation();
    const r = await install();
    // The install's own commit, nothing read: what the view followed of it is the whole record.
    expect(r.format).toBe(2);
    expect(r.verified).toBe(false);
    expect(sock.generation()).toBe(gen + 1);
    expect(r.generation).toBe(gen + 1);
    expect(r.tables.map((t) => `${t.family} ${t.name}`)).toEqual(['ip rec']);
    const chains = Object.fromEntries(r.tables[0]!.chains.map((c) => [c.name, c.handles]));
    expect(chains.post).toEqual(handles(ns, 'ip', 'rec', 'post'));
    expect(chains.side).toEqual(handles(ns, 'ip', 'rec', 'side'));
  });

  it('adopted with no rule read and nothing written; read back trustOwnCommitMs later, then rewritten as verified', async () => {
    const r = await install();
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const { host, line, readsAtReady } = await restart(400);
    expect(String(line.msg)).toMatch(/^restart record matches the kernel/);
    expect(line.verified).toBe(false);
    expect(readsAtReady).toBe(0);
    expect(keeper!.isReady()).toBe(true);
    await until('the read-back', () => host.ruleReads > 0, 10_000);
    await until('the record rewritten as verified', () => recorded().verified, 10_000);
    expect(recorded().generation).toBe(r.generation);
    expect(sock.generation()).toBe(r.generation);
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);
    // Verified now: the next start adopts it and reads nothing back.
    await keeper!.stop();
    const again = await restart(200);
    expect(again.line.verified).toBe(true);
    await new Promise((res) => setTimeout(res, 800));
    expect(again.host.ruleReads).toBe(0);
  });

  /**
   * Installs, replaces one rule in place (same handle) and makes the record claim the generation
   * after it: what a kernel holding a rule otherwise than it was sent looks like to the record.
   */
  async function installAndReplace(): Promise<{ want: string[]; gen: number }> {
    await install();
    const want = chainLines(ns, 'ip', 'rec', 'post');
    const h = handles(ns, 'ip', 'rec', 'post')[4]!;
    ns.nft(`replace rule ip rec post handle ${h} ip saddr 10.1.9.9 ip daddr 192.0.2.1 return\n`);
    const gen = sock.generation();
    rewrite((r) => ({ ...r, generation: gen }));
    return { want, gen };
  }

  it('a rule the kernel holds otherwise than the record says, at its generation: the read-back finds it and puts it back', async () => {
    const { want, gen } = await installAndReplace();
    const { host, line, readsAtReady } = await restart(400);
    expect(String(line.msg)).toMatch(/^restart record matches the kernel/);
    expect(readsAtReady).toBe(0);
    expect(sock.generation()).toBe(gen);
    await until('the rule put back', () => chainLines(ns, 'ip', 'rec', 'post').join('\n') === want.join('\n'), 10_000);
    expect(host.ruleReads).toBeGreaterThan(0);
    await asDesiredIn(ns, config());
  });

  it('the installing keeper rewrites it as verified once its own read-back verified the tables', async () => {
    const log = captureLog();
    keeper = await startKeeper(ns, { config: config(), record: record(), intervalMs: 50, trustOwnCommitMs: 400, logger: log.logger });
    await until('the record written', () => readdirSync(dir).includes(fileOf().split('/').pop()!));
    expect(recorded().verified).toBe(false);
    const gen = sock.generation();
    await until('the record rewritten as verified', () => recorded().verified, 10_000);
    expect(recorded().generation).toBe(gen);
  });

  it('a read-back under way verifies nothing: a record is not marked verified before it ends, nor at a generation it found wrong', async () => {
    const { want, gen } = await installAndReplace();
    // Each digest dump's answer held back 400 ms (the socket free meanwhile, as while a big chain's
    // digests are compared by turns): the ticks (50 ms) come in the middle of the read-back.
    const host = observedHost(ns, ['listRuleDigests'], () => undefined,
      (_m, _a, result) => (result as Promise<unknown>).then(async (v) => { await new Promise((res) => setTimeout(res, 400)); return v; }));
    const seen: string[] = [];
    const watch = setInterval(() => {
      try {
        const r = recorded();
        const state = `${r.generation} ${r.verified}`;
        if (seen.at(-1) !== state) seen.push(state);
      } catch { /* being replaced */ }
    }, 10);
    try {
      keeper = await startKeeper(ns, { config: config(), record: record(), host, intervalMs: 50, trustOwnCommitMs: 200 });
      await until('the rule put back', () => chainLines(ns, 'ip', 'rec', 'post').join('\n') === want.join('\n'), 15_000);
      // The repair's own read-back (200 ms on, its dump held 400 ms) and a tick after it.
      await new Promise((res) => setTimeout(res, 1500));
      expect(seen, seen.join(', ')).not.toContain(`${gen} true`);
      await until('a verified record after the repair', () => recorded().verified && recorded().generation > gen, 15_000);
    } finally {
      clearInterval(watch);
    }
  });

  it('a rule changed by nft after the install\'s record: the generation moved, not adopted; read and put back', async () => {
    await install();
    const want = chainLines(ns, 'ip', 'rec', 'post');
    const h = handles(ns, 'ip', 'rec', 'post')[4]!;
    ns.nft(`replace rule ip rec post handle ${h} ip saddr 10.1.9.9 ip daddr 192.0.2.1 return\n`);
    const { host, line } = await restart(60_000);
    expect(`${String(line.msg)}: ${String(line.why)}`).toMatch(/^restart record not used.*generation moved/);
    expect(host.ruleReads).toBeGreaterThan(0);
    expect(chainLines(ns, 'ip', 'rec', 'post')).toEqual(want);
    await asDesiredIn(ns, config());
  });

  it('a record of format 1 (written by an earlier build, only after a read) is adopted as verified: no read-back', async () => {
    await install();
    rewrite(({ verified: _, ...r }) => ({ ...r, format: 1 }));
    const { host, line } = await restart(200);
    expect(String(line.msg)).toMatch(/^restart record matches the kernel/);
    expect(line.verified).toBe(true);
    await new Promise((res) => setTimeout(res, 800));
    expect(host.ruleReads).toBe(0);
  });

  it('a record of format 2 without its mark is not used', async () => {
    await install();
    rewrite(({ verified: _, ...r }) => r);
    const { line } = await restart(60_000);
    expect(`${String(line.msg)}: ${String(line.why)}`).toMatch(/^restart record not used.*corrupt: a field is missing/);
  });
});

/** The kernel holds `c` exactly in `ns`: a decoding one-shot read finds no drift. */
async function asDesiredIn(ns: Netns, c: Config): Promise<void> {
  const s = open({ netns: ns.path });
  try {
    const r = await checkOnce(s, c, false);
    expect(r.drift.flatMap((d) => d.drift)).toEqual([]);
  } finally {
    s.close();
  }
}

/**
 * A restart from the compile cache and the record: the cache gives chains whose rules are made
 * when first read (lateRules), and a restart the record proves in sync only counts and places
 * them. Nothing is written and no rule is made before ready; a deletion right after ready makes
 * the rule it puts back, not its chain; a changed config reloads as usual. More
 * rules than the monitor is armed with (arming.ts plans a repair per rule, so it makes them).
 */
const MANY = Array.from({ length: 300 }, (_, i) => `ip saddr 10.2.${i >> 8}.${i & 255} return`);

/**
 * The set-up of a restart from the compile cache and the record, for the tests of the enclosing
 * describe block: a namespace and its socket per test, a directory holding the config file (`yaml`),
 * the cache and the record, and a boot id file; before each test the config compiled and stored
 * in the cache (`stored`: what an earlier keeper installs); after each, the restarted keeper stopped.
 */
function cachedRestartFixture(name: string, yaml: () => string) {
  const { ns, sock } = socketPerTest(name);
  const fx = {
    ns, sock, dir: '', bootFile: '', configFile: '',
    keeper: undefined as Keeper | undefined,
    stored: undefined as unknown as Config,
    record: () => ({ dir: fx.dir, version: 'test', bootIdPath: fx.bootFile }),
    load: () => loadConfigCached(fx.configFile, { compiled: compactAsCompiled() }, { dir: fx.dir, version: 'test', netns: ns.path }),
    /**
     * A keeper on the config as the cache gives it (and `owners` against it), with the record,
     * counting its rule reads; `said`: its restart record line and why.
     */
    async restart(owners?: (c: Config) => Parameters<typeof startKeeper>[1]['owners']) {
      const loaded = fx.load();
      expect(loaded.cache).toMatchObject({ used: true });
      const host = countingHost(ns);
      const log = captureLog();
      const own = owners?.(loaded.config);
      fx.keeper = await startKeeper(ns, { config: loaded.config, ...(own ? { owners: own } : {}), record: fx.record(), host, logger: log.logger });
      await fx.keeper.idle();
      const line = log.lines.find((l) => String(l.msg).startsWith('restart record'));
      return { host, config: loaded.config, owners: own, said: `${String(line?.msg)}: ${String(line?.why ?? '')}` };
    },
  };
  beforeEach(() => {
    fx.dir = tempDir(name);
    fx.configFile = join(fx.dir, `${name}.yaml`);
    writeFileSync(fx.configFile, yaml());
    fx.bootFile = bootIdFile();
    const compiled = fx.load();
    expect(compiled.cache.used).toBe(false);
    expect(runNow(compiled.store!())).toBeUndefined();
    fx.stored = compiled.config;
  });
  afterEach(async () => {
    await fx.keeper?.stop();
    fx.keeper = undefined;
  });
  return fx;
}

describe('a restart from the compile cache and the record', { timeout: 120_000 }, () => {
  const fx = cachedRestartFixture('late', () => yaml(MANY));
  const { ns, sock } = fx;
  beforeEach(async () => {
    await installRecorded(ns, fx.stored, fx.record());
  });

  /** A keeper on the config as the cache gives it, with the record, counting its rule reads. */
  async function restart(): Promise<{ host: NftHost & { ruleReads: number }; config: Config }> {
    const r = await fx.restart();
    expect(r.said).toMatch(/^restart record matches the kernel/);
    return r;
  }

  const chainsMade = (c: Config) => c.tables.flatMap((t) => t.chains.map((x) => `${x.name}: ${rulesMade(x)}`));

  it('in sync: nothing written, no rule read, no desired rule made', async () => {
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const gen = sock.generation();
    const { host, config: c } = await restart();
    expect(fx.keeper!.isReady()).toBe(true);
    expect(fx.keeper!.followState()?.exact).toBe(true);
    expect(host.ruleReads).toBe(0);
    expect(sock.generation()).toBe(gen);
    expect(chainsMade(c)).toEqual(['post: false', 'side: false']);
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);
  });

  /** The kernel's netlink form of the ruleset, each rule's handle and position (nft's `family table chain HANDLE [POSITION]` line) numbered in order instead. */
  const netlinkForm = () => {
    let k = 0;
    return ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']).replace(/^(ip rec \S+) \d+(?: \d+)?$/gm, (_, at: string) => `${at} #${k++}`);
  };

  it.each([['first', 0], ['middle', 150], ['last', 299]])('a rule deleted right after ready at the %s place: only that rule made, not its chain; put back as desired', async (_, j) => {
    const { host, config: c } = await restart();
    const want = netlinkForm();
    const lines = chainLines(ns, 'ip', 'rec', 'post');
    const victim = handles(ns, 'ip', 'rec', 'post')[j]!;
    ns.nft(`delete rule ip rec post handle ${victim}\n`);
    await until('the deleted rule back', () => chainLines(ns, 'ip', 'rec', 'post').length === lines.length);
    await fx.keeper!.idle();
    expect(chainLines(ns, 'ip', 'rec', 'post')).toEqual(lines);
    // The same expressions, userdata and order, byte for byte but for the handles.
    expect(netlinkForm()).toBe(want);
    expect(handles(ns, 'ip', 'rec', 'post')[j]).not.toBe(victim);
    expect(host.ruleReads).toBe(0);
    expect(chainsMade(c)).toEqual(['post: false', 'side: false']);
    // A second deletion beside it, the chain still not made: put back too.
    const next = handles(ns, 'ip', 'rec', 'post')[j === 299 ? 298 : j + 1]!;
    ns.nft(`delete rule ip rec post handle ${next}\n`);
    await until('the second rule back', () => chainLines(ns, 'ip', 'rec', 'post').length === lines.length);
    await fx.keeper!.idle();
    expect(netlinkForm()).toBe(want);
    expect(chainsMade(c)).toEqual(['post: false', 'side: false']);
    // (A one-shot check of the same config reads, so makes, its chains.)
    await asDesired(c);
    await asDesired(config(MANY));
  });

  it('a changed config reloads: the new rule added, every other rule kept at its handle', async () => {
    await restart();
    const kept = handles(ns, 'ip', 'rec', 'post');
    writeFileSync(fx.configFile, yaml([...MANY, 'ip daddr 198.51.100.9 return']));
    const next = fx.load();
    expect(next.cache).toMatchObject({ used: false, why: expect.stringMatching(/changed/) });
    await fx.keeper!.setConfig(next.config);
    await fx.keeper!.idle();
    await asDesired(config([...MANY, 'ip daddr 198.51.100.9 return']));
    const now = handles(ns, 'ip', 'rec', 'post');
    expect(now.slice(0, kept.length)).toEqual(kept);
    expect(now.length).toBe(kept.length + 1);
  });

  /** The kernel holds `c` exactly: a decoding one-shot read finds no drift. */
  async function asDesired(c: Config): Promise<void> {
    const s = open({ netns: ns.path });
    try {
      const r = await checkOnce(s, c, false);
      expect(r.drift.flatMap((d) => d.drift)).toEqual([]);
    } finally {
      s.close();
    }
  }
});

describe('a restart with owners from the compile cache and the record', { timeout: 120_000 }, () => {
  // A chain of some thousands of rules, from the cache; owners' chains and their jumps in `side`.
  const BIG = Array.from({ length: 3000 }, (_, i) => `ip saddr 10.3.${i >> 8}.${i & 255} return`);
  const ownersYaml = () => `${yaml(BIG)}owners:\n  family: ip\n  table: rec\n  dispatch: [side]\n  socket: /nonexistent/s\n  state: /nonexistent/o.json\n`;
  const spec = (n: number, port = 80) => ({ chains: [{ name: 'c', rules: [`ip daddr 192.0.2.${n} tcp dport ${port} accept`] }], jumps: { side: [`ip saddr 10.9.0.${n} jump c`] } });
  /** The owners `ids` (the n-th with spec(n)) as a start compiles them from the state file, against `c`. */
  const ownersOf = (c: Config, ids: string[], port?: number) => ids.map((id, n) => compileOwner(id, spec(n + 1, port), c.owners!, c.tables[0]!));
  const fx = cachedRestartFixture('own', ownersYaml);
  const { ns, sock } = fx;

  beforeEach(async () => {
    // An earlier keeper with owners a and b installs, reads its commit back and records at stop.
    const first = await startKeeper(ns, { config: fx.stored, owners: ownersOf(fx.stored, ['a', 'b']), record: fx.record() });
    await first.readBack('tick', performance.now(), true);
    await first.idle();
    await first.stop();
  });

  /** A keeper on the config as the cache gives it and the owners `ids`, with the record, counting its rule reads. */
  const restart = (ids: string[], port?: number) => fx.restart((c) => ownersOf(c, ids, port));

  it('the same owners: adopted with nothing written and no rule read, no rule of the cached chain made', async () => {
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const gen = sock.generation();
    const { host, config: c, said } = await restart(['a', 'b']);
    expect(said).toMatch(/^restart record matches the kernel/);
    expect(fx.keeper!.isReady()).toBe(true);
    expect(host.ruleReads).toBe(0);
    expect(sock.generation()).toBe(gen);
    // The chains as the cache gave them: not made, nor the dispatch chain with the owners' jumps
    // (its config rules joined to them late).
    expect(rulesMade(c.tables[0]!.chains.find((x) => x.name === 'post')!)).toBe(false);
    expect(rulesMade(c.tables[0]!.chains.find((x) => x.name === 'side')!)).toBe(false);
    const side = fx.keeper!.state.desired[0]!.chains.find((x) => x.name === 'side')!;
    expect([rulesMade(side), ruleCount(side)]).toEqual([false, 3]);
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);
  });

  it.each([
    ['registered', ['a', 'b', 'c'], undefined],
    ['removed', ['a'], undefined],
    ['registered anew with other rules', ['a', 'b'], 443],
  ])('an owner %s while no keeper ran: the record is refused, the tables read, the kernel as the owners are now', async (_, ids, port) => {
    const { host, config: c, owners, said } = await restart(ids, port);
    expect(said).toBe('restart record not used; the start-up reads the owned tables: the desired state (config or owners) changed since it was written');
    expect(host.ruleReads).toBeGreaterThan(0);
    const s = open({ netns: ns.path });
    try {
      const r = await checkOnce(s, c, false, owners!);
      expect(r.drift.flatMap((d) => d.drift)).toEqual([]);
    } finally {
      s.close();
    }
    expect(ns.exec('nft', ['list', 'chains', 'ip']).includes('o/c/c')).toBe(ids.includes('c'));
    expect(ns.exec('nft', ['list', 'chains', 'ip']).includes('o/b/c')).toBe(ids.includes('b'));
  });
});
