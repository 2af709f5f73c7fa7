/**
 * The nfkeeper command line. Exit codes: 0 ok / in sync, 1 drift found,
 * 2 error (bad input, kernel refusal). Output that is data has --json.
 */
import { existsSync, readFileSync } from 'node:fs';
import { Argument, Command, CommanderError, Option } from 'commander';
import { SHELLS, completionScript, type Shell } from './completion.js';
import type { ExportFormat } from './config/export.js';
import { CACHE_DIR_ENV, DEFAULT_RECORD_DIR, DEFAULT_SOCKET, defaultCacheDir } from './config/paths.js';
import { ConfigError, NfkeeperError } from './base/errors.js';
import type { KeeperStatus } from './keeper/keeper.js';
import type { Family } from './netlink/expr.js';
import type { OpenProof } from './netlink/guard.js';
import { parseBoundedDuration } from './base/duration.js';
import { isDevNull, isTerminal, stderr, stdout } from './base/fd-output.js';

// bin/nfkeeper.js waits for these before it exits, and writes its own lines to stderr here.
export { drained, isDevNull, stderr } from './base/fd-output.js';

// What a command needs is imported when it runs, not here: the modules that reach the kernel
// (and load the native addon), so that validate, version, --help and the owner client commands
// run where the addon is missing or cannot load; and the config's parser and schema, the HTTP
// client and the logger, so that a command pays only for what it uses (version reads
// package.json and nothing else; the bundle keeps each of these in a chunk of its own). The
// one-shot commands take their pass from keeper/oneshot.js, not the daemon's keeper.
const oneshot = () => import('./keeper/oneshot.js');
const netlink = () => import('./netlink/socket.js');
/** Monitors of the namespace's change notifications (apply's resend proof): their module loaded by the first, at apply's first refusal. */
const watcher = (netns: string | undefined) => async (options: Parameters<import('./netlink/conn.js').NftHost['watch']>[0]) =>
  new (await import('./netlink/monitor.js')).Monitor({ ...options, netns });
const configs = () => import('./config/config.js');
const client = () => import('./owners/client.js');
/** One request to the daemon's control socket (no agent: the command exits after it). */
const ask = async (socket: string, method: string, path: string, body?: unknown, timeoutMs?: number) => (await client()).call(socket, method, path, body, timeoutMs, 'none');
const listen = async (spec: string) => (await import('./keeper/http.js')).parseListen(spec);

/** --interval bounds: faster than 10ms is a busy loop; slower than 1h leaves drift unseen (events aside) for too long. */
export const INTERVAL_MIN_MS = 10;
export const INTERVAL_MAX_MS = 3_600_000;

export const EXIT = { OK: 0, DRIFT: 1, ERROR: 2 } as const;

function version(): string {
  // One level up from src/ (tsx) and from dist/ (the build) alike.
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

/**
 * Where a command writes: lines on stdout and stderr, and whether each is a terminal (a long plan
 * is summarised on a terminal stdout; progress goes to a terminal stderr).
 */
type Out = {
  out: (s: string) => void; err: (s: string) => void; outTty?: boolean; errTty?: boolean;
  /** stdout is /dev/null: what is written there is read by no one, and a plan is not rendered for it. */
  outDiscarded?: boolean;
};

/** A plan longer than this many lines is summarised on a terminal (--full prints it whole). */
export const SUMMARY_OVER_LINES = 50;

/** Where `ip netns add NAME` puts a named namespace. */
export const NETNS_DIR = '/run/netns';

/**
 * --netns takes a path (/run/netns/NAME, /proc/PID/ns/net) or the NAME of one `ip netns` made;
 * a path that exists is taken as it is, else a plain name is looked up in /run/netns.
 */
export function resolveNetns(value: string, dir = NETNS_DIR): string {
  if (value === '') throw new NfkeeperError('--netns: empty path');
  if (existsSync(value)) return value;
  if (!value.includes('/')) {
    const named = `${dir}/${value}`;
    if (existsSync(named)) return named;
    throw new NfkeeperError(`--netns ${value}: no such namespace: neither the path ${value} nor ${named} exists ('ip netns list' shows the named ones)`);
  }
  throw new NfkeeperError(`--netns ${value}: no such namespace (the path does not exist)`);
}

export async function main(argv: string[], io: Out = {
  out: (s) => stdout.write(s + '\n'),
  err: (s) => stderr.write(s + '\n'),
  // Asked only by a command that needs to know (a plan with differences; a step that took long).
  get outTty() {
    return isTerminal(1);
  },
  get errTty() {
    return isTerminal(2);
  },
  get outDiscarded() {
    return isDevNull(1);
  },
}): Promise<number> {
  let code: number = EXIT.OK;
  const program = new Command('nfkeeper')
    .description('Keeps a desired nftables NAT ruleset installed, over netfilter netlink')
    .version(version(), '-V, --version')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  // Required options are checked before the action (the preAction hook below), not by commander's
  // own mandatory check: that runs before its unknown-option check, so a mistyped --confg was
  // reported as "required option --config not specified" instead of by its name.
  const requiredOpts = new WeakSet<Option>();
  const required = (o: Option) => {
    requiredOpts.add(o);
    return o;
  };
  program.hook('preAction', (_program, action) => {
    for (const o of action.options) {
      if (requiredOpts.has(o) && action.getOptionValue(o.attributeName()) === undefined) {
        action.error(`error: required option '${o.flags}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
      }
    }
  });
  const configOpt = () => required(new Option('-c, --config <file>', 'the config: YAML, or a .nft file in nft syntax'));
  const netnsOpt = () => new Option('--netns <name|path>', 'network namespace: a name from ip netns (/run/netns/NAME) or a path (/proc/PID/ns/net)')
    .argParser((v: string) => resolveNetns(v));
  // nft's -I: where a .nft config's `include "NAME"` looks before /etc (repeatable)
  const includeOpt = () => new Option('-I, --include-path <dir...>', "directories a .nft config's include \"NAME\" searches before /etc (nft's -I)");
  // The compile cache of run, apply and check (src/config/compile-cache.ts): one entry per namespace
  // and config, shared by the commands.
  const cacheDirOpts = (c: Command) => c
    .addOption(new Option('--cache-dir <dir>', 'keep the compiled config here (run and apply store it, check reads it): a start, an apply or a check whose compile inputs are unchanged does not compile')
      .env(CACHE_DIR_ENV).default(defaultCacheDir() ?? false, '/var/cache/nfkeeper as root, else $XDG_CACHE_HOME/nfkeeper or ~/.cache/nfkeeper'))
    .option('--no-cache-dir', 'use no compile cache; every start, apply and check compiles the config');
  const progressOpts = (c: Command) => c
    .option('--progress', 'report each step that took more than a second on stderr (the default on a terminal)')
    .option('--no-progress', 'no progress lines');

  program.command('version').description('print the version').action(() => io.out(version()));

  progressOpts(program.command('validate').description('check a config file; exit 0, or 2 with every error as file:line:column: error: message')
    .addOption(configOpt()).addOption(includeOpt()).option('--json', 'print the result as JSON: { ok, tables } or { ok: false, errors: [{ file, line, column, severity, message }] }'))
    .action(async (o: { config: string; includePath?: string[]; json?: boolean; progress?: boolean }) => {
      let config;
      const progress = new Progress(io, o.progress);
      const { anyInterface, loadConfig } = await configs();
      const { countRules } = await import('./model/desired.js');
      try {
        config = loadConfig(o.config, { interfaces: anyInterface(), includePath: o.includePath });
        progress.step(() => `${o.config}: ${plural(countRules(config!.tables), 'rule')} compiled`);
      } catch (e) {
        progress.step(() => `${o.config}: checked`);
        if (!(e instanceof ConfigError)) throw e;
        // Editor and CI annotators parse these lines: no "nfkeeper: " prefix, one line per error.
        const errors = e.all.map((x) => ({ file: x.file, line: x.line, column: x.column, severity: 'error', message: x.reason }));
        if (o.json) io.out(JSON.stringify({ ok: false, errors }));
        else for (const x of errors) io.err(`${x.file}:${x.line}:${x.column}: ${x.severity}: ${oneLine(x.message)}`);
        code = EXIT.ERROR;
        return;
      }
      const summary = config.tables.map((t) => ({
        table: `${t.family} ${t.name}`, chains: t.chains.map((c) => ({ name: c.name, rules: c.rules.length })),
      }));
      io.out(o.json ? JSON.stringify({ ok: true, errors: [], tables: summary }) : `${o.config}: ok (${config.tables.length} tables)`);
    });

  cacheDirOpts(progressOpts(program.command('check').description('print the drift between the config and the kernel as nft text')
    .addOption(configOpt()).addOption(includeOpt()).addOption(netnsOpt()).option('--json', 'print the drift as JSON')
    .option('--full', `print every line of a long plan on a terminal too (else more than ${SUMMARY_OVER_LINES} lines are summarised)`)))
    .action(async (o: OneShotOptions, cmd: Command) => {
      code = await oneShot({ ...o, cacheDirGiven: cmd.getOptionValueSource('cacheDir') !== 'default' }, false, io);
    });

  cacheDirOpts(progressOpts(program.command('apply').description('reconcile once and exit')
    .addOption(configOpt()).addOption(includeOpt()).addOption(netnsOpt()).option('--json', 'print what was repaired as JSON')
    .option('--full', `print every line of a long plan on a terminal too (else more than ${SUMMARY_OVER_LINES} lines are summarised)`)))
    .action(async (o: OneShotOptions, cmd: Command) => {
      code = await oneShot({ ...o, cacheDirGiven: cmd.getOptionValueSource('cacheDir') !== 'default' }, true, io);
    });

  progressOpts(program.command('export').description("print a kernel table as a config (nft's file syntax or YAML)"))
    .addOption(required(new Option('--table <family name...>', 'the table to export: FAMILY NAME (repeat the option for more)')))
    .addOption(netnsOpt())
    .addOption(new Option('--format <format>', 'nft or yaml').choices(['nft', 'yaml']).default('nft'))
    .action(async (o: { table: string[]; netns?: string; format: ExportFormat; progress?: boolean }) => {
      const progress = new Progress(io, o.progress);
      if (o.table.length % 2 !== 0) throw new NfkeeperError('--table takes FAMILY NAME pairs, e.g. --table ip nat');
      const { readTable, tablesToYaml, tableToNft } = await import('./config/export.js');
      const { namespaceInterfaces } = await configs();
      const sock = new (await netlink()).NftSocket({ netns: o.netns });
      try {
        const tables: import('./config/export.js').ExportedTable[] = [];
        for (let i = 0; i < o.table.length; i += 2) {
          const family = o.table[i]!;
          if (!['ip', 'ip6', 'inet'].includes(family)) throw new NfkeeperError(`--table: family '${family}' is not one of ip, ip6, inet`);
          // The nft form prints counter values as nft list does; a YAML config has no use for them.
          const t = await readTable(sock, family as Family, o.table[i + 1]!,
            { interfaces: namespaceInterfaces(o.netns), counters: o.format === 'nft' });
          if (!t) throw new NfkeeperError(`table ${family} ${o.table[i + 1]} does not exist${o.netns ? ` in ${o.netns}` : ''}`);
          tables.push(t);
          progress.step(() => `read table ${family} ${t.name}: ${plural(t.chains.reduce((n, c) => n + c.rules.length, 0), 'rule')}`);
        }
        io.out((o.format === 'yaml' ? tablesToYaml(tables) : tables.map(tableToNft).join('\n')).replace(/\n$/, ''));
        const unsupported = tables.flatMap((t) => t.unsupported.map((u) => `${t.family} ${t.name}: ${u}`));
        for (const u of unsupported) io.err(`nfkeeper: not exported: ${u}`);
        code = unsupported.length ? EXIT.DRIFT : EXIT.OK;
      } finally {
        sock.close();
      }
    });

  program.command('cleanup').description('remove every table the config owns (rules stay when nfkeeper merely stops)')
    .addOption(configOpt()).addOption(includeOpt()).addOption(netnsOpt()).option('--json', 'print what was removed as JSON')
    .action(async (o: { config: string; includePath?: string[]; netns?: string; json?: boolean }) => {
      const { loadConfig, namespaceInterfaces } = await configs();
      const config = loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns), includePath: o.includePath });
      const { cleanup } = await oneshot();
      // Not while a daemon keeps these tables (it would put them back at once).
      const lock = (await import('./lock.js')).lockKeeper({ netns: o.netns, tables: config.tables });
      const sock = new (await netlink()).NftSocket({ netns: o.netns });
      try {
        const removed = await cleanup(sock, config, { proof: (await oneshot()).tablesProof(watcher(o.netns)) });
        io.out(o.json ? JSON.stringify({ removed }) : removed.length ? removed.map((t) => `removed table ${t}`).join('\n') : 'nothing to remove');
      } finally {
        sock.close();
        lock.release();
      }
    });

  cacheDirOpts(program.command('run').description('keep the config installed until SIGTERM or SIGINT (rules stay in place)'))
    .addOption(configOpt()).addOption(includeOpt()).addOption(netnsOpt())
    .option('--interval <duration>', 'generation check period, 10ms to 1h (Go-style: 500ms, 1m30s)', '1s')
    .option('--metrics <host:port>', 'serve /metrics, /healthz, /readyz', '127.0.0.1:9469')
    .option('--no-metrics', 'do not serve metrics')
    .option('--no-events', 'poll only; ignore change notifications')
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent', 'info')
    .option('--socket <path>', `serve the control API here (default: owners.socket, ${DEFAULT_SOCKET}, when owners are configured)`)
    .addOption(new Option('--socket-mode <octal>', 'test only: the control socket\'s mode').hideHelp())
    .addOption(new Option('--max-owners <n>', 'test only: owners at most (default 10000)').hideHelp())
    .addOption(new Option('--max-connections <n>', 'test only: control socket connections at most (default 1024)').hideHelp())
    .addOption(new Option('--netns-check <duration>', 'test only: how often the --netns path is checked (default: the interval, at most 2s)').hideHelp())
    .option('--reload-status <file>', "write each config reload's result here, for `nfkeeper reload` (systemd's ExecReload)")
    .option('--history <n>', 'foreign changes remembered with who made them (status, events)', '256')
    .option('--env-wait <duration>', 'at start-up, wait this long for an env file the config lists to appear (0s: fail at once), up to 1h', '5m')
    .option('--record-dir <dir>', 'keep the restart record here (one boot: /run): a restart onto the ruleset it records adopts it without reading the rules', DEFAULT_RECORD_DIR)
    .option('--no-record', 'keep no restart record; every start reads the owned tables')
    .action(async (o: RunOptions) => {
      // Every flag is checked before anything is opened, bound or read.
      const d = await runOptions(o);
      const { runDaemon } = await import('./run.js');
      code = await runDaemon(d);
    });

  program.command('reload').description('have the running daemon reload its config, and exit with its verdict (ExecReload)')
    .addOption(required(new Option('--pid <pid>', "the daemon's process id (systemd: $MAINPID)")))
    .addOption(required(new Option('--status-file <file>', 'the file the daemon was started with as --reload-status')))
    .option('--timeout <duration>', 'how long to wait for the verdict', '60s')
    .action(async (o: { pid: string; statusFile: string; timeout: string }) => {
      if (!/^\d+$/.test(o.pid) || Number(o.pid) < 1) throw new NfkeeperError(`--pid: '${o.pid}' is not a process id`);
      const timeoutMs = parseBoundedDuration('--timeout', o.timeout, 100, 3_600_000);
      const { requestReload } = await import('./reload-status.js');
      const r = await requestReload(Number(o.pid), o.statusFile, timeoutMs);
      if (r.ok) io.out('config reloaded');
      else io.err(`nfkeeper: config reload rejected; the old one stays in force: ${r.error ?? 'no reason given'}`);
      code = r.ok ? EXIT.OK : EXIT.ERROR;
    });

  program.command('status').description("show the running daemon's view: tables, owners, protection, last repair, fight")
    .option('--socket <path>', 'the control socket to ask first', DEFAULT_SOCKET)
    .option('--metrics <host:port>', 'where the daemon serves /status (asked when the control socket does not answer)', '127.0.0.1:9469')
    .option('--json', 'print the status as JSON')
    .action(async (o: { socket: string; metrics: string; json?: boolean }, cmd: Command) => {
      let st: KeeperStatus & { owners?: { registered: number; table: string }; ownedGc?: Record<string, Record<string, number>> };
      // An explicit --metrics alone means that endpoint; otherwise the control socket first.
      const metricsOnly = cmd.getOptionValueSource('metrics') === 'cli' && cmd.getOptionValueSource('socket') !== 'cli';
      let fromSocket: typeof st | undefined;
      if (!metricsOnly) {
        try {
          const r = await ask(o.socket, 'GET', '/v1/status', undefined, 10_000);
          if (r.status !== 200) throw new NfkeeperError(`control socket ${o.socket}: ${errorText(r)}`);
          fromSocket = r.body as typeof st;
        } catch (e) {
          if (!(e instanceof (await client()).NoDaemonError) || cmd.getOptionValueSource('socket') === 'cli') throw e;
        }
      }
      if (fromSocket) st = fromSocket;
      else {
        const { host, port } = await listen(o.metrics);
        try {
          st = await (await fetch(`http://${host.includes(':') ? `[${host}]` : host}:${port}/status`)).json() as typeof st;
        } catch (e) {
          throw new NfkeeperError(`no daemon answers on ${metricsOnly ? '' : `${o.socket} or `}${o.metrics}: ${(e as Error).message}`);
        }
      }
      if (o.json) io.out(JSON.stringify(st));
      else {
        io.out(`ready: ${st.ready}  generation: ${st.generation ?? '-'}  fight level: ${st.fightLevel}`);
        for (const t of st.tables) io.out(`table ${t.family} ${t.name}: ${t.state}, ${t.protection}`);
        if (st.owners) {
          const c = st.ownedGc?.collected;
          io.out(`owners: ${st.owners.registered} registered in table ${st.owners.table}` +
            (c ? `; owned GC collected ${c.chain ?? 0} chains, ${c.rule ?? 0} rules` : ''));
        }
        if (st.lastRepair) io.out(`last repair ${st.lastRepair.at} (${st.lastRepair.cause}, ${st.lastRepair.latencyMs.toFixed(3)} ms): ${st.lastRepair.drift.join('; ')}`);
        if (st.lastError) io.out(`last error: ${st.lastError}`);
        const changes = st.foreignChanges ?? [];
        if (changes.length > 0) {
          const { changeText } = await import('./keeper/attribution.js');
          io.out(`last foreign changes (newest first; all of them: nfkeeper events):`);
          for (const c of changes.slice(0, 5)) io.out(`  ${changeText(c)}`);
        }
      }
      code = st.tables.some((t) => t.state === 'drifting') ? EXIT.DRIFT : EXIT.OK;
    });

  program.command('events').description('print the foreign changes to owned tables, who made them and the repairs that answered them')
    .option('--socket <path>', 'the control socket to ask first', DEFAULT_SOCKET)
    .option('--metrics <host:port>', 'where the daemon serves /events (asked when the control socket does not answer)', '127.0.0.1:9469')
    .option('-f, --follow', 'then print each foreign change and each repair as it happens, until interrupted')
    .option('--json', 'one JSON object a line')
    .action(async (o: { socket: string; metrics: string; follow?: boolean; json?: boolean }, cmd: Command) => {
      const { followEvents } = await import('./owners/client.js');
      const { eventText } = await import('./keeper/attribution.js');
      const query = o.follow ? '?follow=1' : '';
      const print = (line: string) => {
        if (o.json) io.out(line);
        else io.out(eventText(JSON.parse(line)));
      };
      const metricsOnly = cmd.getOptionValueSource('metrics') === 'cli' && cmd.getOptionValueSource('socket') !== 'cli';
      if (!metricsOnly) {
        try {
          await followEvents({ socketPath: o.socket, path: `/v1/events${query}` }, print);
          return;
        } catch (e) {
          if (!(e instanceof (await client()).NoDaemonError) || cmd.getOptionValueSource('socket') === 'cli') throw e;
        }
      }
      const { host, port } = await listen(o.metrics);
      try {
        await followEvents({ host, port, path: `/events${query}` }, print);
      } catch (e) {
        throw new NfkeeperError(`no daemon answers on ${metricsOnly ? '' : `${o.socket} or `}${o.metrics}: ${(e as Error).message}`);
      }
    });

  const owner = program.command('owner').description('register, list and remove owners over the control socket (docs/owners.md)');
  const socketOpt = () => new Option('--socket <path>', 'the daemon\'s control socket').default(DEFAULT_SOCKET);
  owner.command('put').description('register or replace an owner: its chains and the jump rules into dispatch chains')
    .argument('<id>', 'the owner id').addOption(required(new Option('-f, --file <file>', 'the owner as JSON or YAML: { chains: [{ name, rules }], jumps: { <dispatch>: [rules] } }')))
    .addOption(socketOpt()).option('--json', 'print the answer as JSON')
    .action(async (id: string, o: { file: string; socket: string; json?: boolean }) => {
      let text: string;
      try {
        text = (await import('./base/regular-file.js')).readRegularFile(o.file, (await client()).MAX_BODY).toString('utf8');
      } catch (e) {
        throw new NfkeeperError(`${o.file}: cannot read: ${(e as Error).message}`);
      }
      let spec: unknown;
      try {
        spec = (await import('yaml')).parse(text);  // YAML is a superset of JSON
      } catch (e) {
        throw new NfkeeperError(`${o.file}: not JSON or YAML: ${(e as Error).message.split('\n')[0]}`);
      }
      const r = await ask(o.socket, 'PUT', `/v1/owners/${encodeURIComponent(id)}`, spec);
      code = answer(r, o.json, io, () => {
        const b = r.body as { created: boolean; changed: boolean };
        return `owner ${id}: ${b.created ? 'registered' : b.changed ? 'replaced' : 'unchanged'}`;
      });
    });
  owner.command('rm').description('remove an owner; its chains and rules go in one batch')
    .argument('<id>', 'the owner id').addOption(socketOpt()).option('--json', 'print the answer as JSON')
    .action(async (id: string, o: { socket: string; json?: boolean }) => {
      const r = await ask(o.socket, 'DELETE', `/v1/owners/${encodeURIComponent(id)}`);
      code = answer(r, o.json, io, () => `owner ${id}: removed`);
    });
  owner.command('ls').description('list the registered owners')
    .addOption(socketOpt()).option('--json', 'print the list as JSON')
    .action(async (o: { socket: string; json?: boolean }) => {
      const r = await ask(o.socket, 'GET', '/v1/owners');
      code = answer(r, o.json, io, () => {
        const list = (r.body as { owners: { id: string; chains: number; rules: number }[] }).owners;
        return list.length === 0 ? 'no owners' : list.map((x) => `${x.id}\t${x.chains} chains\t${x.rules} rules`).join('\n');
      });
    });
  owner.command('get').description('print one owner as registered')
    .argument('<id>', 'the owner id').addOption(socketOpt())
    .action(async (id: string, o: { socket: string }) => {
      const r = await ask(o.socket, 'GET', `/v1/owners/${encodeURIComponent(id)}`);
      code = answer(r, true, io, () => '');
    });

  program.command('gc').description('remove foreign rules and chains tagged with ids that are no longer live (docs/gc.md)')
    .addOption(configOpt()).addOption(includeOpt()).addOption(netnsOpt())
    .option('--live-file <file>', 'a JSON array of live ids; overrides gc.live')
    .option('--grace <duration>', 'how long an id must be missing (default: gc.grace); 0s collects now')
    .option('--dry-run', 'print what would go, as nft text grouped by id, and change nothing')
    .addOption(new Option('--backend <name>', 'where the foreign tables are: nftables, or iptables-legacy (x_tables, through iptables-legacy-save/-restore); default gc.backend')
      .choices(['nftables', 'iptables-legacy']))
    .option('--json', 'print the result as JSON')
    .action(async (o: { config: string; includePath?: string[]; netns?: string; liveFile?: string; grace?: string; dryRun?: boolean; json?: boolean; backend?: 'nftables' | 'iptables-legacy' }) => {
      const { gcOnce } = await import('./gc/command.js');
      const { loadConfig, namespaceInterfaces } = await configs();
      // The resend proof's code is loaded only at a refusal (the addon's monitor, the keeper's view).
      const proof: OpenProof = async (conn, tables) => (await oneshot()).tablesProof(watcher(o.netns))(conn, tables);
      const r = await gcOnce(loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns), includePath: o.includePath }), { ...o, proof });
      io.out(o.json ? JSON.stringify(r.json) : r.lines.join('\n'));
      code = o.dryRun && r.garbage.length > 0 ? EXIT.DRIFT : EXIT.OK;
    });

  program.command('demo').description('install, tamper and watch the repairs, in a throwaway network namespace')
    .option('--json', 'print the results as JSON')
    .action(async (o: { json?: boolean }) => {
      const { demo } = await import('./demo.js');
      code = await demo({ json: o.json ?? false, out: io.out });
    });

  program.command('completion').description('print a completion script for bash, zsh or fish (bash: source <(nfkeeper completion bash))')
    .addArgument(new Argument('<shell>', 'the shell').choices(SHELLS))
    .action(async (shell: Shell) => {
      io.out(completionScript(program, shell).replace(/\n$/, ''));
    });

  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      return e.exitCode === 0 ? EXIT.OK : EXIT.ERROR;
    }
    io.err(`nfkeeper: ${describe(e)}`);
    return EXIT.ERROR;
  }
  return code;
}

/** Prints an API answer; 0 for 2xx, 2 with the server's message otherwise. */
function answer(r: { status: number; body: unknown }, json: boolean | undefined, io: Out, text: () => string): number {
  if (r.status >= 200 && r.status < 300) {
    io.out(json ? JSON.stringify(r.body) : text());
    return EXIT.OK;
  }
  if (json) io.out(JSON.stringify(r.body));
  io.err(`nfkeeper: ${errorText(r)}`);
  return EXIT.ERROR;
}

function errorText(r: { status: number; body: unknown }): string {
  const b = r.body as { error?: string } | string | undefined;
  return `${r.status}: ${typeof b === 'object' && b?.error ? b.error : String(b)}`;
}

interface OneShotOptions {
  config: string; includePath?: string[]; netns?: string; json?: boolean; full?: boolean; progress?: boolean;
  /** --cache-dir (false: --no-cache-dir, or no default for this user). */
  cacheDir?: string | false;
  /** Whether the user chose the cache directory (the flag or NFKEEPER_CACHE_DIR), not the default. */
  cacheDirGiven?: boolean;
}

async function oneShot(o: OneShotOptions, apply: boolean, io: Out): Promise<number> {
  const progress = new Progress(io, o.progress);
  const { loadConfig, namespaceInterfaces } = await configs();
  // apply compiles through the daemon's compile cache, keyed as `run` keys it: the same options
  // (compacted, this namespace's interfaces), so an apply and a later start share one entry. check
  // reads the entry run or apply stored, if big enough, and stores none: the cache's own work (its
  // module, the trace's hashes, the compaction) costs a small config's check more than its compile,
  // and a check of a big one finds the daemon's entry (run stores every config) or apply's.
  const cacheDir = o.cacheDir ? checkedCacheDir(o.cacheDir) : undefined;
  const cached = cacheDir !== undefined && (apply || (await import('./config/cache-key.js')).hasCompileCacheEntry(cacheDir, o.netns, o.config));
  if (cacheDir !== undefined && !cached) progress.note(() => `compile cache: no entry worth reading for ${o.config} (run and apply store one; a small config's compiles faster); it was compiled`);
  // apply compacts each rule as it is compiled, as the daemon does (model/compact.ts): the batch's
  // validation and the addon's encoder then check and encode an expression that rules share once
  // per run of rules, not once per rule. check only compares, and skips that work (what it stores
  // is nothing; a config from the cache comes compacted).
  const compiled = apply ? (await import('./model/compact.js')).compactAsCompiled() : undefined;
  const options = { interfaces: namespaceInterfaces(o.netns), includePath: o.includePath, compiled };
  let config: import('./config/config.js').Config;
  let store: ((stored?: (token: string) => void, sent?: import('./netlink/sent-exprs.js').SentRuleExprs) => import('./base/sliced.js').Sliced<string | undefined>) | undefined;
  // A hit's rules, made as they are read: what tells whether a failure was the entry's.
  let hit: { file: string; make: () => import('./base/sliced.js').Sliced<void> } | undefined;
  // A hit's texts a printed plan rendered, kept in its entry for the next plan (one it lacked).
  let keepTexts: (() => string | undefined) | undefined;
  // The entry apply installs, where what its echo proves is kept (src/keeper/held-proof.ts).
  let proof: import('./keeper/held-proof.js').ProofEntry | undefined;
  // A cold apply's proof, kept for the token its store gives the entry (CheckResult.keepProof).
  let keepProof: ((token: string) => boolean) | undefined;
  // A cold apply's rules as its commit sent them, stored as they are (CheckResult.sent).
  let sent: import('./netlink/sent-exprs.js').SentRuleExprs | undefined;
  let maglevBack: (() => void) | undefined;
  // Whether apply stores the config it applies after the commit (below).
  const storesAfter = async () => store !== undefined && (await import('./model/desired.js')).countRules(config.tables) >= APPLY_STORES_FROM_RULES;
  const loadCached = async () => {
    const { loadConfigCached } = await import('./config/compile-cache.js');
    return loadConfigCached(o.config, options, { dir: cacheDir!, version: version(), netns: o.netns, ...(maglevBack ? { compiling: maglevBack } : {}) });
  };
  if (cached) {
    // Until a compile is needed (heap.ts): an apply from the cache makes no rule.
    if (apply) maglevBack = (await import('./base/heap.js')).withoutMaglev();
    const loaded = await loadCached();
    config = loaded.config;
    if (apply) store = loaded.store;
    if (loaded.cache.used && loaded.make) hit = { file: loaded.cache.file, make: loaded.make };
    keepTexts = loaded.keepTexts;
    // A hit: the token its store wrote. A miss that apply stores (below): the token is the store's,
    // after the commit, and what the commit's echo proves is kept then (keepProof).
    if (apply && (loaded.cache.used ? loaded.cache.token !== undefined : await storesAfter())) {
      proof = { path: (await import('./config/compile-cache.js')).heldProofPathOf(loaded.cache.file), ...(loaded.cache.used ? { token: loaded.cache.token } : {}) };
    }
    progress.note(() => loaded.cache.used ? `compile cache matches every input: ${o.config} was not compiled`
      : `compile cache not used (${loaded.cache.why}); ${o.config} was compiled`);
  } else {
    config = loadConfig(o.config, options);
  }
  // apply writes: not beside a daemon keeping these tables or this state file (check only reads).
  const lock = apply ? (await import('./lock.js')).lockKeeper({ netns: o.netns, tables: config.tables, stateFile: config.owners?.state }) : undefined;
  let code: number;
  try {
    try {
      code = await oneShotLocked(o, config, apply, io, progress, proof, (keep) => { keepProof = keep; },
        await storesAfter() ? (given) => { sent = given; } : undefined);
    } catch (e) {
      // An entry that passed its seal but whose rule cannot be made (a fault of nfkeeper's own) fails
      // where a rule is first read: before the commit, which encodes every rule it writes, so the
      // kernel has only what a compiled config's batch would have written. Removed, the config is
      // compiled and the command goes on once more, as it would have without the entry.
      const { compiledInstead, unmadeRules } = await import('./config/compile-cache.js');
      const why = hit && unmadeRules(hit.make);
      if (why === undefined) throw e;
      maglevBack?.();
      keepTexts = undefined;
      ({ config, store } = await compiledInstead(hit!.file, why, (said) => io.err(`nfkeeper: ${said}; ${o.config} was compiled`), async (throughCache) => {
        if (!throughCache) return { config: loadConfig(o.config, options), store: undefined };
        const loaded = await loadCached();
        return { config: loaded.config, store: apply ? loaded.store : undefined };
      }));
      code = await oneShotLocked(o, config, apply, io, progress);
    }
  } finally {
    lock?.release();
  }
  // After the commit and its output, before the exit: the next apply, check or start of the daemon
  // finds the config compiled. A cache that cannot be written changes neither the
  // kernel nor the exit code: one line on stderr says why when the user chose the directory; the
  // default one (root's /var/cache, a user's ~/.cache) is the user's only as far as it works, and a
  // line at every run for a directory they never asked for would be noise: said with --progress.
  if (await storesAfter()) {
    const { runNow } = await import('./base/sliced.js');
    const kept = keepProof && ((token: string) => {
      if (keepProof!(token)) progress.note(() => `the commit's full echo proved every rule held as sent; kept in ${proof!.path} for the next apply of the entry on this kernel`);
    });
    const why = runNow(store!(kept, sent));
    const line = () => `the compiled config was not stored in the compile cache (${oneLine(why!)}); the next apply compiles it again (--no-cache-dir: no cache)`;
    if (why !== undefined) {
      if (o.cacheDirGiven) io.err(`nfkeeper: ${line()}`);
      else progress.note(line);
    }
  }
  // A plan printed from an entry that kept no rule texts (the daemon stored it, or an apply to
  // /dev/null): the texts it rendered are kept, and the next plan from the entry renders none.
  const why = keepTexts?.();
  if (why !== undefined) progress.note(() => `the plan's rule texts were not kept in the compile cache entry (${oneLine(why)}); the next plan renders them again`);
  maglevBack?.();
  return code;
}

/**
 * apply stores a config of at least this many rules: below it the compile costs less than the
 * cache's own work (the store, and a later hit's checks), and an apply without an entry only looks
 * for the file. (The daemon stores every config: its store runs after ready.)
 */
export const APPLY_STORES_FROM_RULES = 1000;

/** --cache-dir's value (from the flag or NFKEEPER_CACHE_DIR), refused when it names nothing. */
function checkedCacheDir(dir: string): string {
  if (dir === '') throw new NfkeeperError(`--cache-dir: empty path (${CACHE_DIR_ENV} is empty?); --no-cache-dir keeps no cache`);
  return dir;
}

async function oneShotLocked(o: OneShotOptions, config: import('./config/config.js').Config, apply: boolean, io: Out,
  progress: Progress, proof?: import('./keeper/held-proof.js').ProofEntry, keepProof?: (keep: (token: string) => boolean) => void,
  sentExprs?: (sent: import('./netlink/sent-exprs.js').SentRuleExprs) => void): Promise<number> {
  // Registered owners are desired state too; a corrupt state file stops here, before the kernel.
  const owners = config.owners ? (await import('./owners/state-file.js')).loadOwners(config) : [];
  const { countRules } = await import('./model/desired.js');
  progress.step(() => `${o.config}: ${plural(config.tables.length, 'table')}, ${plural(countRules(config.tables), 'rule')} compiled`);
  const { checkOnce, renderDrift } = { ...await oneshot(), ...await import('./keeper/render-drift.js') };
  type CheckResult = import('./keeper/oneshot.js').CheckResult;
  // The plan as printed: every line for a pipe or a file, as always; a summary of a long plan for
  // a terminal, counted from the lines without their rules' and elements' texts (rendered only if
  // the plan turns out short enough to print whole).
  const discarded = io.outDiscarded === true;
  const planText = (drift: CheckResult['drift']) => {
    const found = drift.filter((d) => d.drift.length > 0);
    if (found.length === 0) return 'in sync';
    const summary = io.outTty === true && !o.full;
    const lines = found.flatMap((d) => renderDrift(d.table, d.diff, !summary));
    if (!summary) return lines.join('\n');
    return (lines.length > SUMMARY_OVER_LINES ? summarisePlan(lines) : found.flatMap((d) => renderDrift(d.table, d.diff))).join('\n');
  };
  // apply renders its plan while the kernel takes the batch (the commit's wait on the addon's
  // thread), once the first observation has said what differs; what it prints is the same.
  // (not run if the pass ends first: a check, a small commit made at once, an error)
  let text: string | undefined;
  let rendering: NodeJS.Immediate | undefined;
  const found = o.json || discarded ? undefined : (drift: CheckResult['drift']) => {
    rendering = setImmediate(() => {
      try {
        text = planText(drift);
      } catch {
        // rendered again below, where an error is reported
      }
    });
  };
  const sock = new (await netlink()).NftSocket({ netns: o.netns });
  try {
    // apply's monitor: a batch a neighbour's commit refused is sent again where its events prove our tables unchanged.
    const watch = apply ? watcher(o.netns) : undefined;
    const { drift, ops, protectUnsupported, held, keepProof: keep, sent } = await checkOnce(sock, config, apply, owners,
      { ...(found ? { found } : {}), ...(proof ? { proof } : {}), ...(watch ? { watch } : {}), ...(sentExprs ? { keepExprs: true } : {}) });
    if (keep) keepProof?.(keep);
    if (sent) sentExprs?.(sent);
    clearImmediate(rendering);
    progress.step(() => apply ? `compared with the kernel and committed ${ops} operations` : 'compared with the kernel');
    if (held === 'by-proof') progress.note(() => `the commit's rules are held as sent by ${proof!.path} (this kernel's full echo of an earlier install of the entry): only the echoes its handles derive from were asked`);
    if (held === 'proved' && !keep) progress.note(() => `the commit's full echo proved every rule held as sent; kept in ${proof!.path} for the next apply of the entry on this kernel`);
    if (protectUnsupported) io.err('nfkeeper: this kernel does not support owned persistent tables; applied without protect mode');
    const differs = drift.some((d) => d.drift.length > 0);
    if (o.json) {
      io.out(JSON.stringify({ inSync: !differs, applied: apply ? ops : 0,
        drift: drift.flatMap((d) => d.drift.map(({ actual: _a, ...rest }) => rest)) }));
    } else {
      // One write: a line at a time was a system call per rule of a big install. Not rendered for
      // /dev/null (`apply > /dev/null` in a script), where no one reads it.
      if (!discarded || !differs) io.out(text ?? planText(drift));
      if (apply && differs) io.out(`applied ${ops} operations in one batch`);
    }
    if (apply) return EXIT.OK;
    return differs ? EXIT.DRIFT : EXIT.OK;
  } finally {
    clearImmediate(rendering);
    sock.close();
  }
}

const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

/** How many summary lines a plan's summary shows at most before it only counts. */
const SUMMARY_MAX_ITEMS = 20;

/**
 * A long plan in a few lines: each `#` line (one per difference found) with how many lines it
 * adds and removes, then the totals.
 */
export function summarisePlan(lines: readonly string[]): string[] {
  const items: { head: string; add: number; del: number }[] = [];
  let add = 0;
  let del = 0;
  for (const line of lines) {
    if (line.startsWith('# ')) items.push({ head: line, add: 0, del: 0 });
    else if (line.startsWith('+ ') || line.startsWith('- ')) {
      const plus = line.startsWith('+ ');
      if (plus) add++;
      else del++;
      const last = items[items.length - 1];
      if (last) {
        if (plus) last.add++;
        else last.del++;
      }
    }
  }
  const out = items.slice(0, SUMMARY_MAX_ITEMS).map((x) => `${x.head} (+${x.add} -${x.del})`);
  if (items.length > SUMMARY_MAX_ITEMS) out.push(`# … and ${items.length - SUMMARY_MAX_ITEMS} more differences`);
  out.push(`# ${lines.length} plan lines (+${add} -${del}), summarised on a terminal: --full prints them all, as a pipe or a file gets them`);
  return out;
}

/**
 * Progress of a one-shot command on stderr: each step that took more than a second, when it ends
 * (the steps are mostly synchronous: a timer would not fire during them). On by default when
 * stderr is a terminal; --progress and --no-progress decide otherwise.
 */
export class Progress {
  static readonly AFTER_MS = 1000;
  private last = Progress.now();

  // The monotonic clock without the global `performance`, whose first use loads perf_hooks.
  private static now(): number {
    return Number(process.hrtime.bigint()) / 1e6;
  }

  // Whether stderr is a terminal is asked only once a step took long enough to be reported.
  constructor(private readonly io: Pick<Out, 'err' | 'errTty'>, private enabled?: boolean) {}

  /** Says what was done, however long it took, when progress is reported (--progress, a terminal). */
  note(what: () => string): void {
    if (this.enabled ??= this.io.errTty === true) this.io.err(`nfkeeper: ${what()}`);
  }

  /** Ends a step: says what it did and how long it took, if that was more than a second. */
  step(what: () => string): void {
    const now = Progress.now();
    const ms = now - this.last;
    this.last = now;
    if (ms > Progress.AFTER_MS && (this.enabled ??= this.io.errTty === true)) this.io.err(`nfkeeper: ${what()} (${(ms / 1000).toFixed(1)} s)`);
  }
}

interface RunOptions {
  config: string; includePath?: string[]; netns?: string; interval: string; metrics: string | false; events: boolean; logLevel: string;
  socket?: string; socketMode?: string; maxOwners?: string; maxConnections?: string; netnsCheck?: string;
  reloadStatus?: string; history: string; envWait: string; record: boolean; recordDir: string; cacheDir: string | false;
}

/** The run flags, checked and converted; each refusal names the flag and what it takes. */
async function runOptions(o: RunOptions): Promise<import('./run.js').DaemonOptions> {
  const intervalMs = parseBoundedDuration('--interval', o.interval, INTERVAL_MIN_MS, INTERVAL_MAX_MS);
  const logLevel = (await import('./log.js')).parseLogLevel(o.logLevel);
  if (o.metrics !== false) await listen(o.metrics);
  let socketMode: number | undefined;
  if (o.socketMode !== undefined) {
    socketMode = /^[0-7]{1,4}$/.test(o.socketMode) ? parseInt(o.socketMode, 8) : NaN;
    if (!(socketMode >= 0 && socketMode <= 0o777)) throw new NfkeeperError(`--socket-mode: '${o.socketMode}' is not an octal mode`);
  }
  const count = (flag: string, v: string | undefined) => {
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v) || Number(v) < 1) throw new NfkeeperError(`${flag}: '${v}' is not a positive whole number`);
    return Number(v);
  };
  return {
    version: version(), config: o.config, includePath: o.includePath, netns: o.netns, intervalMs, metrics: o.metrics === false ? undefined : o.metrics, events: o.events, logLevel,
    socket: o.socket, socketMode, maxOwners: count('--max-owners', o.maxOwners), maxConnections: count('--max-connections', o.maxConnections),
    netnsCheckMs: o.netnsCheck === undefined ? undefined : parseBoundedDuration('--netns-check', o.netnsCheck, 10, INTERVAL_MAX_MS),
    reloadStatus: o.reloadStatus, history: count('--history', o.history),
    envWaitMs: parseBoundedDuration('--env-wait', o.envWait, 0, INTERVAL_MAX_MS),
    recordDir: o.record ? o.recordDir : undefined,
    cacheDir: o.cacheDir === false ? undefined : checkedCacheDir(o.cacheDir),
  };
}

/**
 * One line for an error: our own errors are written for users; a config error
 * with more behind it says how many; anything else is a bug, so its stack is kept.
 */
function describe(e: unknown): string {
  if (e instanceof ConfigError) {
    return oneLine(e.message) + (e.all.length > 1 ? ` (and ${e.all.length - 1} more; 'nfkeeper validate' lists them all)` : '');
  }
  if (e instanceof NfkeeperError) return e.message;
  return (e as Error).stack ?? String(e);
}

/** A rule syntax error carries the rule and a caret on lines of their own; error lines keep to one (the position says where). */
function oneLine(message: string): string {
  return message.split('\n')[0]!;
}
