/** The watched dumps test/netlink/dump-pause.test.ts sweeps, each summed up as a string: what two views must share to be one. */
import type { NftSocket } from '../../src/netlink/socket.js';

export type PauseKind = 'rules' | 'digests' | 'chains' | 'sets' | 'objects' | 'elements';
export const PAUSE_KINDS: PauseKind[] = ['rules', 'digests', 'chains', 'sets', 'objects', 'elements'];

type Dump = (kind: string, family?: string, table?: string, name?: string, single?: boolean, ruleMode?: number, attempts?: number) => Promise<unknown[]>;

/**
 * Table ip own's rules (each rule's expressions and handle), rule digests (per chain, without
 * handles), chains, sets or objects (names, in the kernel's order), or set big's elements, as one string. `once`: one
 * try (an interrupted dump not taken throws DumpInterruptedError).
 */
export async function dumpSummary(s: NftSocket, kind: PauseKind, once: boolean): Promise<string> {
  const dump = (s as unknown as { dump: Dump }).dump.bind(s);
  const attempts = once ? 1 : 32;
  switch (kind) {
    case 'rules': return JSON.stringify((await dump('rule', 'ip', 'own', undefined, false, 0, attempts) as { chain: string; handle: number; exprs: unknown }[])
      .map((r) => [r.chain, r.handle, r.exprs]));
    case 'digests': return JSON.stringify((await s.listRuleDigests({ family: 'ip', table: 'own', once })).map((c) => [c.chain, c.digests]));
    case 'chains': return JSON.stringify((await dump('chain', 'ip', 'own', undefined, false, 0, attempts) as { name: string }[]).map((c) => c.name));
    case 'sets': return JSON.stringify((await dump('set', 'ip', 'own', undefined, false, 0, attempts) as { name: string }[]).map((c) => c.name));
    case 'objects': return JSON.stringify((await dump('obj', 'ip', 'own', undefined, false, 0, attempts) as { name: string }[]).map((c) => c.name));
    // Set big's elements, in the kernel's order.
    case 'elements': return JSON.stringify(await dump('element', 'ip', 'own', 'big', false, 0, attempts));
  }
}
