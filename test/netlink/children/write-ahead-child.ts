/**
 * Child process for write-ahead.test.ts, run under strace: one commit of `rules` rules into a
 * fresh table of the namespace, then prints the batch's size as the kernel would have it (one
 * JSON line). Usage: write-ahead-child.ts <rules> <netns path>.
 */
import { open, type Op } from '../../../src/index.js';
import { ownedRules } from '../fixtures.js';

async function main(rules: number, netns: string): Promise<void> {
  const s = open({ netns });
  const [family, table, chain] = ['ip' as const, `wa${rules}`, 'c'];
  const shapes = ownedRules('a');
  const ops: Op[] = [
    { verb: 'add', object: 'table', family, name: table },
    { verb: 'add', object: 'chain', family, table, name: chain },
  ];
  for (let i = 0; i < rules; i++) ops.push({ verb: 'add', object: 'rule', family, table, chain, exprs: shapes[i % shapes.length]! });
  await s.commit(ops);
  const held = await s.listRules({ family, table, chain });
  s.close();
  console.log(JSON.stringify({ rules: held.length }));
}

void main(Number(process.argv[2]), process.argv[3]!).catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
