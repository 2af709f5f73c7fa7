#!/usr/bin/env node
// Extracts the rules nft's own test suite (nftables tests/py/*/*.t) expects nft to accept
// for the ip, ip6 and inet families into test/rules/fidelity/nft-py.corpus, one per line:
//   family <TAB> file <TAB> rule text
// Usage: node scripts/nft-py-corpus.mjs <nftables checkout or git dir> [rev]
// (read with `git show REV:path` so a bare mirror works). Rules marked `- ` (disabled),
// `;fail`, set/element/object definitions (`!`, `?`, `%`) are left out.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';

const [repo, rev = 'HEAD'] = process.argv.slice(2);
if (!repo) { console.error('usage: nft-py-corpus.mjs <nftables repo> [rev]'); process.exit(2); }
const git = (...a) => execFileSync('git', ['-C', repo, ...a], { encoding: 'utf8', maxBuffer: 1 << 26 });
const version = /AC_INIT\(\[nftables\], \[([^\]]+)\]/.exec(git('show', `${rev}:configure.ac`))?.[1];
const files = git('ls-tree', '-r', '--name-only', rev, 'tests/py').split('\n').filter((f) => f.endsWith('.t')).sort();
const out = [];
const seen = new Set();
for (const f of files) {
  const fams = [];
  const lines = git('show', `${rev}:${f}`).split('\n');
  for (const l of lines) {
    const m = /^\*(ip|ip6|inet);/.exec(l);
    if (m) fams.push(m[1]);
  }
  if (fams.length === 0) continue;
  for (const l of lines) {
    if (!l || /^[#:*!?%\-\s]/.test(l)) continue;
    const parts = l.split(';');
    if (parts[1] !== 'ok') continue;
    const rule = parts[0].trim();
    for (const fam of fams) {
      const key = `${fam}\t${rule}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(`${fam}\t${f.slice('tests/py/'.length)}\t${rule}`);
    }
  }
}
const head = [
  `# Rules from nftables ${version ?? '?'} tests/py (GPL-2.0), extracted by scripts/nft-py-corpus.mjs.`,
  '# family <TAB> source file <TAB> rule: every line nft\'s test suite marks ;ok for ip, ip6 or inet.',
];
writeFileSync(new URL('../test/rules/fidelity/nft-py.corpus', import.meta.url), head.concat(out).join('\n') + '\n');
console.log(`${out.length} rules from ${files.length} files`);
