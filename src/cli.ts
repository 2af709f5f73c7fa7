/**
 * The nfkeeper command line. Exit codes: 0 ok / in sync, 1 drift found,
 * 2 error (bad input, kernel refusal). Output that is data has --json.
 */
import { readFileSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import pino from 'pino';
import { anyInterface, loadConfig, namespaceInterfaces, type Config } from './config/config.js';
import { readTable, tablesToYaml, tableToNft, type ExportedTable, type ExportFormat } from './config/export.js';
import { ConfigError, NfkeeperError } from './errors.js';
import { Keeper, checkOnce, cleanup } from './keeper/keeper.js';
import { KeeperMetrics } from './metrics.js';
import { parseListen, serveMetrics } from './keeper/http.js';
import type { KeeperStatus } from './keeper/keeper.js';
import { renderDrift } from './keeper/reconcile.js';
import { NftSocket } from './netlink/socket.js';
import type { Family } from './netlink/expr.js';
import { parseDuration } from './duration.js';
import { Notifier } from './systemd.js';
import { PROJECT_ROOT } from './native.js';
import { gcOnce } from './gc/command.js';
import { GcLoop } from './gc/daemon.js';
import { DEFAULT_SOCKET } from './owners/config.js';
import { loadOwners } from './owners/state.js';
import { OwnerRegistry } from './owners/registry.js';
import { serveControl } from './owners/api.js';
import { NoDaemonError, call } from './owners/client.js';
import { parse as parseYaml } from 'yaml';
import type { Owner } from './owners/spec.js';

export const EXIT = { OK: 0, DRIFT: 1, ERROR: 2 } as const;

function version(): string {
  return (JSON.parse(readFileSync(`${PROJECT_ROOT}/package.json`, 'utf8')) as { version: string }).version;
}

type Out = { out: (s: string) => void; err: (s: string) => void };

export async function main(argv: string[], io: Out = {
  out: (s) => process.stdout.write(s + '\n'),
  err: (s) => process.stderr.write(s + '\n'),
}): Promise<number> {
  let code: number = EXIT.OK;
  const program = new Command('nfkeeper')
    .description('Keeps a desired nftables NAT ruleset installed, over netfilter netlink')
    .version(version(), '-V, --version')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  const configOpt = () => new Option('-c, --config <file>', 'the YAML config').makeOptionMandatory();
  const netnsOpt = () => new Option('--netns <path>', 'network namespace file (/run/netns/NAME, /proc/PID/ns/net)');

  program.command('version').description('print the version').action(() => io.out(version()));

  program.command('validate').description('check a config file; exit 0 or a clear error with its position')
    .addOption(configOpt()).option('--json', 'print a JSON summary')
    .action((o: { config: string; json?: boolean }) => {
      const config = loadConfig(o.config, { interfaces: anyInterface() });
      const summary = config.tables.map((t) => ({
        table: `${t.family} ${t.name}`, chains: t.chains.map((c) => ({ name: c.name, rules: c.rules.length })),
      }));
      io.out(o.json ? JSON.stringify({ ok: true, tables: summary }) : `${o.config}: ok (${config.tables.length} tables)`);
    });

  program.command('check').description('print the drift between the config and the kernel as nft text')
    .addOption(configOpt()).addOption(netnsOpt()).option('--json', 'print the drift as JSON')
    .action(async (o: { config: string; netns?: string; json?: boolean }) => {
      code = await oneShot(o, false, io);
    });

  program.command('apply').description('reconcile once and exit')
    .addOption(configOpt()).addOption(netnsOpt()).option('--json', 'print what was repaired as JSON')
    .action(async (o: { config: string; netns?: string; json?: boolean }) => {
      code = await oneShot(o, true, io);
    });

  program.command('export').description("print a kernel table as a config (nft's file syntax or YAML)")
    .requiredOption('--table <family name...>', 'the table to export: FAMILY NAME (repeat the option for more)')
    .addOption(netnsOpt())
    .addOption(new Option('--format <format>', 'nft or yaml').choices(['nft', 'yaml']).default('nft'))
    .action(async (o: { table: string[]; netns?: string; format: ExportFormat }) => {
      if (o.table.length % 2 !== 0) throw new NfkeeperError('--table takes FAMILY NAME pairs, e.g. --table ip nat');
      const sock = new NftSocket({ netns: o.netns });
      try {
        const tables: ExportedTable[] = [];
        for (let i = 0; i < o.table.length; i += 2) {
          const family = o.table[i]!;
          if (!['ip', 'ip6', 'inet'].includes(family)) throw new NfkeeperError(`--table: family '${family}' is not one of ip, ip6, inet`);
          // The nft form prints counter values as nft list does; a YAML config has no use for them.
          const t = await readTable(sock, family as Family, o.table[i + 1]!,
            { interfaces: namespaceInterfaces(o.netns), counters: o.format === 'nft' });
          if (!t) throw new NfkeeperError(`table ${family} ${o.table[i + 1]} does not exist${o.netns ? ` in ${o.netns}` : ''}`);
          tables.push(t);
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
    .addOption(configOpt()).addOption(netnsOpt()).option('--json', 'print what was removed as JSON')
    .action(async (o: { config: string; netns?: string; json?: boolean }) => {
      const config = loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns) });
      const sock = new NftSocket({ netns: o.netns });
      try {
        const removed = await cleanup(sock, config);
        io.out(o.json ? JSON.stringify({ removed }) : removed.length ? removed.map((t) => `removed table ${t}`).join('\n') : 'nothing to remove');
      } finally {
        sock.close();
      }
    });

  program.command('run').description('keep the config installed until SIGTERM or SIGINT (rules stay in place)')
    .addOption(configOpt()).addOption(netnsOpt())
    .option('--interval <duration>', 'generation check period', '1s')
    .option('--metrics <host:port>', 'serve /metrics, /healthz, /readyz', '127.0.0.1:9469')
    .option('--no-metrics', 'do not serve metrics')
    .option('--no-events', 'poll only; ignore change notifications')
    .option('--log-level <level>', 'pino level', 'info')
    .option('--socket <path>', `serve the control API here (default: owners.socket, ${DEFAULT_SOCKET}, when owners are configured)`)
    .addOption(new Option('--socket-mode <octal>', 'test only: the control socket\'s mode').hideHelp())
    .action(async (o: RunOptions) => {
      code = await run(o);
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
          const r = await call(o.socket, 'GET', '/v1/status', undefined, 10_000);
          if (r.status !== 200) throw new NfkeeperError(`control socket ${o.socket}: ${errorText(r)}`);
          fromSocket = r.body as typeof st;
        } catch (e) {
          if (!(e instanceof NoDaemonError) || cmd.getOptionValueSource('socket') === 'cli') throw e;
        }
      }
      if (fromSocket) st = fromSocket;
      else {
        const { host, port } = parseListen(o.metrics);
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
      }
      code = st.tables.some((t) => t.state === 'drifting') ? EXIT.DRIFT : EXIT.OK;
    });

  const owner = program.command('owner').description('register, list and remove owners over the control socket (docs/owners.md)');
  const socketOpt = () => new Option('--socket <path>', 'the daemon\'s control socket').default(DEFAULT_SOCKET);
  owner.command('put').description('register or replace an owner: its chains and the jump rules into dispatch chains')
    .argument('<id>', 'the owner id').requiredOption('-f, --file <file>', 'the owner as JSON or YAML: { chains: [{ name, rules }], jumps: { <dispatch>: [rules] } }')
    .addOption(socketOpt()).option('--json', 'print the answer as JSON')
    .action(async (id: string, o: { file: string; socket: string; json?: boolean }) => {
      let text: string;
      try {
        text = readFileSync(o.file, 'utf8');
      } catch (e) {
        throw new NfkeeperError(`${o.file}: cannot read: ${(e as Error).message}`);
      }
      let spec: unknown;
      try {
        spec = parseYaml(text);  // YAML is a superset of JSON
      } catch (e) {
        throw new NfkeeperError(`${o.file}: not JSON or YAML: ${(e as Error).message.split('\n')[0]}`);
      }
      const r = await call(o.socket, 'PUT', `/v1/owners/${encodeURIComponent(id)}`, spec);
      code = answer(r, o.json, io, () => {
        const b = r.body as { created: boolean; changed: boolean };
        return `owner ${id}: ${b.created ? 'registered' : b.changed ? 'replaced' : 'unchanged'}`;
      });
    });
  owner.command('rm').description('remove an owner; its chains and rules go in one batch')
    .argument('<id>', 'the owner id').addOption(socketOpt()).option('--json', 'print the answer as JSON')
    .action(async (id: string, o: { socket: string; json?: boolean }) => {
      const r = await call(o.socket, 'DELETE', `/v1/owners/${encodeURIComponent(id)}`);
      code = answer(r, o.json, io, () => `owner ${id}: removed`);
    });
  owner.command('ls').description('list the registered owners')
    .addOption(socketOpt()).option('--json', 'print the list as JSON')
    .action(async (o: { socket: string; json?: boolean }) => {
      const r = await call(o.socket, 'GET', '/v1/owners');
      code = answer(r, o.json, io, () => {
        const list = (r.body as { owners: { id: string; chains: number; rules: number }[] }).owners;
        return list.length === 0 ? 'no owners' : list.map((x) => `${x.id}\t${x.chains} chains\t${x.rules} rules`).join('\n');
      });
    });
  owner.command('get').description('print one owner as registered')
    .argument('<id>', 'the owner id').addOption(socketOpt())
    .action(async (id: string, o: { socket: string }) => {
      const r = await call(o.socket, 'GET', `/v1/owners/${encodeURIComponent(id)}`);
      code = answer(r, true, io, () => '');
    });

  program.command('gc').description('remove foreign rules and chains tagged with ids that are no longer live (docs/gc.md)')
    .addOption(configOpt()).addOption(netnsOpt())
    .option('--live-file <file>', 'a JSON array of live ids; overrides gc.live')
    .option('--grace <duration>', 'how long an id must be missing (default: gc.grace); 0s collects now')
    .option('--dry-run', 'print what would go, as nft text grouped by id, and change nothing')
    .addOption(new Option('--backend <name>', 'where the foreign tables are: nftables, or iptables-legacy (x_tables, through iptables-legacy-save/-restore)')
      .choices(['nftables', 'iptables-legacy']).default('nftables'))
    .option('--json', 'print the result as JSON')
    .action(async (o: { config: string; netns?: string; liveFile?: string; grace?: string; dryRun?: boolean; json?: boolean; backend: 'nftables' | 'iptables-legacy' }) => {
      const r = await gcOnce(loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns) }), o);
      io.out(o.json ? JSON.stringify(r.json) : r.lines.join('\n'));
      code = o.dryRun && r.garbage.length > 0 ? EXIT.DRIFT : EXIT.OK;
    });

  program.command('demo').description('install, tamper and watch the repairs, in a throwaway network namespace')
    .option('--json', 'print the results as JSON')
    .action(async (o: { json?: boolean }) => {
      const { demo } = await import('./demo.js');
      code = await demo({ json: o.json ?? false, out: io.out });
    });

  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      return e.exitCode === 0 ? EXIT.OK : EXIT.ERROR;
    }
    io.err(`nfkeeper: ${e instanceof NfkeeperError ? e.message : (e as Error).stack ?? String(e)}`);
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

async function oneShot(o: { config: string; netns?: string; json?: boolean }, apply: boolean, io: Out): Promise<number> {
  const config = loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns) });
  // Registered owners are desired state too; a corrupt state file stops here, before the kernel.
  const owners = config.owners ? loadOwners(config) : [];
  const sock = new NftSocket({ netns: o.netns });
  try {
    const { drift, ops, protectUnsupported } = await checkOnce(sock, config, apply, owners);
    if (protectUnsupported) io.err('nfkeeper: this kernel does not support owned persistent tables; applied without protect mode');
    const found = drift.filter((d) => d.drift.length > 0);
    if (o.json) {
      io.out(JSON.stringify({ inSync: found.length === 0, applied: apply ? ops : 0,
        drift: found.flatMap((d) => d.drift.map(({ actual: _a, ...rest }) => rest)) }));
    } else if (found.length === 0) {
      io.out('in sync');
    } else {
      for (const d of found) for (const line of renderDrift(d.table, d.drift)) io.out(line);
      if (apply) io.out(`applied ${ops} operations in one batch`);
    }
    if (apply) return EXIT.OK;
    return found.length === 0 ? EXIT.OK : EXIT.DRIFT;
  } finally {
    sock.close();
  }
}

interface RunOptions {
  config: string; netns?: string; interval: string; metrics: string | false; events: boolean; logLevel: string;
  socket?: string; socketMode?: string;
}

async function run(o: RunOptions): Promise<number> {
  const log = pino({ level: o.logLevel, base: { pid: process.pid } });
  const config = loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns) });
  // The owners come before the first pass: starting without them would collect their rules.
  // A state file that cannot be read stops start-up here, before the kernel is touched.
  const owners: Owner[] = config.owners ? loadOwners(config) : [];
  const socketPath = o.socket ?? config.owners?.socket;
  const socketMode = o.socketMode !== undefined ? parseInt(o.socketMode, 8) : undefined;
  if (socketMode !== undefined && !(socketMode >= 0 && socketMode <= 0o777)) throw new NfkeeperError(`--socket-mode: '${o.socketMode}' is not an octal mode`);
  const metrics = new KeeperMetrics(true, { version: version() });
  const keeper = new Keeper({ config, netns: o.netns, intervalMs: parseDuration(o.interval), events: o.events, logger: log, metrics, owners });
  keeper.on('error', () => undefined);  // logged by the keeper; the loop carries on
  await keeper.start();
  const registry = config.owners ? new OwnerRegistry(config, owners, (next) => keeper.setOwners(next)) : undefined;
  // Foreign GC: report-only unless gc.enabled (docs/gc.md). Registered owners count as live ids.
  const gcLoop = config.gc && config.gc.foreign.length > 0 && (config.gc.live || registry)
    ? new GcLoop({ gc: config.gc, netns: o.netns, logger: log, metrics, liveIds: registry && (() => registry.list().map((x) => x.id)) })
    : undefined;
  gcLoop?.start();
  const server = o.metrics ? await serveMetrics(keeper, o.metrics) : undefined;
  const control = socketPath ? await serveControl({
    path: socketPath, registry, logger: log, mode: socketMode,
    status: async () => ({
      ...keeper.status(),
      ...(config.owners && registry ? {
        owners: { registered: registry.size, table: `${config.owners.family} ${config.owners.table}`, dispatch: config.owners.dispatch },
        ownedGc: {
          found: await counterByKind(metrics.ownedGcFound),
          collected: await counterByKind(metrics.ownedGcCollected),
        },
      } : {}),
    }),
  }) : undefined;
  log.info({ tables: config.tables.map((t) => `${t.family} ${t.name}`), metrics: o.metrics || null, socket: socketPath ?? null,
    owners: registry ? registry.size : null }, 'nfkeeper running');
  const systemd = new Notifier();
  systemd.notify(`READY=1\nSTATUS=verified ${config.tables.length} tables\nMAINPID=${process.pid}`);
  // The watchdog is fed from the loop itself, so a stalled loop stops feeding it.
  let lastFed = 0;
  if (systemd.watchdogMs !== undefined) {
    const every = systemd.watchdogMs;
    keeper.on('tick', () => {
      const now = Date.now();
      if (now - lastFed >= every / 2) {
        lastFed = now;
        systemd.notify('WATCHDOG=1');
      }
    });
    if (every < parseDuration(o.interval)) {
      log.warn({ watchdogMs: every * 2, intervalMs: parseDuration(o.interval) }, 'WatchdogSec is shorter than the check interval');
    }
  }

  const reload = (why: string) => {
    let next: Config;
    try {
      next = loadConfig(o.config, { interfaces: namespaceInterfaces(o.netns) });
    } catch (e) {
      metrics.reloadFailed.set(1);
      log.error({ err: e instanceof ConfigError ? e.message : e, why }, 'config reload rejected; keeping the old one');
      return;
    }
    try {
      registry?.checkConfig(next);
      if (!registry && next.owners) throw new NfkeeperError('an owners section was added; that takes a restart (the reload was rejected)');
    } catch (e) {
      metrics.reloadFailed.set(1);
      log.error({ err: (e as Error).message, why }, 'config reload rejected; keeping the old one');
      return;
    }
    gcLoop?.setConfig(next.gc);
    keeper.setConfig(next).then(() => log.info({ why }, 'config reloaded'), () => undefined /* logged by the keeper */);
  };
  process.on('SIGHUP', () => reload('SIGHUP'));
  // Watch the directory, not the file: editors replace files and a Kubernetes
  // ConfigMap swaps a symlink, and both would orphan a watch on the file itself.
  let lastText = readFileSync(o.config, 'utf8');
  let debounce: NodeJS.Timeout | undefined;
  const watcher = watch(dirname(o.config), (_event, name) => {
    if (name && name !== basename(o.config) && !String(name).startsWith('..')) return;
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      let text: string;
      try {
        text = readFileSync(o.config, 'utf8');
      } catch {
        return;  // mid-swap; the next event will tell
      }
      if (text === lastText) return;
      lastText = text;
      reload('file changed');
    }, 200);
  });

  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      log.info({ signal: sig }, 'stopping; rules stay in place');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  systemd.notify('STOPPING=1');
  watcher.close();
  clearTimeout(debounce);
  server?.close();
  await control?.close();
  await gcLoop?.stop();
  await keeper.stop();
  return EXIT.OK;
}

async function counterByKind(c: KeeperMetrics['ownedGcFound']): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await c.get()).values) out[String(v.labels.kind)] = v.value;
  return out;
}
