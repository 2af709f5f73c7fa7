/**
 * The whole-table proof for kube-proxy's nftables mode at a size the
 * test suite does not run (test/peers runs 10 and 1,000 services; this is
 * for 10,000), with timings. In throwaway namespaces:
 *
 *  1. nft -f of the file (kube-proxy's own install), timed; `nfkeeper check`
 *     of the file and of nft's listing of that install: both exit 0.
 *  2. `nfkeeper apply` of the file into an empty namespace, timed beside
 *     nft -f: it lists byte-identically to nft's install and its
 *     `nft --debug=netlink` dump is nft's.
 *  3. A running daemon (`nfkeeper run`, a child process as in production)
 *     installs it, then repairs a foreign deletion of one element, one rule
 *     and one chain; each repair is timed from outside (the deletion's
 *     return to a probe of that object seeing it back, polled every 20 ms)
 *     and by the daemon's own log (latencyMs of its 'repaired' line). At the
 *     end the daemon's table lists and dumps as nft's install (chain blocks
 *     in name order: a chain created again is listed last).
 *
 * check and apply run in this process through the CLI's main() (the same code
 * as `nfkeeper check|apply`, without process start-up); the daemon runs
 * through tsx from the sources. Exits 1 if any step of the proof fails.
 *
 *   sudo npx tsx bench/peers-proof.ts [--services 10000] [--family ip|ip6] [--json FILE]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { main } from '../src/cli.js';
import { nfk, waitFor } from '../test/cli/spawn.js';
import type { Netns } from '../test/helpers/netns.js';
import { byChain, netlinkDump } from '../test/helpers/peers/dump.js';
import { kubeProxy } from '../test/helpers/peers/kube-proxy.js';
import { createBenchNetns, type BenchNetns } from './lib/netns.js';
import { parseArgs } from './lib/args.js';

const opts = parseArgs(import.meta.url, { '--services': 1, '--family': 1, '--json': 1 });
const services = Number(opts.value('--services', '10000'));
const family = opts.value('--family', 'ip') as 'ip' | 'ip6';

const ms = (t0: number) => performance.now() - t0;
const fmt = (x: number) => (x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(0)} ms`);
const out: Record<string, unknown> = { services, family };
const say = (k: string, v: number | string, text: string) => {
  out[k] = v;
  process.stdout.write(`${text}\n`);
};

async function cli(...args: string[]): Promise<{ code: number; out: string; err: string; ms: number }> {
  const o: string[] = [];
  const e: string[] = [];
  const t0 = performance.now();
  const code = await main(['node', 'nfkeeper', ...args], { out: (s) => o.push(s), err: (s) => e.push(s) });
  return { code, out: o.join('\n'), err: e.join('\n'), ms: ms(t0) };
}

function must(ok: boolean, what: string): void {
  if (!ok) throw new Error(`proof failed: ${what}`);
}

async function poll(what: string, f: () => boolean): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    let seen = false;
    try {
      seen = f();
    } catch {
      seen = false;
    }
    if (seen) return ms(t0);
    if (ms(t0) > 300_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function run(): Promise<void> {
  const loadStart = loadavg()[0]!;
  const file = kubeProxy({ family, services });
  const t = { family: file.family, table: file.table };
  const c = file.counts;
  say('file', `${file.text.length} bytes`, `kube-proxy ${family}, ${services} services: ${file.text.length} bytes, ${c.chains} chains, ` +
    `${c.rules} rules, ${c.sets} sets/maps, ${c.elements} elements; load average ${loadStart.toFixed(1)} on ${cpus().length} CPUs`);
  const dir = mkdtempSync(join(tmpdir(), 'nfk-peers-proof-'));
  const live: BenchNetns[] = [];
  const ns = (tag: string) => {
    const n = createBenchNetns(tag);
    live.push(n);
    return n;
  };
  try {
    const path = join(dir, 'kube-proxy.nft');
    writeFileSync(path, file.text);
    const list = (n: BenchNetns) => n.exec('nft', ['list', 'table', t.family, t.table]);
    const dump = (n: BenchNetns) => netlinkDump(n as unknown as Netns, t.family, t.table);

    // 1. nft's install; the file and nft's listing of it are in sync with it.
    const a = ns('nft');
    let t0 = performance.now();
    a.exec('nft', ['-f', path]);
    say('nftInstallMs', ms(t0), `nft -f (kube-proxy's install): ${fmt(ms(t0))}`);
    const expected = list(a);
    const listingPath = join(dir, 'listing.nft');
    writeFileSync(listingPath, expected);
    for (const [what, source] of [['file', path], ['listing', listingPath]] as const) {
      const r = await cli('check', '--config', source, '--netns', a.path);
      must(r.code === 0 && r.err === '', `check of the ${what} against nft's install exited ${r.code}: ${r.err || r.out.slice(0, 500)}`);
      say(`check${what === 'file' ? 'File' : 'Listing'}Ms`, r.ms, `nfkeeper check of the ${what} against nft's install: exit 0 in ${fmt(r.ms)}`);
    }

    // 2. nfkeeper's install into an empty namespace is nft's.
    const b = ns('apply');
    const ap = await cli('apply', '--config', path, '--netns', b.path);
    must(ap.code === 0 && ap.err === '', `apply exited ${ap.code}: ${ap.err}`);
    say('applyMs', ap.ms, `nfkeeper apply into an empty namespace: ${fmt(ap.ms)} (load, compile, one batch, read back)`);
    must(list(b) === expected, "apply's listing differs from nft's install");
    t0 = performance.now();
    const dumpA = dump(a);
    must(dump(b) === dumpA, "apply's netlink dump differs from nft's install");
    say('dumpCompareMs', ms(t0), `listing and nft --debug=netlink dump identical to nft's (two dumps taken in ${fmt(ms(t0))})`);
    b.remove();

    // 3. A running daemon installs it and repairs what others delete.
    const d = ns('daemon');
    const want = byChain(expected);
    const same = () => {
      try {
        return byChain(list(d)) === want;
      } catch {
        return false;  // not there yet
      }
    };
    t0 = performance.now();
    const daemon = nfk(['run', '--config', path, '--netns', d.path, '--no-metrics']);
    try {
      await waitFor('the daemon\'s install', same, 600_000);
      say('daemonInstallMs', ms(t0), `daemon: started and installed in ${fmt(ms(t0))} (process start through tsx included)`);
      const repaired = () => daemon.logs().filter((l) => l.msg === 'repaired');
      const lastLatency = async (n: number) => {
        await waitFor('the daemon\'s repair log line', () => repaired().length > n, 60_000);
        return Number(repaired()[n]!.latencyMs);
      };

      const el = /^add element (\S+) (\S+) (\S+) \{ (.*?)(?: comment "[^"]*")?(?: : .*)? \}$/m.exec(file.text);
      must(el !== null, 'the file has an element');
      const [, ef, et, es, ekey] = el!;
      const probeElement = () => { d.exec('nft', ['get', 'element', ef!, et!, es!, `{ ${ekey} }`]); return true; };
      let n = repaired().length;
      d.exec('nft', ['delete', 'element', ef!, et!, es!, `{ ${ekey} }`]);
      let seen = await poll('the element back', probeElement);
      say('repairElementMs', seen, `one element deleted from outside (${es} { ${ekey} }): seen back after ${fmt(seen)}, ` +
        `daemon's latencyMs ${(await lastLatency(n)).toFixed(1)}`);
      out.repairElementDaemonMs = Number(repaired()[n]!.latencyMs);

      // the last rule of the listing, by handle
      let chain = '', handle = '';
      for (const line of d.exec('nft', ['-a', 'list', 'table', t.family, t.table]).split('\n')) {
        const cm = /^\tchain (\S+) \{/.exec(line);
        if (cm) chain = cm[1]!;
        const h = /^\t\t(?!type ).* # handle (\d+)$/.exec(line);
        if (h && chain) handle = `${chain} ${h[1]}`;
      }
      const [rchain, rhandle] = handle.split(' ');
      const chainRules = (name: string) => d.exec('nft', ['list', 'chain', t.family, t.table, name]);
      const before = chainRules(rchain!);
      n = repaired().length;
      d.exec('nft', ['delete', 'rule', t.family, t.table, rchain!, 'handle', rhandle!]);
      seen = await poll('the rule back', () => chainRules(rchain!) === before);
      say('repairRuleMs', seen, `one rule deleted from outside (chain ${rchain}): seen back after ${fmt(seen)}, ` +
        `daemon's latencyMs ${(await lastLatency(n)).toFixed(1)}`);
      out.repairRuleDaemonMs = Number(repaired()[n]!.latencyMs);

      // the last base chain of the listing: no rule refers to it, so it can be deleted from outside
      let base = '';
      chain = '';
      for (const line of expected.split('\n')) {
        const cm = /^\tchain (\S+) \{/.exec(line);
        if (cm) chain = cm[1]!;
        if (/^\t\ttype \S+ hook /.test(line)) base = chain;
      }
      const baseBefore = chainRules(base);
      n = repaired().length;
      d.exec('nft', ['-f', '-'], `flush chain ${t.family} ${t.table} ${base}\ndelete chain ${t.family} ${t.table} ${base}\n`);
      seen = await poll('the chain back', () => chainRules(base) === baseBefore);
      say('repairChainMs', seen, `one chain deleted from outside (${base}): seen back after ${fmt(seen)}, ` +
        `daemon's latencyMs ${(await lastLatency(n)).toFixed(1)}`);
      out.repairChainDaemonMs = Number(repaired()[n]!.latencyMs);

      must(same(), "the daemon's table lists differently from nft's install after the repairs");
      must(byChain(dump(d)) === byChain(dumpA), "the daemon's netlink dump differs from nft's install after the repairs");
      say('proof', 'passed', 'after the repairs: listing and netlink dump identical to nft\'s install (chains in name order)');
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  } finally {
    for (const n of live) n.remove();
    rmSync(dir, { recursive: true, force: true });
  }
  say('load', `${loadStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end`,
    `load average ${loadStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end`);
  const json = opts.value('--json');
  if (json) writeFileSync(json, JSON.stringify({ ...out, node: process.version, date: new Date().toISOString() }, null, 2) + '\n');
}

run().then(() => process.exit(0), (e: unknown) => {
  process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
