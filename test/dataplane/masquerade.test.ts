import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import type { Keeper } from '../../src/keeper/keeper.js';
import { startKeeper } from '../helpers/keeper.js';
import { createTopology, NODE_EXTERNAL_ADDR, POD_ADDR, type Topology } from '../helpers/topology.js';
import { sleep } from '../helpers/wait.js';
import { FLANNEL_YAML, handles, nextRepair } from '../keeper/helpers.js';

describe('dataplane: real packets from a pod through the node', () => {
  let topo: Topology;
  let keeper: Keeper | undefined;

  beforeEach(async () => {
    topo = await createTopology();
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
    topo.remove();
  });

  it('without rules probes arrive unmasqueraded; with nfkeeper they arrive from the node', async () => {
    expect(new Set(await topo.probe(0.2))).toEqual(new Set([POD_ADDR]));
    keeper = await startKeeper(topo.node, { config: parseConfig(FLANNEL_YAML) });
    expect(new Set(await topo.probe(0.3))).toEqual(new Set([NODE_EXTERNAL_ADDR]));
  });

  it('repair mode: a probe leaks unmasqueraded only while a deleted masquerade rule is missing', async () => {
    keeper = await startKeeper(topo.node, { config: parseConfig(FLANNEL_YAML) });
    const probing = topo.probeTimed(2);
    await sleep(300);
    // Each deletion's window: from before the nft command starts until the keeper reports the
    // repair committed. (nft runs synchronously in this process, so the in-process keeper reads
    // the event only once nft has exited: on a loaded machine the windows are long.)
    const windows: [number, number][] = [];
    for (let i = 0; i < 5; i++) {
      const h = handles(topo.node, 'ip', 'nfkeeper', 'postrouting');
      const repaired = nextRepair(keeper);
      const from = Date.now();
      topo.node.nft(`delete rule ip nfkeeper postrouting handle ${h[1]}`);
      await repaired;
      windows.push([from, Date.now()]);
      await sleep(200);
    }
    const seen = await probing;
    const leaked = seen.filter((p) => p.from !== NODE_EXTERNAL_ADDR);
    const open = windows.reduce((a, [f, t]) => a + t - f, 0);
    console.log(`[dataplane] repair mode: ${seen.length} probes, ${leaked.length} not masqueraded, 5 deletions, ` +
      `rule missing for at most ${open} ms in all`);
    expect(seen.length).toBeGreaterThan(20);
    // Every probe outside the windows went out masqueraded: the rule was back, in its place. The
    // clocks are the same (CLOCK_REALTIME); 2 ms of slack for the probe's print rounding.
    const outside = leaked.filter((p) => !windows.some(([f, t]) => p.sentAt >= f - 2 && p.sentAt <= t + 2));
    expect(outside).toEqual([]);
    expect(seen.slice(-5).map((p) => p.from)).toEqual(Array(5).fill(NODE_EXTERNAL_ADDR));
  });

  it('protect mode: tampering is refused and every probe is masqueraded, also across kill and claim', async () => {
    const yaml = FLANNEL_YAML.replace('    name: nfkeeper\n', '    name: nfkeeper\n    protect: true\n');
    keeper = await startKeeper(topo.node, { config: parseConfig(yaml) });
    const probing = topo.probe(1.5);
    await sleep(200);
    for (const script of ['flush ruleset', 'delete table ip nfkeeper', 'flush chain ip nfkeeper postrouting']) {
      try { topo.node.nft(script); } catch { /* EPERM: refused by the kernel */ }
    }
    await keeper.stop();  // the daemon goes away: the table stays as an orphan
    keeper = undefined;
    await sleep(200);
    keeper = await startKeeper(topo.node, { config: parseConfig(yaml) });  // and is claimed again
    const seen = await probing;
    console.log(`[dataplane] protect mode: ${seen.length} probes, ${seen.filter((s) => s !== NODE_EXTERNAL_ADDR).length} not masqueraded`);
    expect(seen.length).toBeGreaterThan(20);
    expect(new Set(seen)).toEqual(new Set([NODE_EXTERNAL_ADDR]));
  });
});
