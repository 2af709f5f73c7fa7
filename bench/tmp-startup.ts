import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../src/config/config.js';
import { Keeper } from '../src/keeper/keeper.js';
const n = Number(process.argv[2] ?? 100000);
const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const yaml = 'tables:\n  - family: ip\n    name: nfk-rss\n    chains:\n      - name: owned\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n' +
    Array.from({ length: n }, (_, i) => `          - ip saddr ${addr(i)} ip daddr 192.0.2.1 return`).join('\n') + '\n';
const ns = `nfk-tmpst-${process.pid}`;
execFileSync('ip', ['netns', 'add', ns]);
const hwm = () => Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
const t0 = performance.now();
const p = (s: string) => console.log(`${((performance.now() - t0) / 1000).toFixed(2)}s rss ${rss().toFixed(0)} hwm ${hwm().toFixed(0)} ${s}`);
try {
  const config = parseConfig(yaml, 'x.yaml');
  p('compiled');
  const k = new Keeper({ config, netns: `/run/netns/${ns}`, intervalMs: 1000 });
  k.on('repaired', (r) => p(`repaired ${r.cause} ops ${r.ops}`));
  k.on('mirror', (m) => p(`mirror ${JSON.stringify(m)}`));
  const dumps = async () => (await k.metrics.dumps.get()).values[0]?.value ?? 0;
  await k.start();
  p(`ready dumps ${await dumps()}`);
  let d = await dumps();
  for (let i = 0; i < 30; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const now = await dumps();
    if (now !== d) { p(`dumps ${now}`); d = now; }
  }
  p('end');
  await k.stop();
} finally { execFileSync('ip', ['netns', 'del', ns]); }
