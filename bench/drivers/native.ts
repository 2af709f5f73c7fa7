/**
 * native: nfkeeper's addon over one long-lived netfilter netlink socket.
 *   check, mode 'tick':   NFT_MSG_GETGEN; unchanged since the last good verify means in sync,
 *                         otherwise a full verify.
 *   check, mode 'verify': always the full verify: the base chain (GETCHAIN) and a dump
 *                         filtered in the kernel by table and chain, compared structurally
 *                         (field by field, equal to comparing canonical JSON of the expressions;
 *                         counters' packets/bytes and rule handles ignored).
 *   repair: one batch guarded by the generation: add table, add chain, flush chain, add 4 rules.
 */
import { GenerationMismatchError, NetlinkError, open, type Expr, type NftSocket, type Op } from '../../src/index.js';
import type { BenchNetns } from '../lib/netns.js';
import type { Driver } from './types.js';
import { canonical, NATIVE_RULES, NFT_CHAIN, NFT_PRIORITY } from './flannel.js';

const FAMILY = 'ip';

/**
 * Structural equality of two expressions, the same verdict as comparing their
 * canonical JSON (fields with undefined values dropped), without building
 * strings; a counter's packets and bytes are state, not configuration.
 */
function sameExpr(got: Expr, want: Expr): boolean {
  if (got.kind !== want.kind) return false;
  if (got.kind === 'counter') return true;
  const g = got as unknown as Record<string, unknown>, w = want as unknown as Record<string, unknown>;
  let gn = 0, wn = 0;
  for (const k in g) {
    const v = g[k];
    if (v === undefined) continue;
    gn++;
    const x = w[k];
    if (v !== x && (typeof v !== 'object' || canonical(v) !== canonical(x))) return false;
  }
  for (const k in w) if (w[k] !== undefined) wn++;
  return gn === wn;
}

function sameRule(got: readonly Expr[], want: readonly Expr[]): boolean {
  if (got.length !== want.length) return false;
  for (let i = 0; i < got.length; i++) if (!sameExpr(got[i]!, want[i]!)) return false;
  return true;
}

export class NativeDriver implements Driver {
  readonly name: string;
  readonly describe: string;
  readonly forksPerCheck = 0;
  private readonly sock: NftSocket;
  private readonly want = NATIVE_RULES;
  private lastGood: number | undefined;

  constructor(ns: BenchNetns, private readonly mode: 'tick' | 'verify', private readonly table = 'nfk-flannel') {
    this.name = mode === 'tick' ? 'native tick' : 'native verify';
    this.describe = mode === 'tick'
      ? 'generation id read (NFT_MSG_GETGEN); full verify only when it moved'
      : 'GETCHAIN + table/chain-filtered GETRULE dump, structural comparison';
    this.sock = open({ netns: ns.path });
  }

  async check(): Promise<boolean> {
    if (this.mode === 'tick') {
      const gen = this.sock.generation();
      if (gen === this.lastGood) return true;
      const ok = await this.verify();
      this.lastGood = ok ? gen : undefined;
      return ok;
    }
    return this.verify();
  }

  async verify(): Promise<boolean> {
    try {
      const chain = await this.sock.getChain(FAMILY, this.table, NFT_CHAIN);
      if (!chain || chain.type !== 'nat' || chain.hook !== 'postrouting' || chain.priority !== NFT_PRIORITY
        || chain.policy !== 'accept') return false;
      const rules = await this.sock.listRules({ family: FAMILY, table: this.table, chain: NFT_CHAIN });
      if (rules.length !== this.want.length) return false;
      for (let i = 0; i < rules.length; i++) if (!sameRule(rules[i]!.exprs, this.want[i]!)) return false;
      return true;
    } catch (e) {
      if (e instanceof NetlinkError && e.errno === 2 /* ENOENT */) return false;
      throw e;
    }
  }

  private ops(): Op[] {
    const t = this.table;
    return [
      { verb: 'add', object: 'table', family: FAMILY, name: t },
      { verb: 'add', object: 'chain', family: FAMILY, table: t, name: NFT_CHAIN, type: 'nat', hook: 'postrouting', priority: NFT_PRIORITY, policy: 'accept' },
      { verb: 'flush', object: 'chain', family: FAMILY, table: t, name: NFT_CHAIN },
      ...NATIVE_RULES.map((exprs): Op => ({ verb: 'add', object: 'rule', family: FAMILY, table: t, chain: NFT_CHAIN, exprs })),
    ];
  }

  async repair(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const gen = this.sock.generation();
      try {
        await this.sock.commit(this.ops(), { expectGeneration: gen });
        this.lastGood = undefined;
        return;
      } catch (e) {
        if (e instanceof GenerationMismatchError && attempt < 5) continue;
        throw e;
      }
    }
  }

  async damage(): Promise<void> {
    const rules = await this.sock.listRules({ family: FAMILY, table: this.table, chain: NFT_CHAIN });
    const victim = rules[1];
    if (!victim?.handle) throw new Error('nothing to damage');
    // A separate socket, as another process would.
    const other = open({ netns: this.sock.netns });
    try {
      await other.commit([{ verb: 'delete', object: 'rule', family: FAMILY, table: this.table, chain: NFT_CHAIN, handle: victim.handle }]);
    } finally {
      other.close();
    }
  }

  close(): void {
    this.sock.close();
  }
}
