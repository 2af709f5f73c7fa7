/**
 * Prints the kernel's rules and sets (decoded) of rules as nft installs them
 * (a debugging aid): `npx tsx test/rules/fidelity/dumpset.mts FAMILY 'rule' ...`.
 */
import { open, type Family } from '../../../src/index.js';
import { createNetns } from '../../helpers/netns.js';

const [family, ...rules] = process.argv.slice(2) as [Family, ...string[]];
const ns = createNetns('dumpset');
try {
  for (const r of rules) {
    try {
      ns.nft(`add table ${family} t\nadd chain ${family} t c\nadd rule ${family} t c ${r}\n`);
    } catch (e) {
      console.log(`${r}\n  nft: ${String((e as Error).message).split('\n').slice(0, 2).join(' ')}`);
      continue;
    }
    const sock = open({ netns: ns.path });
    for (const x of await sock.listRules({ family, table: 't' })) console.log(`${r}\n  ${JSON.stringify(x.exprs)}`);
    for (const s of await sock.listSets({ family, table: 't' })) {
      const { elements: _e, ...set } = s as typeof s & { elements?: unknown };
      console.log(`  set ${JSON.stringify(set)}`);
      for (const e of await sock.listElements({ family, table: 't', set: s.name })) console.log(`    ${JSON.stringify(e)}`);
    }
    sock.close();
    ns.nft(`delete table ${family} t\n`);
  }
} finally {
  ns.remove();
}
