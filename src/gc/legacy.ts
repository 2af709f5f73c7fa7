/**
 * Foreign GC on hosts still on iptables-legacy, where Nomad's and CNI's
 * per-allocation chains live in x_tables and no netlink view of them
 * exists. It reads each table with `iptables-legacy-save` (ip6tables-legacy-save
 * for ip6), finds the garbage with the same findGarbage() as the nf_tables
 * driver (tags, grace, chains reached only from garbage), and removes it
 * with ONE `iptables-legacy-restore --noflush --wait` per family, which
 * replaces each table atomically.
 *
 * x_tables has no generation to guard with, so the restore script checks
 * the view itself: every rule goes by its full saved spec (-D CHAIN spec),
 * a garbage chain's own rules too, and a chain goes with -X, which refuses
 * a chain that still has rules or references. A rule added to a garbage
 * chain, or a new jump to it, between the save and the restore makes the
 * restore fail and change nothing; the next run sees the new state.
 * nfkeeper's own tables stay on nf_tables: this driver only deletes.
 */
import { spawn } from 'node:child_process';
import { NfkeeperError } from '../base/errors.js';
import type { Family } from '../netlink/expr.js';
import type { ForeignTable } from '../config/gc.js';
import { findGarbage, liveOf, type GcRuleModel, type GcTableView, type ScanOptions, type ScanResult } from './collect.js';

export class LegacyIptablesError extends NfkeeperError {
  override name = 'LegacyIptablesError';
  /** The program that failed: iptables-legacy-save, ip6tables-legacy-restore, ... */
  readonly operation: string;
  constructor(message: string, operation: string) {
    super(message);
    this.operation = operation;
  }
}

/** One `-A CHAIN spec` line of iptables-save. */
export interface LegacyRule {
  chain: string;
  /** Everything after `-A CHAIN `, quoted as iptables-save quotes it: what -D takes back. */
  spec: string;
  comments: string[];
  /** -j/-g targets (user chains among them). */
  targets: string[];
}

export interface LegacyTable {
  table: string;
  /** Chain name → built-in (has a policy). */
  chains: Map<string, { base: boolean }>;
  rules: LegacyRule[];
}

/** iptables-save's word splitting: spaces separate, "..." quotes with \" and \\ escapes. */
export function splitSaveLine(line: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < line.length) {
    while (line[i] === ' ') i++;
    if (i >= line.length) break;
    let word = '';
    while (i < line.length && line[i] !== ' ') {
      if (line[i] === '"') {
        i++;
        while (i < line.length && line[i] !== '"') {
          if (line[i] === '\\' && i + 1 < line.length) i++;
          word += line[i++];
        }
        if (line[i] !== '"') throw new Error('unterminated quote');
        i++;
      } else word += line[i++];
    }
    out.push(word);
  }
  return out;
}

/** Parses iptables-save output: every table in it, or a LegacyIptablesError naming the line. */
export function parseSave(text: string, from: string): LegacyTable[] {
  const tables: LegacyTable[] = [];
  let t: LegacyTable | undefined;
  text.split('\n').forEach((line, i) => {
    const bad = (why: string) => new LegacyIptablesError(`${from} line ${i + 1}: ${why}: ${JSON.stringify(line.slice(0, 200))}`, from);
    if (line === '' || line.startsWith('#')) return;
    if (line.startsWith('*')) {
      tables.push(t = { table: line.slice(1), chains: new Map(), rules: [] });
      return;
    }
    if (line === 'COMMIT') {
      t = undefined;
      return;
    }
    if (!t) throw bad('outside a table');
    if (line.startsWith(':')) {
      const m = /^:(\S+) (\S+)/.exec(line);
      if (!m) throw bad('not a chain line');
      t.chains.set(m[1]!, { base: m[2] !== '-' });
      return;
    }
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (!m) throw bad('not an -A rule line');
    let words: string[];
    try {
      words = splitSaveLine(m[2]!);
    } catch (e) {
      throw bad((e as Error).message);
    }
    const comments: string[] = [];
    const targets: string[] = [];
    words.forEach((w, k) => {
      if (w === '--comment' && k + 1 < words.length) comments.push(words[k + 1]!);
      if ((w === '-j' || w === '-g' || w === '--jump' || w === '--goto') && k + 1 < words.length) targets.push(words[k + 1]!);
    });
    t.rules.push({ chain: m[1]!, spec: m[2]!, comments, targets });
  });
  return tables;
}

/** `X/32` (`X/128`): one address, X; anything wider is not an address. */
const oneAddress = (w: string | undefined) => /^([0-9.]+\/32|[0-9a-f:]+\/128)$/.exec(w ?? '')?.[1]!.replace(/\/\d+$/, '');

const LEGACY_MODEL: GcRuleModel<LegacyRule> = {
  tags: (r) => r.comments,
  targets: (r) => r.targets,
  sourceAddress: (r) => {
    const w = splitSaveLine(r.spec);
    const i = w.indexOf('-s');
    return i >= 0 && w[i - 1] !== '!' ? oneAddress(w[i + 1]) : undefined;
  },
  // The plugin's two rules exactly as iptables-legacy-save prints them.
  firewallAddress: (r) => {
    const w = splitSaveLine(r.spec);
    if (w.length === 4 && w[0] === '-s' && w[2] === '-j' && w[3] === 'ACCEPT') return oneAddress(w[1]);
    if (w.length === 8 && w[0] === '-d' && w.slice(2).join(' ') === '-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT') return oneAddress(w[1]);
    return undefined;
  },
};

/** The programs for a family. */
export function legacyTools(family: Family): { save: string; restore: string } {
  if (family === 'ip') return { save: 'iptables-legacy-save', restore: 'iptables-legacy-restore' };
  if (family === 'ip6') return { save: 'ip6tables-legacy-save', restore: 'ip6tables-legacy-restore' };
  throw new NfkeeperError(`iptables-legacy has no ${family} family: list gc.foreign tables as ip or ip6 for --backend iptables-legacy`);
}

export interface LegacyGarbage {
  id: string;
  owner?: string;
  family: Family;
  /** Per table: the restore lines that remove this id's rules and chains. */
  tables: { table: string; lines: string[] }[];
}

export interface LegacyCollectResult {
  garbage: LegacyGarbage[];
  pending: ScanResult['pending'];
  seen: Set<string>;
  /** The restore input per family, as run (or as it would run, in a dry run). */
  scripts: { family: Family; restore: string; script: string }[];
  collected: boolean;
  /** Lines in the scripts that change something (-D and -X). */
  ops: number;
}

export interface LegacyOptions extends ScanOptions {
  dryRun?: boolean;
  /** A network namespace file to run the programs in (nsenter --net). */
  netns?: string;
}

/** Runs a program (in the namespace, if any); its stdout, or a LegacyIptablesError with its stderr. */
async function run(cmd: string, args: string[], netns: string | undefined, input?: string): Promise<string> {
  const [file, argv] = netns ? ['nsenter', [`--net=${netns}`, '--', cmd, ...args]] : [cmd, args];
  return new Promise((resolve, reject) => {
    const p = spawn(file, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => { out += d; });
    p.stderr.setEncoding('utf8').on('data', (d: string) => { err += d; });
    p.on('error', (e) => reject(new LegacyIptablesError(`${cmd}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? `not found (install the iptables package; ${file} is needed)` : e.message}`, cmd)));
    p.on('close', (code) => {
      if (code === 0) resolve(out);
      else reject(new LegacyIptablesError(`${cmd} ${args.join(' ')} failed (exit ${code}): ${err.trim().slice(0, 1000)}`, cmd));
    });
    p.stdin.on('error', () => { /* the close handler reports the failure */ });
    p.stdin.end(input ?? '');
  });
}

/** Reads the configured tables of every family and finds the garbage. */
async function scanLegacy(o: LegacyOptions) {
  const views: GcTableView<LegacyRule & { family: Family }>[] = [];
  const families = [...new Set(o.foreign.map((f) => f.family))];
  for (const family of families) {
    const tools = legacyTools(family);
    const wanted = new Map<string, ForeignTable[]>();
    for (const f of o.foreign.filter((x) => x.family === family)) wanted.set(f.table, [...(wanted.get(f.table) ?? []), f]);
    // One save of all tables: a table that does not exist is simply not in it (a save of -t nat would load the module).
    const tables = parseSave(await run(tools.save, [], o.netns), tools.save);
    for (const t of tables) {
      const owners = wanted.get(t.table);
      if (!owners) continue;
      const rules = new Map<string, (LegacyRule & { family: Family })[]>();
      for (const name of t.chains.keys()) rules.set(name, []);
      for (const r of t.rules) {
        if (!rules.has(r.chain)) throw new LegacyIptablesError(`${tools.save}: rule in undeclared chain ${r.chain}`, tools.save);
        rules.get(r.chain)!.push({ ...r, family });
      }
      views.push({ family, table: t.table, owners, chains: t.chains, rules });
    }
  }
  // The live ids asked after the saves, as the netlink scan asks them after its reads: in the daemon
  // this runs in the registry's turn (OwnerRegistry.exclusive), so no owner is answered from here to
  // the restore.
  return findGarbage(views, LEGACY_MODEL, { ...o, live: liveOf(o) });
}

/**
 * Scans x_tables and, unless dryRun, removes the garbage: one restore per
 * family (every table of that family in it). Up to 5 attempts when a
 * restore fails (the tables moved on between save and restore).
 */
export async function collectLegacy(o: LegacyOptions): Promise<LegacyCollectResult> {
  for (const f of o.foreign) legacyTools(f.family);  // inet is refused before anything runs
  for (let attempt = 1; ; attempt++) {
    const found = await scanLegacy(o);
    const garbage: LegacyGarbage[] = [];
    // family -> table -> deletes of rules (jumps first), then -X of chains.
    const plan = new Map<Family, Map<string, { del: string[]; drop: string[] }>>();
    const at = (family: Family, table: string) => {
      let byTable = plan.get(family);
      if (!byTable) plan.set(family, byTable = new Map());
      let p = byTable.get(table);
      if (!p) byTable.set(table, p = { del: [], drop: [] });
      return p;
    };
    for (const g of found.garbage) {
      const perTable = new Map<string, { family: Family; lines: string[] }>();
      const lines = (family: Family, table: string) => {
        const k = `${family} ${table}`;
        let l = perTable.get(k);
        if (!l) perTable.set(k, l = { family, lines: [] });
        return l.lines;
      };
      for (const { view, rule, why } of g.rules) {
        const line = `-D ${rule.chain} ${rule.spec}`;
        at(view.family, view.table).del.push(line);
        lines(view.family, view.table).push(`# ${why}`, line);
      }
      for (const c of g.chains) {
        // Each of the chain's rules by spec, not -F: a rule added since the save is not ours to flush.
        const dels = c.rules.map((r) => `-D ${c.name} ${r.spec}`);
        at(c.view.family, c.view.table).del.push(...dels);
        at(c.view.family, c.view.table).drop.push(`-X ${c.name}`);
        lines(c.view.family, c.view.table).push(`# chain ${c.name}: ${c.why}`, ...dels, `-X ${c.name}`);
      }
      for (const [k, v] of perTable) {
        const table = k.slice(k.indexOf(' ') + 1);
        const existing = garbage.find((x) => x.id === g.id && x.family === v.family);
        const entry = { table, lines: v.lines };
        if (existing) existing.tables.push(entry);
        else garbage.push({ id: g.id, ...(g.owner !== undefined ? { owner: g.owner } : {}), family: v.family, tables: [entry] });
      }
    }
    const scripts = [...plan].map(([family, byTable]) => ({
      family,
      restore: legacyTools(family).restore,
      script: [...byTable].map(([table, p]) => [`*${table}`, ...p.del, ...p.drop, 'COMMIT'].join('\n')).join('\n') + '\n',
    }));
    const ops = scripts.reduce((n, s) => n + s.script.split('\n').filter((l) => l.startsWith('-D') || l.startsWith('-X')).length, 0);
    const result = { garbage, pending: found.pending, seen: found.seen, scripts, ops };
    if (o.dryRun || scripts.length === 0) return { ...result, collected: false };
    try {
      for (const s of scripts) await run(s.restore, ['--noflush', '--wait'], o.netns, s.script);
      return { ...result, collected: true };
    } catch (e) {
      // With one family a failed restore changed nothing; retry on the state as it is now.
      if (attempt < 5 && scripts.length === 1 && e instanceof LegacyIptablesError) continue;
      throw e;
    }
  }
}

/** Legacy garbage as the restore lines that remove it, grouped by id. */
export function renderLegacyGarbage(garbage: readonly LegacyGarbage[]): string[] {
  const out: string[] = [];
  for (const g of garbage) {
    out.push(`# id ${g.id}${g.owner ? ` (owner ${g.owner})` : ''}`);
    for (const t of g.tables) {
      out.push(`# ${legacyTools(g.family).restore} --noflush: *${t.table}`);
      out.push(...t.lines);
    }
  }
  return out;
}
