/**
 * Who changed an owned table, on the real kernel: each foreign commit that the keeper repairs is
 * attributed to the process that made it (the NEWGEN's pid and name, then /proc) in the repair's
 * log line, nfkeeper_foreign_changes_total, status() and the events stream, with the repair that
 * answered it. Committers: nft (exited before the keeper looks: pid and name only), iptables-nft,
 * a long-lived process of the test's own (looked up: exe, command line, parent) and a podman
 * container (its id); a process in a transient systemd unit is in test/systemd-boot.test.ts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { main } from '../../src/cli.js';
import type { AttributionEvent, ForeignChange } from '../../src/keeper/attribution.js';
import { sendEvents, serveMetrics } from '../../src/keeper/http.js';
import type { Keeper } from '../../src/keeper/keeper.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { serveControl } from '../../src/owners/api.js';
import { withKeeper } from '../helpers/keeper.js';
import { tempDir } from '../helpers/tmp.js';
import { captureLog, flannelConfig, handles, nextRepair } from './helpers.js';

const COMMITTER = join(PROJECT_ROOT, 'test', 'keeper', 'children', 'committer.ts');
const hasPodman = spawnSync('podman', ['--version']).status === 0;

/** nfkeeper_foreign_changes_total as { "table/comm": value }. */
async function foreignChanges(keeper: Keeper): Promise<Record<string, number>> {
  const m = await keeper.metrics.foreignChanges.get();
  return Object.fromEntries(m.values.map((v) => [`${v.labels.table}/${v.labels.comm}`, v.value]));
}

function repairLines(lines: Record<string, unknown>[]): Record<string, unknown>[] {
  return lines.filter((l) => l.msg === 'repaired');
}

describe('attribution', () => {
  it('nft, gone before the keeper looks: pid and name only, in the log, the metric, status and events', async () => {
    const log = captureLog();
    await withKeeper({ config: flannelConfig(), logger: log.logger, tag: 'attr-nft' }, async ({ ns, keeper }) => {
      const heard: AttributionEvent[] = [];
      keeper.attribution.follow((e) => heard.push(e));
      const victim = handles(ns, 'ip', 'nfkeeper', 'postrouting')[1]!;
      const repaired = nextRepair(keeper);
      // spawnSync holds this thread (the keeper's) until nft has exited and been reaped: the
      // keeper reads its event only afterwards, when /proc has nothing of it.
      const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', 'delete', 'rule', 'ip', 'nfkeeper', 'postrouting', 'handle', String(victim)]);
      expect(r.status).toBe(0);
      const nftPid = r.pid!;
      const report = await repaired;

      const line = repairLines(log.lines).at(-1)!;
      expect(line.by).toEqual({ pid: nftPid, comm: 'nft', unresolved: 'the process had exited before it could be looked up' });
      expect(line.did).toEqual([`delete rule ip nfkeeper postrouting handle ${victim}`]);

      expect(await foreignChanges(keeper)).toEqual({ 'ip nfkeeper/other': 0, 'ip nfkeeper/nft': 1 });

      const [change] = keeper.status().foreignChanges!;
      expect(change!.by).toEqual({ pid: nftPid, comm: 'nft', unresolved: 'the process had exited before it could be looked up' });
      expect(change!.what).toEqual([`delete rule ip nfkeeper postrouting handle ${victim}`]);
      expect(change!.tables).toEqual(['ip nfkeeper']);
      expect(change!.repair).toMatchObject({ generation: report.generation, cause: 'event' });
      expect(change!.repair!.ops).toContainEqual(expect.stringMatching(/^(add|insert|replace) rule ip nfkeeper postrouting/));
      expect(change!.generation).toBe(report.generation - 1);

      expect(heard.map((e) => e.type)).toEqual(['change', 'repair']);
      expect(heard[1]).toMatchObject({ type: 'repair', answered: [change!.generation], generation: report.generation });
    });
  });

  it('a long-lived process of the test\'s own: its executable, command line and parent', async () => {
    const log = captureLog();
    await withKeeper({ config: flannelConfig(), logger: log.logger, tag: 'attr-own' }, async ({ ns, keeper }) => {
      const child = spawn(process.execPath, ['--import', 'tsx', COMMITTER, ns.path], { stdio: ['pipe', 'pipe', 'inherit'] });
      try {
        const out = lines(child.stdout);
        expect(await out.next()).toBe('ready');
        const victim = handles(ns, 'ip', 'nfkeeper', 'postrouting')[0]!;
        const repaired = nextRepair(keeper);
        child.stdin.write(JSON.stringify([{ verb: 'delete', object: 'rule', family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: victim }]) + '\n');
        expect(await out.next()).toBe('ok');
        await repaired;
        const comm = spawnSync('cat', [`/proc/${child.pid}/comm`], { encoding: 'utf8' }).stdout.trim();
        const line = repairLines(log.lines).at(-1)!;
        expect(line.by).toEqual({ pid: child.pid, comm });
        const [change] = keeper.status().foreignChanges!;
        expect(change!.by).toMatchObject({
          pid: child.pid, comm, exe: process.execPath, parent: { pid: process.pid },
          cmdline: `${process.execPath} --import tsx ${COMMITTER} ${ns.path}`,
        });
        expect(change!.by.unresolved).toBeUndefined();
        expect(await foreignChanges(keeper)).toEqual({ 'ip nfkeeper/other': 0, [`ip nfkeeper/${comm}`]: 1 });
        // The TCP port (the node's address in the DaemonSet) leaves the command line out; the rest stays.
        const http = await serveMetrics(keeper, '127.0.0.1:0');
        try {
          const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
          const events = await (await fetch(`${base}/events`)).text();
          const status = await (await fetch(`${base}/status`)).text();
          for (const body of [events, status]) {
            expect(body).toContain(`"exe":${JSON.stringify(process.execPath)}`);
            expect(body).not.toContain('cmdline');
            expect(body).not.toContain(COMMITTER);
          }
        } finally {
          await new Promise((r) => http.close(r));
        }
      } finally {
        child.stdin.end();
        child.kill();
      }
    });
  });

  // The host's root as the container's (an overlay: nothing it writes reaches the host), so node and
  // the committer are there without an image; runc and cgroupfs, as test/image.test.ts runs podman here.
  it.skipIf(!hasPodman)('a podman container: its container id, from the cgroup', async () => {
    const log = captureLog();
    await withKeeper({ config: flannelConfig(), logger: log.logger, tag: 'attr-pod' }, async ({ ns, keeper }) => {
      const dir = tempDir('attr-pod');
      writeFileSync(join(dir, 'containers.conf'), '[containers]\ndefault_ulimits = []\n');
      const name = `nfk-attr-${process.pid}`;
      const heard: AttributionEvent[] = [];
      keeper.attribution.follow((e) => heard.push(e));
      const child = spawn('podman', ['--runtime', 'runc', '--cgroup-manager=cgroupfs', 'run', '-i', '--rm', '--name', name,
        '--cidfile', join(dir, 'cid'), '--network', `ns:${ns.path}`, '--cap-add', 'NET_ADMIN', '-w', PROJECT_ROOT,
        '--rootfs', '/:O', process.execPath, '--import', 'tsx', COMMITTER],
      { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, CONTAINERS_CONF: join(dir, 'containers.conf') } });
      try {
        const out = lines(child.stdout);
        expect(await out.next()).toBe('ready');
        const id = readFileSync(join(dir, 'cid'), 'utf8').trim();
        const victim = handles(ns, 'ip', 'nfkeeper', 'postrouting')[0]!;
        const repaired = nextRepair(keeper);
        child.stdin.write(JSON.stringify([{ verb: 'delete', object: 'rule', family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: victim }]) + '\n');
        expect(await out.next()).toBe('ok');
        await repaired;
        const [change] = keeper.status().foreignChanges!;
        // The name is the committing thread's as the kernel gives it: `node` on Node 20, `MainThread`
        // from Node 24 on, which names its main thread; /proc shows the same for that task.
        const comm = readFileSync(`/proc/${change!.by.pid}/comm`, 'utf8').trim();
        const line = repairLines(log.lines).at(-1)!;
        expect(line.by).toMatchObject({ comm, container: `podman:${id.slice(0, 12)}` });
        expect(change!.by).toMatchObject({ comm, container: { id, runtime: 'podman' }, exe: process.execPath });
        // The kernel's pid is the host's (the initial pid namespace), not the container's.
        expect(change!.by.pid).not.toBe(1);
        expect(readFileSync(`/proc/${change!.by.pid}/cgroup`, 'utf8')).toContain(id);
        expect(heard[0]).toMatchObject({ type: 'change', by: { container: { id } } });
        expect(await foreignChanges(keeper)).toEqual({ 'ip nfkeeper/other': 0, [`ip nfkeeper/${comm}`]: 1 });
      } finally {
        child.stdin.end();
        spawnSync('podman', ['rm', '-f', '-t', '2', name]);
      }
    });
  }, 120_000);

  it('iptables-nft appending to an owned chain: attributed, and its rule deleted', async () => {
    const config = parseConfig(`
tables:
  - family: ip
    name: nat
    chains:
      - name: POSTROUTING
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - ip saddr 10.0.0.0/8 masquerade
`, 'nat.yaml');
    const log = captureLog();
    await withKeeper({ config, logger: log.logger, tag: 'attr-ipt' }, async ({ ns, keeper }) => {
      const heard: AttributionEvent[] = [];
      keeper.attribution.follow((e) => heard.push(e));
      const repaired = nextRepair(keeper);
      ns.exec('iptables-nft', ['-t', 'nat', '-A', 'POSTROUTING', '-s', '192.168.0.0/16', '-j', 'MASQUERADE']);
      await repaired;
      const line = repairLines(log.lines).at(-1)!;
      expect(line.by).toMatchObject({ comm: 'iptables-nft' });
      expect(line.did).toEqual([expect.stringMatching(/^add rule ip nat POSTROUTING handle \d+$/)]);
      const [change] = keeper.status().foreignChanges!;
      expect(change!.by.comm).toBe('iptables-nft');
      expect(change!.repair!.ops).toEqual([expect.stringMatching(/^delete rule ip nat POSTROUTING handle \d+$/)]);
      expect(await foreignChanges(keeper)).toEqual({ 'ip nat/other': 0, 'ip nat/iptables-nft': 1 });
      expect(heard.map((e) => e.type)).toEqual(['change', 'repair']);
      expect(heard[0]).toMatchObject({ type: 'change', by: { comm: 'iptables-nft' }, generation: change!.generation });
    });
  });

  it('a set element, a chain and the table itself: each foreign change attributed, in nft\'s words', async () => {
    const config = parseNftConfig(`table ip nfkeeper {
  set blocked {
    type ipv4_addr
    elements = { 10.0.0.1, 10.0.0.2 }
  }
  chain postrouting {
    type nat hook postrouting priority srcnat;
    ip saddr @blocked return
  }
  chain spare {
    return
  }
}
`, 'objects.nft');
    await withKeeper({ config, tag: 'attr-obj' }, async ({ ns, keeper }) => {
      const heard: AttributionEvent[] = [];
      keeper.attribution.follow((e) => heard.push(e));
      const cases: [string, RegExp][] = [
        ['delete element ip nfkeeper blocked { 10.0.0.2 }', /^delete element ip nfkeeper blocked \{ 0x0a000002 \}$/],
        ['delete chain ip nfkeeper spare', /^delete chain ip nfkeeper spare$/],
        ['delete table ip nfkeeper', /^delete table ip nfkeeper$/],
      ];
      for (const [command, what] of cases) {
        const repaired = nextRepair(keeper);
        const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', command]);
        expect(r.status, command).toBe(0);
        await repaired;
        const [change] = keeper.status().foreignChanges!;
        expect(change!.by, command).toMatchObject({ pid: r.pid, comm: 'nft' });
        expect(change!.what, command).toContainEqual(expect.stringMatching(what));
        expect(change!.repair, command).toBeDefined();
        expect(heard.filter((e) => e.type === 'change').at(-1), command).toMatchObject({ generation: change!.generation });
      }
      expect(await foreignChanges(keeper)).toEqual({ 'ip nfkeeper/other': 0, 'ip nfkeeper/nft': 3 });
    });
  });

  it('a fight warning names the process it is fighting, and nfkeeper_fight_raises_total counts it', async () => {
    const log = captureLog();
    await withKeeper({ config: flannelConfig(), logger: log.logger, fight: { threshold: 2, windowMs: 60_000 }, tag: 'attr-fight' }, async ({ ns, keeper }) => {
      // The start-up commit is no repair toward the fight: the second foreign change raises the level.
      const pids: number[] = [];
      for (let i = 0; i < 2; i++) {
        const repaired = nextRepair(keeper);
        const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', 'delete', 'rule', 'ip', 'nfkeeper', 'postrouting', 'handle',
          String(handles(ns, 'ip', 'nfkeeper', 'postrouting')[0]!)]);
        expect(r.status).toBe(0);
        pids.push(r.pid!);
        await repaired;
      }
      const warn = log.lines.find((l) => /keeps undoing/.test(String(l.msg)))!;
      expect(warn).toBeDefined();
      // The change being answered (perhaps not looked up yet: the warning may come with its repair) and the one before.
      expect((warn.fighting as { pid: number; comm: string }[]).map(({ pid, comm }) => ({ pid, comm })))
        .toEqual([{ pid: pids[1], comm: 'nft' }, { pid: pids[0], comm: 'nft' }]);
      const raises = await keeper.metrics.fightRaises.get();
      expect(raises.values.find((v) => v.labels.comm === 'nft')?.value).toBe(1);
    });
  });

  it('served: /events and /v1/events (then live with ?follow=1), `nfkeeper events`, and the last few in `nfkeeper status`', async () => {
    await withKeeper({ config: flannelConfig(), history: 3, tag: 'attr-srv' }, async ({ ns, keeper }) => {
      const dir = tempDir('attr');
      const control = await serveControl({ path: join(dir, 'control.sock'), status: () => keeper.status(), events: (req, res) => sendEvents(keeper.attribution, req, res) });
      const http = await serveMetrics(keeper, '127.0.0.1:0');
      try {
        // Five foreign changes through a ring of three: the last three are kept.
        for (let i = 0; i < 5; i++) {
          const repaired = nextRepair(keeper);
          ns.exec('nft', ['delete', 'rule', 'ip', 'nfkeeper', 'postrouting', 'handle', String(handles(ns, 'ip', 'nfkeeper', 'postrouting')[0]!)]);
          await repaired;
        }
        expect(keeper.attribution.length).toBe(3);
        const out: string[] = [];
        const io = { out: (s: string) => out.push(s), err: (s: string) => out.push(`ERR ${s}`) };
        expect(await main(['node', 'nfkeeper', 'events', '--socket', control.path, '--json'], io)).toBe(0);
        const listed = out.map((l) => JSON.parse(l) as { type: string } & ForeignChange);
        expect(listed).toHaveLength(3);
        expect(listed.map((c) => c.generation)).toEqual(keeper.attribution.recent(3).map((c) => c.generation).reverse());
        expect(listed.every((c) => c.type === 'change' && c.by.comm === 'nft' && c.repair !== undefined)).toBe(true);

        out.length = 0;
        expect(await main(['node', 'nfkeeper', 'events', '--metrics', `127.0.0.1:${(http.address() as AddressInfo).port}`], io)).toBe(0);
        expect(out).toHaveLength(3);
        expect(out[0]).toMatch(/^change \S+ generation \d+ by nft\[\d+\]: delete rule ip nfkeeper postrouting handle \d+; repaired at generation \d+ in [\d.]+ ms$/);

        out.length = 0;
        expect(await main(['node', 'nfkeeper', 'status', '--socket', control.path], io)).toBe(0);
        expect(out.filter((l) => /^ {2}\S+ generation \d+ by nft\[/.test(l))).toHaveLength(3);

        // Following: the backlog, then a change and its repair as they happen, over both servers.
        for (const to of [{ socketPath: control.path, path: '/v1/events?follow=1' },
          { host: '127.0.0.1', port: (http.address() as AddressInfo).port, path: '/events?follow=1' }]) {
          const got: Record<string, unknown>[] = [];
          await new Promise<void>((resolve, reject) => {
            const req = request({ ...to, method: 'GET' }, (res) => {
              const it = lines(res);
              (async () => {
                for (let i = 0; i < 3; i++) got.push(JSON.parse(await it.next()));
                const victim = handles(ns, 'ip', 'nfkeeper', 'postrouting')[2]!;
                ns.exec('nft', ['delete', 'rule', 'ip', 'nfkeeper', 'postrouting', 'handle', String(victim)]);
                got.push(JSON.parse(await it.next()), JSON.parse(await it.next()));
                req.destroy();
                resolve();
              })().catch(reject);
            });
            req.on('error', reject);
            req.end();
          });
          expect(got.map((e) => e.type)).toEqual(['change', 'change', 'change', 'change', 'repair']);
          expect(got[3]).toMatchObject({ by: { comm: 'nft' }, what: [expect.stringMatching(/^delete rule ip nfkeeper postrouting handle \d+$/)] });
          expect(got[4]).toMatchObject({ answered: [got[3]!.generation], cause: 'event' });
        }
      } finally {
        await control.close();
        await new Promise((r) => http.close(r));
      }
    });
  });
});

/** The lines of a stream, one at a time. */
function lines(stream: NodeJS.ReadableStream): { next(): Promise<string> } {
  const queue: string[] = [];
  let waiter: ((s: string) => void) | undefined;
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (c: string) => {
    rest += c;
    for (let nl = rest.indexOf('\n'); nl >= 0; nl = rest.indexOf('\n')) {
      const l = rest.slice(0, nl);
      rest = rest.slice(nl + 1);
      if (waiter) {
        const w = waiter;
        waiter = undefined;
        w(l);
      } else queue.push(l);
    }
  });
  return {
    next: () => queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('no line within 20 s')), 20_000);
      waiter = (l) => {
        clearTimeout(t);
        resolve(l);
      };
    }),
  };
}
