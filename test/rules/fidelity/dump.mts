/**
 * Prints the kernel's decoded IR for rules as nft installs them, with the
 * named and anonymous sets those rules made and their elements (a debugging
 * aid for growing the vocabulary): `npx tsx test/rules/fidelity/dump.mts ip 'rule' ...`.
 */
import { open, type Family } from '../../../src/index.js';
import { renderRule } from '../../../src/rules/index.js';
import { createNetns } from '../../helpers/netns.js';

const [family, ...rules] = process.argv.slice(2) as [Family, ...string[]];
const ns = createNetns('dump');
try {
  for (const r of rules) {
    try {
      ns.nft(`add table ${family} t\nadd chain ${family} t c\nadd rule ${family} t c ${r}\n`);
    } catch (e) {
      console.log(`${r}\n  nft: ${String((e as Error).message).split('\n').slice(0, 2).join(' ')}`);
      continue;
    }
    const sock = open({ netns: ns.path });
    try {
      for (const x of await sock.listRules({ family, table: 't' })) console.log(`${r}\n  ${JSON.stringify(x.exprs)}\n  render: ${renderRule(x, family)}`);
      for (const s of await sock.listSets({ family, table: 't' })) {
        const { elements: _e, ...set } = s as typeof s & { elements?: unknown };
        console.log(`  set ${JSON.stringify(set)}`);
        for (const e of await sock.listElements({ family, table: 't', set: s.name })) console.log(`    ${JSON.stringify(e)}`);
      }
    } finally {
      sock.close();
    }
    ns.nft(`delete table ${family} t\n`);
  }
} finally {
  ns.remove();
}
