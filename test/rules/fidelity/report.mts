/**
 * Prints the fidelity corpus' counts (and writes every rule's outcome to the
 * file named by FIDELITY_OUT, if set): `npx tsx test/rules/fidelity/report.mts`.
 * FAM=ip,ip6 limits the families; GREP=word limits the rules; CORPUS=nft-py
 * (or peers, extra) counts one corpus file alone.
 */
import { writeFileSync } from 'node:fs';
import { loadCorpus, runFamily, summarize, type EntryResult } from './run.js';

const grep = process.env.GREP;
const files = process.env.CORPUS ? [process.env.CORPUS] : ['nft-py', 'peers', 'extra'];
const all = files.flatMap((f) => loadCorpus(`./${f}.corpus`)).filter((e) => !grep || e.text.includes(grep));
const fams = (process.env.FAM ?? 'ip,ip6,inet').split(',');
const res: EntryResult[] = [];
for (const f of fams) res.push(...await runFamily(f as 'ip', all.filter((e) => e.family === f)));
console.log(JSON.stringify(summarize(res), null, 1));
if (process.env.FIDELITY_OUT) writeFileSync(process.env.FIDELITY_OUT, JSON.stringify(res, null, 1));
