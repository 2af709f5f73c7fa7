/**
 * The command line with big rulesets and at a terminal: a long plan summarised on a terminal
 * (every line with --full, and always through a pipe or into a file), progress on stderr,
 * export naming everything it cannot write, --netns taking a name, a mistyped flag named,
 * and completion scripts generated from the program that load and complete in bash (zsh and
 * fish too where installed; scripts/setup.sh --test installs them).
 */
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isDevNull, main, Progress, SUMMARY_OVER_LINES, resolveNetns, summarisePlan } from '../../src/cli.js';
import { unreadTableParts } from '../../src/config/export.js';
import { cli } from '../helpers/cli.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { FLANNEL_YAML, postroutingYaml } from '../keeper/helpers.js';
import { tempDir } from '../owners/fixtures.js';

const dir = tempDir('usability');
const flannel = join(dir, 'flannel.yaml');
writeFileSync(flannel, FLANNEL_YAML);

function config(n: number): string {
  return postroutingYaml('big', Array.from({ length: n }, (_, i) => `ip saddr 10.0.${i >> 8}.${i & 255} ip daddr 192.168.0.0/16 return`));
}
const big = join(dir, 'big.yaml');
writeFileSync(big, config(300));

/** main() as on a terminal (or not, or with stdout /dev/null): what it wrote to stdout and stderr. */
async function atTerminal(tty: boolean | 'devnull', ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  // Lines, as a user sees them: one write may hold many (a plan is written at once).
  const code = await main(['node', 'nfkeeper', ...args], { out: (s) => out.push(...s.split('\n')), err: (s) => err.push(s),
    outTty: tty === true, errTty: tty === true, outDiscarded: tty === 'devnull' });
  return { code, out, err };
}

describe('plans at a terminal', { timeout: 120_000 }, () => {
  let ns: Netns;
  beforeEach(() => {
    ns = createNetns('usab');
  });
  afterEach(() => ns.remove());

  it('a long plan is summarised on a terminal, whole with --full and whole through a pipe', async () => {
    const piped = await atTerminal(false, 'check', '--config', big, '--netns', ns.path);
    expect(piped.code).toBe(1);
    expect(piped.out.length).toBeGreaterThan(300);
    const full = await atTerminal(true, 'check', '--config', big, '--netns', ns.path, '--full');
    expect(full.out).toEqual(piped.out);
    const tty = await atTerminal(true, 'check', '--config', big, '--netns', ns.path);
    expect(tty.code).toBe(1);
    expect(tty.out.length).toBeLessThan(25);
    expect(tty.out[0]).toMatch(/^# ip big: table ip big is missing \(\+\d+ -0\)$/);
    expect(tty.out.at(-1)).toBe(`# ${piped.out.length} plan lines (+${piped.out.filter((l) => l.startsWith('+ ')).length} -0), summarised on a terminal: --full prints them all, as a pipe or a file gets them`);
    // (counted from lines without their rules' texts: the same summary as of the whole plan)
    expect(tty.out).toEqual(summarisePlan(piped.out));
    // apply the same way; the kernel gets the whole plan either way.
    const applied = await atTerminal(true, 'apply', '--config', big, '--netns', ns.path);
    expect(applied.code).toBe(0);
    expect(applied.out.length).toBeLessThan(25);
    expect(applied.out.at(-1)).toMatch(/^applied \d+ operations in one batch$/);
    expect(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'post']).split('\n').filter((l) => l.includes('return'))).toHaveLength(300);
    // An edit of the chain (rules replaced, deleted, added at a position): the same summary too.
    const edited = join(dir, 'edited.yaml');
    writeFileSync(edited, postroutingYaml('big', Array.from({ length: 300 }, (_, i) => i % 7 === 3 ? undefined
      : `ip saddr 10.0.${i >> 8}.${i & 255} ip daddr ${i % 5 === 1 ? '172.16.0.0/12' : '192.168.0.0/16'} return`).filter((r) => r !== undefined)));
    const editPiped = await atTerminal(false, 'check', '--config', edited, '--netns', ns.path);
    expect(editPiped.out.filter((l) => l.startsWith('~ replace rule')).length).toBeGreaterThan(SUMMARY_OVER_LINES);
    expect((await atTerminal(true, 'check', '--config', edited, '--netns', ns.path)).out).toEqual(summarisePlan(editPiped.out));
    // A short plan is printed whole on a terminal too.
    const short = await atTerminal(true, 'check', '--config', flannel, '--netns', ns.path);
    expect(short.out.length).toBeLessThanOrEqual(SUMMARY_OVER_LINES);
    expect(short.out.some((l) => l.startsWith('+ add rule'))).toBe(true);
  });

  it('no plan is rendered for a stdout that is /dev/null: the same exit codes, the same kernel state', async () => {
    expect(await atTerminal('devnull', 'check', '--config', big, '--netns', ns.path)).toEqual({ code: 1, out: [], err: [] });
    const applied = await atTerminal('devnull', 'apply', '--config', big, '--netns', ns.path);
    expect(applied).toMatchObject({ code: 0, err: [] });
    expect(applied.out).toEqual([expect.stringMatching(/^applied \d+ operations in one batch$/)]);
    expect(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'post']).split('\n').filter((l) => l.includes('return'))).toHaveLength(300);
    expect(await atTerminal('devnull', 'check', '--config', big, '--netns', ns.path)).toEqual({ code: 0, out: ['in sync'], err: [] });
  });

  it('isDevNull tells /dev/null from a file', () => {
    const fds = [openSync('/dev/null', 'w'), openSync(big, 'r')];
    try {
      expect(fds.map(isDevNull)).toEqual([true, false]);
    } finally {
      fds.forEach((fd) => closeSync(fd));
    }
  });

  it('no progress lines through a pipe, or with --no-progress on a terminal', async () => {
    expect((await atTerminal(false, 'check', '--config', big, '--netns', ns.path)).err).toEqual([]);
    expect((await atTerminal(true, 'check', '--config', big, '--netns', ns.path, '--no-progress')).err).toEqual([]);
    // validate and export take the same flags.
    expect(await atTerminal(true, 'validate', '--config', big, '--no-progress')).toMatchObject({ code: 0, err: [] });
    ns.nft('add table ip x\n');
    expect(await atTerminal(true, 'export', '--table', 'ip', 'x', '--netns', ns.path, '--no-progress')).toMatchObject({ code: 0, err: [] });
    expect((await atTerminal(false, 'export', '--table', 'ip', 'x', '--netns', ns.path, '--progress')).code).toBe(0);
  });
});

describe('progress', () => {
  it('reports a step that took more than a second, on stderr, when enabled', async () => {
    const err: string[] = [];
    const p = new Progress({ err: (s) => err.push(s), errTty: true });
    p.step(() => 'quick');
    await new Promise((r) => setTimeout(r, 1100));
    p.step(() => 'compiled 3 rules');
    expect(err).toHaveLength(1);
    expect(err[0]).toMatch(/^nfkeeper: compiled 3 rules \(1\.\d s\)$/);
    const off: string[] = [];
    const q = new Progress({ err: (s) => off.push(s), errTty: false });
    await new Promise((r) => setTimeout(r, 1100));
    q.step(() => 'slow');
    expect(off).toEqual([]);
  });

  it('summarisePlan counts each difference\'s lines and the total', () => {
    const lines = ['# ip t: chain a is missing', '+ add chain ip t a', '+ add rule ip t a accept',
      '# ip t: rules differ in b', '+ flush chain ip t b', '- old', '+ add rule ip t b drop'];
    expect(summarisePlan(lines)).toEqual(['# ip t: chain a is missing (+2 -0)', '# ip t: rules differ in b (+2 -1)',
      '# 7 plan lines (+4 -1), summarised on a terminal: --full prints them all, as a pipe or a file gets them']);
  });
});

describe('export names everything it cannot write', { timeout: 60_000 }, () => {
  it('an object it cannot write: one line on stderr, exit 1, the rest printed; what it can write is not reported', async () => {
    const ns = createNetns('export-obj');
    try {
      ns.nft(`table ip objs {
  ct timeout t1 {
    protocol tcp
    l3proto arp
    policy = { established: 100 }
  }
  counter c1 {
  }
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    ip daddr 10.0.0.1 return
  }
}
table ip sleepy {
  flags dormant
  chain c {
  }
}
`);
      const r = await cli('export', '--table', 'ip', 'objs', '--table', 'ip', 'sleepy', '--netns', ns.path);
      expect(r.code).toBe(1);
      // (a ct timeout for ARP's conntrack: the config's l3proto is ip, ip6 or inet)
      expect(r.err.split('\n')).toEqual(['nfkeeper: not exported: ip objs: ct timeout t1: nfkeeper cannot write it']);
      expect(r.out).toMatch(/ip daddr 10\.0\.0\.1 return/);
      expect(r.out).toMatch(/counter c1/);
      expect(r.out).toMatch(/flags dormant/);
      const yaml = await cli('export', '--table', 'ip', 'objs', '--format', 'yaml', '--netns', ns.path);
      expect(yaml.code).toBe(1);
      expect(yaml.err).toMatch(/ct timeout t1: nfkeeper cannot write it/);
      // Everything written: exit 0, nothing on stderr.
      expect(await cli('export', '--table', 'ip', 'sleepy', '--netns', ns.path)).toMatchObject({ code: 0, err: '' });
    } finally {
      ns.remove();
    }
  });

  it('what a table holds beyond what export reads (flowtables: its use count) and flags it does not know are named', () => {
    // A table's use count: chains, named sets, objects and flowtables (the kernel here has no flowtable module to make one).
    expect(unreadTableParts({ flags: 0, use: 5 }, 2, 1, 2)).toEqual([]);
    expect(unreadTableParts({ flags: 0, use: 6 }, 2, 1, 2)).toEqual(['1 flowtable or other object nfkeeper does not read (nft list table shows them)']);
    expect(unreadTableParts({ flags: 0x1 | 0x2 | 0x4, use: 0 }, 0, 0, 0)).toEqual([]);
    expect(unreadTableParts({ flags: 0x8, use: 0 }, 0, 0, 0)).toEqual(['table flags 0x8']);
  });
});

describe('flags', { timeout: 60_000 }, () => {
  it('a mistyped flag is named, not reported as a missing required one', async () => {
    for (const cmd of ['validate', 'check', 'apply', 'cleanup', 'run', 'gc']) {
      const r = await cli(cmd, '--confg', flannel);
      expect(r.code, cmd).toBe(2);
      expect(r.err, cmd).toMatch(/^error: unknown option '--confg'/);
      expect(r.err, cmd).toMatch(/Did you mean --config\?/);
      expect(r.err, cmd).not.toMatch(/required option/);
    }
    const e = await cli('export', '--tabel', 'ip', 'x');
    expect(e.err).toMatch(/^error: unknown option '--tabel'/);
  });

  it('a required option left out is still reported', async () => {
    expect(await cli('validate')).toMatchObject({ code: 2, err: "error: required option '-c, --config <file>' not specified" });
    expect((await cli('export')).err).toBe("error: required option '--table <family name...>' not specified");
    expect((await cli('reload', '--pid', '1')).err).toBe("error: required option '--status-file <file>' not specified");
    expect((await cli('owner', 'put', 'x')).err).toBe("error: required option '-f, --file <file>' not specified");
  });

  it('--netns takes the name ip netns gave, or a path; a clear line when neither exists', async () => {
    const ns = createNetns('byname');
    try {
      const r = await cli('apply', '--config', flannel, '--netns', ns.name);
      expect(r.code, r.err).toBe(0);
      expect(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper'])).toMatch(/masquerade/);
      expect(await cli('check', '--config', flannel, '--netns', ns.name)).toMatchObject({ code: 0, out: 'in sync' });
      expect(resolveNetns(ns.name)).toBe(`/run/netns/${ns.name}`);
      expect(resolveNetns(ns.path)).toBe(ns.path);
    } finally {
      ns.remove();
    }
    const missing = await cli('check', '--config', flannel, '--netns', 'nfk-test-no-such');
    expect(missing).toMatchObject({ code: 2,
      err: "nfkeeper: --netns nfk-test-no-such: no such namespace: neither the path nfk-test-no-such nor /run/netns/nfk-test-no-such exists ('ip netns list' shows the named ones)" });
    expect((await cli('check', '--config', flannel, '--netns', '/run/netns/nfk-test-no-such')).err)
      .toBe('nfkeeper: --netns /run/netns/nfk-test-no-such: no such namespace (the path does not exist)');
    expect((await cli('check', '--config', flannel, '--netns', '')).err).toBe('nfkeeper: --netns: empty path');
  });
});

describe('completion', { timeout: 60_000 }, () => {
  const script = async (shell: string) => {
    const r = await cli('completion', shell);
    expect(r.code, r.err).toBe(0);
    const file = join(dir, `completion.${shell}`);
    writeFileSync(file, r.out + '\n');
    return file;
  };
  const has = (shell: string) => spawnSync(shell, ['-c', 'exit 0']).status === 0;

  it('bash: the script loads and completes subcommands, options, choices and namespace names', async () => {
    const file = await script('bash');
    const ns = createNetns('compl');
    try {
      const complete = (...words: string[]) => {
        const r = spawnSync('bash', ['-c', `source "$1" || exit 3; shift; COMP_WORDS=("$@"); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); COMPREPLY=();
          _nfkeeper_complete; printf '%s\\n' "\${COMPREPLY[@]}"`, 'bash', file, 'nfkeeper', ...words], { encoding: 'utf8' });
        expect(r.status, r.stderr).toBe(0);
        return r.stdout.split('\n').filter(Boolean);
      };
      expect(complete('')).toEqual(expect.arrayContaining(['validate', 'check', 'apply', 'export', 'run', 'owner', 'completion', '--help']));
      expect(complete('ap')).toEqual(['apply']);
      expect(complete('apply', '--')).toEqual(expect.arrayContaining(['--config', '--netns', '--json', '--full', '--progress']));
      expect(complete('apply', '--')).not.toContain('--interval');
      expect(complete('run', '--')).toEqual(expect.arrayContaining(['--interval', '--metrics', '--reload-status']));
      // Hidden test-only flags are not offered.
      expect(complete('run', '--')).not.toContain('--socket-mode');
      expect(complete('owner', '')).toEqual(expect.arrayContaining(['put', 'rm', 'ls', 'get']));
      expect(complete('owner', 'put', '--f')).toEqual(['--file']);
      expect(complete('export', '--format', '')).toEqual(['nft', 'yaml']);
      expect(complete('gc', '--backend', 'ipt')).toEqual(['iptables-legacy']);
      expect(complete('completion', '')).toEqual(expect.arrayContaining(['bash', 'zsh', 'fish']));
      expect(complete('check', '--netns', ns.name.slice(0, -2))).toContain(ns.name);
      expect(complete('validate', '--config', join(dir, 'flann'))).toEqual([flannel]);
      // Registered with bash's complete.
      const reg = spawnSync('bash', ['-c', 'source "$1"; complete -p nfkeeper', 'bash', file], { encoding: 'utf8' });
      expect(reg.stdout).toMatch(/complete -o default -F _nfkeeper_complete nfkeeper/);
    } finally {
      ns.remove();
    }
  });

  it.skipIf(!has('zsh'))('zsh: the script loads under compinit and registers the completion', async () => {
    const file = await script('zsh');
    expect(spawnSync('zsh', ['-n', file]).status).toBe(0);
    const r = spawnSync('zsh', ['-c', 'autoload -U compinit && compinit -u -d "$2"; source "$1"; print -r -- ${_comps[nfkeeper]}', 'zsh', file, join(dir, 'zcompdump')],
      { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/_nfkeeper_complete/);
  });

  it.skipIf(!has('fish'))('fish: the script loads and completes subcommands, options and choices', async () => {
    const file = await script('fish');
    const complete = (line: string) => {
      const r = spawnSync('fish', ['--no-config', '-c', `source ${file}; complete -C ${JSON.stringify(line)}`], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      return r.stdout.split('\n').filter(Boolean).map((l) => l.split('\t')[0]);
    };
    expect(complete('nfkeeper ap')).toEqual(['apply']);
    expect(complete('nfkeeper apply --')).toEqual(expect.arrayContaining(['--config', '--netns', '--full']));
    expect(complete('nfkeeper owner ')).toEqual(expect.arrayContaining(['put', 'rm', 'ls', 'get']));
    expect(complete('nfkeeper export --format ')).toEqual(['nft', 'yaml']);
  });

  it('an unknown shell is refused, naming the ones there are', async () => {
    const r = await cli('completion', 'tcsh');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/Allowed choices are bash, zsh, fish/);
  });
});
