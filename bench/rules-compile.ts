/**
 * Compiles 10,000 rule texts (the test corpus, cycled, with varying
 * addresses so no two are alike) and prints the time.
 * Run: npx tsx bench/rules-compile.ts
 */
import { performance } from 'node:perf_hooks';
import { compileRule, interfaceTable } from '../src/rules/index.js';
import { CORPUS } from '../test/rules/corpus.js';

const N = 10_000;
const interfaces = interfaceTable({ lo: 1 });
const texts = Array.from({ length: N }, (_, i) => {
  const c = CORPUS[i % CORPUS.length]!;
  // vary the rule so caching cannot help: rewrite the first IPv4 address's last octet (when that stays valid)
  const varied = c.text.replace(/\b(\d+\.\d+\.\d+\.)\d+\b/, (_m, p: string) => `${p}${i % 250}`);
  try {
    compileRule(varied, { family: c.family, table: 'nfk', chain: 'c', interfaces });
    return { family: c.family, text: varied };
  } catch {
    return { family: c.family, text: c.text };
  }
});

function run(): number {
  let exprs = 0;
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const t = texts[i]!;
    exprs += compileRule(t.text, { family: t.family, table: 'nfk', chain: 'c', setIdBase: i + 1, interfaces }).exprs.length;
  }
  const ms = performance.now() - t0;
  if (exprs === 0) throw new Error('nothing compiled');
  return ms;
}

const first = run();
const runs = [run(), run(), run()].sort((a, b) => a - b);
console.log(`compiled ${N} rules: first run ${first.toFixed(1)} ms, then median ${runs[1]!.toFixed(1)} ms ` +
  `(${((runs[1]! * 1000) / N).toFixed(1)} µs per rule, includes canonical rendering)`);
