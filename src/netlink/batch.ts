/**
 * A batch is one kernel transaction: the operations queued here travel in a
 * single BATCH_BEGIN ... BATCH_END and take effect all together or not at
 * all. Verbs mirror nft's (add, create, insert, replace, delete, flush), and
 * each operation is checked when it is queued, so a malformed one never
 * reaches the kernel and its error names the op and the field.
 */
import { InvalidOperationError } from '../errors.js';
import { EXPR_KINDS, type Expr, type Family } from './expr.js';
import type { Chain, NftSet, Rule, SetElement, Table } from './objects.js';

export type TableOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'table' }
  & Pick<Table, 'family' | 'name'> & Partial<Pick<Table, 'flags' | 'handle' | 'userdata'>>;
export type ChainOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'chain' }
  & Pick<Chain, 'family' | 'table' | 'name'> & Partial<Omit<Chain, 'family' | 'table' | 'name' | 'use'>>;
export type RuleOp = { verb: 'add' | 'insert' | 'replace' | 'delete'; object: 'rule' }
  & Pick<Rule, 'family' | 'table' | 'chain'> & Partial<Omit<Rule, 'family' | 'table' | 'chain'>>;
export type SetOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'set' }
  & Pick<NftSet, 'family' | 'table' | 'name'> & Partial<Omit<NftSet, 'family' | 'table' | 'name'>>;
export type ElementOp = {
  verb: 'add' | 'delete'; object: 'element'; family: Family; table: string; set: string;
  setId?: number; elements: SetElement[];
};

export type Op = TableOp | ChainOp | RuleOp | SetOp | ElementOp;
export type Verb = Op['verb'];

const FAMILIES = new Set<string>(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);
const KINDS = new Set<string>(EXPR_KINDS);
const VERBS: Record<Op['object'], readonly string[]> = {
  table: ['add', 'create', 'delete', 'flush'],
  chain: ['add', 'create', 'delete', 'flush'],
  rule: ['add', 'insert', 'replace', 'delete'],
  set: ['add', 'create', 'delete', 'flush'],
  element: ['add', 'delete'],
};
const HEX = /^(?:[0-9a-f]{2})*$/;
// NFT_USERDATA_MAXLEN
const MAX_USERDATA = 256;
// NFT_NAME_MAXLEN is 256 including the terminating NUL.
const MAX_NAME = 255;

/** A short nft-style description of an op, for error messages and logs. */
export function describeOp(op: Op): string {
  switch (op.object) {
    case 'table': return `${op.verb} table ${op.family} ${op.name}`;
    case 'chain': return `${op.verb} chain ${op.family} ${op.table} ${op.name}`;
    case 'rule': {
      const at = op.handle !== undefined ? ` handle ${op.handle}`
        : op.position !== undefined ? ` position ${op.position}` : '';
      return `${op.verb} rule ${op.family} ${op.table} ${op.chain}${at}`;
    }
    case 'set': return `${op.verb} set ${op.family} ${op.table} ${op.name}`;
    case 'element': return `${op.verb} element ${op.family} ${op.table} ${op.set}`;
  }
}

// Validation runs for every queued op, so it allocates no closures per call
// (cheap in V8, but not under esbuild's keep-names wrapping used by tsx).
function checkName(index: number, field: string, v: unknown, required: boolean): void {
  if (v === undefined && !required) return;
  if (typeof v !== 'string' || v.length === 0) throw new InvalidOperationError(index, field, 'must be a non-empty string');
  if (v.length > MAX_NAME / 4 && Buffer.byteLength(v) > MAX_NAME) {
    throw new InvalidOperationError(index, field, `longer than ${MAX_NAME} bytes`);
  }
  if (v.includes('\0')) throw new InvalidOperationError(index, field, 'contains a NUL byte');
}

function checkU32(index: number, field: string, v: unknown): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
    throw new InvalidOperationError(index, field, 'must be a u32');
  }
}

function checkHandle(index: number, field: string, v: unknown): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new InvalidOperationError(index, field, 'must be a positive integer');
  }
}

function checkHex(index: number, field: string, v: unknown, max = MAX_USERDATA): void {
  if (v === undefined) return;
  if (typeof v !== 'string' || !HEX.test(v)) throw new InvalidOperationError(index, field, 'must be lowercase hex bytes');
  if (v.length / 2 > max) throw new InvalidOperationError(index, field, `is ${v.length / 2} bytes, more than ${max}`);
}

/** Throws InvalidOperationError when `op` cannot be encoded. */
export function validateOp(op: Op, index: number): void {
  if (typeof op !== 'object' || op === null) throw new InvalidOperationError(index, 'op', 'must be an object');
  if (!Object.hasOwn(VERBS, op.object)) {
    throw new InvalidOperationError(index, 'object', `must be one of ${Object.keys(VERBS).join(', ')}`);
  }
  if (!VERBS[op.object].includes(op.verb)) {
    throw new InvalidOperationError(index, 'verb', `${op.object} takes ${VERBS[op.object].join(', ')}, not '${String(op.verb)}'`);
  }
  if (!FAMILIES.has(op.family)) throw new InvalidOperationError(index, 'family', `unknown family '${String(op.family)}'`);

  switch (op.object) {
    case 'table':
      checkName(index, 'name', op.name, true);
      checkU32(index, 'flags', op.flags);
      checkHandle(index, 'handle', op.handle);
      checkHex(index, 'userdata', op.userdata);
      break;
    case 'chain':
      checkName(index, 'table', op.table, true);
      checkName(index, 'name', op.name, true);
      checkHandle(index, 'handle', op.handle);
      if (op.hook !== undefined) {
        if (op.type === undefined) throw new InvalidOperationError(index, 'type', 'a base chain needs a type');
        if (typeof op.priority !== 'number' || !Number.isInteger(op.priority)) {
          throw new InvalidOperationError(index, 'priority', 'a base chain needs an integer priority');
        }
      }
      checkHex(index, 'userdata', op.userdata);
      break;
    case 'rule':
      checkName(index, 'table', op.table, true);
      checkName(index, 'chain', op.chain, true);
      checkHandle(index, 'handle', op.handle);
      checkHandle(index, 'position', op.position);
      checkHex(index, 'userdata', op.userdata);
      if ((op.verb === 'replace' || op.verb === 'delete') && op.handle === undefined) {
        throw new InvalidOperationError(index, 'handle', `${op.verb} rule needs the rule's handle`);
      }
      if (op.compat !== undefined) {
        if (typeof op.compat !== 'object' || op.compat === null) {
          throw new InvalidOperationError(index, 'compat', 'must be { proto, flags? }');
        }
        checkU32(index, 'compat.proto', op.compat.proto);
        checkU32(index, 'compat.flags', op.compat.flags);
      }
      if (op.verb !== 'delete') {
        if (!Array.isArray(op.exprs)) throw new InvalidOperationError(index, 'exprs', 'must be an array of expressions');
        validateExprs(op.exprs, index);
      }
      break;
    case 'set':
      checkName(index, 'table', op.table, true);
      checkName(index, 'name', op.name, true);
      checkU32(index, 'id', op.id);
      checkU32(index, 'flags', op.flags);
      checkHex(index, 'userdata', op.userdata);
      if (op.verb === 'add' || op.verb === 'create') {
        checkU32(index, 'keyType', op.keyType);
        checkU32(index, 'keyLen', op.keyLen);
        if (op.keyLen === undefined) throw new InvalidOperationError(index, 'keyLen', 'a new set needs a key length');
      }
      if (op.elements !== undefined) {
        if (!Array.isArray(op.elements)) throw new InvalidOperationError(index, 'elements', 'must be an array');
        for (let i = 0; i < op.elements.length; i++) validateElement(op.elements[i]!, index, `elements[${i}]`);
      }
      break;
    case 'element':
      checkName(index, 'table', op.table, true);
      checkName(index, 'set', op.set, true);
      checkU32(index, 'setId', op.setId);
      if (!Array.isArray(op.elements)) throw new InvalidOperationError(index, 'elements', 'must be an array');
      for (let i = 0; i < op.elements.length; i++) validateElement(op.elements[i]!, index, `elements[${i}]`);
      break;
  }
}

const ELEMENT_HEX = ['key', 'keyEnd', 'data', 'userdata'] as const;

function validateElement(e: SetElement, index: number, at: string): void {
  if (typeof e !== 'object' || e === null) throw new InvalidOperationError(index, at, 'must be an object');
  for (const k of ELEMENT_HEX) {
    const v = e[k];
    if (v !== undefined) checkHex(index, `${at}.${k}`, v, k === 'userdata' ? MAX_USERDATA : MAX_DATA);
  }
}

// --- expression schema ------------------------------------------------------
// What the native encoder accepts per kind (native/expr_table.cc). The encoder
// ignores fields it does not know, so a misspelt field would silently vanish
// from the rule; here it is refused instead, before anything is sent.

type FieldSpec =
  | 'reg' | 'u8' | 'u16' | 'u32' | 'i32' | 'u64' | 'str' | 'xtname'
  | 'data'   // a data register value: hex, at most NFT_DATA_VALUE_MAXLEN (64) bytes
  | 'blob'   // hex, at most 0xff00 bytes
  | readonly string[];  // an enum by name (a number passes through)

interface KindSpec {
  required: Record<string, FieldSpec>;
  optional?: Record<string, FieldSpec>;
  check?: (e: Record<string, unknown>) => string | undefined;
}

const META_KEYS = ['len', 'protocol', 'priority', 'mark', 'iif', 'oif', 'iifname', 'oifname',
  'iiftype', 'oiftype', 'skuid', 'skgid', 'nftrace', 'rtclassid', 'secmark', 'nfproto', 'l4proto',
  'ibrname', 'obrname', 'pkttype', 'cpu', 'iifgroup', 'oifgroup', 'cgroup', 'random', 'ipsec',
  'iifkind', 'oifkind', 'ibrpvid', 'ibrvproto', 'time', 'day', 'hour', 'sdif', 'sdifname'] as const;
const CT_KEYS = ['state', 'direction', 'status', 'mark', 'secmark', 'expiration', 'helper',
  'l3proto', 'saddr', 'daddr', 'protocol', 'proto-src', 'proto-dst', 'label', 'packets', 'bytes',
  'avgpkt', 'zone', 'event', 'ip saddr', 'ip daddr', 'ip6 saddr', 'ip6 daddr', 'id'] as const;
const VERDICTS = ['drop', 'accept', 'stolen', 'queue', 'continue', 'break', 'jump', 'goto', 'return'] as const;
const CMP_OPS = ['eq', 'neq', 'lt', 'lte', 'gt', 'gte'] as const;

const oneOf = (e: Record<string, unknown>, a: string, b: string): string | undefined =>
  (e[a] === undefined) === (e[b] === undefined) ? `needs exactly one of '${a}' and '${b}'` : undefined;

const EXPR_SPECS: Record<string, KindSpec> = {
  payload: {
    required: { base: ['ll', 'network', 'transport', 'inner'], offset: 'u32', len: 'u32' },
    optional: { dreg: 'reg', sreg: 'reg', csumType: 'u32', csumOffset: 'u32', csumFlags: 'u32' },
    check: (e) => oneOf(e, 'dreg', 'sreg'),
  },
  cmp: { required: { sreg: 'reg', op: CMP_OPS, data: 'data' } },
  range: { required: { sreg: 'reg', op: ['eq', 'neq'], from: 'data', to: 'data' } },
  bitwise: {
    required: { sreg: 'reg', dreg: 'reg', len: 'u32' },
    optional: { op: ['bool', 'lshift', 'rshift'], mask: 'data', xor: 'data', data: 'data' },
  },
  byteorder: { required: { sreg: 'reg', dreg: 'reg', op: ['ntoh', 'hton'], len: 'u32', size: 'u32' } },
  meta: { required: { key: META_KEYS }, optional: { dreg: 'reg', sreg: 'reg' }, check: (e) => oneOf(e, 'dreg', 'sreg') },
  ct: { required: { key: CT_KEYS }, optional: { dreg: 'reg', sreg: 'reg', dir: 'u8' }, check: (e) => oneOf(e, 'dreg', 'sreg') },
  immediate: {
    required: { dreg: 'reg' },
    optional: { data: 'data', verdict: VERDICTS, chain: 'str' },
    check: (e) => {
      const jumps = e.verdict === 'jump' || e.verdict === 'goto';
      if ((e.data === undefined) === (e.verdict === undefined)) return "needs exactly one of 'data' and 'verdict'";
      if (jumps && e.chain === undefined) return `a ${String(e.verdict)} needs a 'chain'`;
      if (!jumps && e.chain !== undefined) return "'chain' only goes with a jump or goto verdict";
      return undefined;
    },
  },
  lookup: { required: { sreg: 'reg', set: 'str' }, optional: { setId: 'u32', dreg: 'reg', flags: 'u32' } },
  nat: {
    required: { type: ['snat', 'dnat'], family: ['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev'] },
    optional: { regAddrMin: 'reg', regAddrMax: 'reg', regProtoMin: 'reg', regProtoMax: 'reg', flags: 'u32' },
  },
  masq: { required: {}, optional: { flags: 'u32', regProtoMin: 'reg', regProtoMax: 'reg' } },
  redir: { required: {}, optional: { flags: 'u32', regProtoMin: 'reg', regProtoMax: 'reg' } },
  counter: { required: {}, optional: { packets: 'u64', bytes: 'u64' } },
  limit: { required: { rate: 'u64', unit: 'u64' }, optional: { burst: 'u32', type: 'u32', flags: 'u32' } },
  fib: { required: { result: ['oif', 'oifname', 'type'], flags: 'u32', dreg: 'reg' } },
  match: { required: { name: 'xtname', rev: 'u32', info: 'blob' } },
  target: { required: { name: 'xtname', rev: 'u32', info: 'blob' } },
  log: {
    required: {},
    optional: { prefix: 'str', group: 'u16', snaplen: 'u32', qthreshold: 'u16', level: 'u32', flags: 'u32' },
  },
  reject: { required: {}, optional: { type: 'u32', code: 'u8' } },
  quota: { required: { bytes: 'u64' }, optional: { flags: 'u32', consumed: 'u64' } },
  rt: { required: { key: ['classid', 'nexthop4', 'nexthop6', 'mtu', 'ipsec'], dreg: 'reg' } },
  numgen: { required: { dreg: 'reg', modulus: 'u32', type: 'u32' }, optional: { offset: 'u32' } },
  notrack: { required: {} },
  unknown: { required: { name: 'str', data: 'blob' } },
};

const MAX_DATA = 64;
const MAX_BLOB = 0xff00;
// XT_EXTENSION_MAXNAMELEN - 1; libnftnl would silently truncate a longer name.
const MAX_XT_NAME = 28;

function intIn(v: unknown, lo: number, hi: number): string | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi ? undefined : `must be an integer in ${lo}..${hi}`;
}

function checkField(spec: FieldSpec, v: unknown): string | undefined {
  if (typeof spec !== 'string') {
    if (typeof v === 'number') return intIn(v, -0x80000000, 0xffffffff);
    return typeof v === 'string' && spec.includes(v) ? undefined : `must be one of ${spec.join(', ')} (or a number)`;
  }
  switch (spec) {
    case 'reg': return intIn(v, 0, 31);
    case 'u8': return intIn(v, 0, 0xff);
    case 'u16': return intIn(v, 0, 0xffff);
    case 'u32': return intIn(v, 0, 0xffffffff);
    case 'i32': return intIn(v, -0x80000000, 0x7fffffff);
    case 'u64':
      return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? undefined : 'must be a non-negative safe integer';
    case 'str':
      if (typeof v !== 'string' || v.length === 0) return 'must be a non-empty string';
      return v.includes('\0') ? 'contains a NUL byte' : undefined;
    case 'xtname':
      if (typeof v !== 'string' || v.length === 0) return 'must be a non-empty string';
      return Buffer.byteLength(v) > MAX_XT_NAME ? `longer than ${MAX_XT_NAME} bytes` : undefined;
    case 'data':
    case 'blob': {
      if (typeof v !== 'string' || !HEX.test(v)) return 'must be lowercase hex bytes';
      const max = spec === 'data' ? MAX_DATA : MAX_BLOB;
      return v.length / 2 > max ? `is ${v.length / 2} bytes, more than ${max}` : undefined;
    }
  }
}

function validateExprs(exprs: readonly Expr[], index: number): void {
  // NFT_RULE_MAXEXPRS
  if (exprs.length > 128) throw new InvalidOperationError(index, 'exprs', 'a rule holds at most 128 expressions');
  for (let i = 0; i < exprs.length; i++) {
    const e = exprs[i];
    if (typeof e !== 'object' || e === null || !KINDS.has(e.kind)) {
      throw new InvalidOperationError(index, `exprs[${i}].kind`,
        `unknown expression kind '${String((e as { kind?: unknown } | null)?.kind)}'`);
    }
    const spec = COMPILED_SPECS.get(e.kind)!;
    const rec = e as unknown as Record<string, unknown>;
    for (const [k, t] of spec.required) {
      const v = rec[k];
      if (v === undefined) throw new InvalidOperationError(index, `exprs[${i}].${k}`, `a ${e.kind} expression needs '${k}'`);
      const why = checkField(t, v);
      if (why) throw new InvalidOperationError(index, `exprs[${i}].${k}`, why);
    }
    for (const k in rec) {
      const v = rec[k];
      if (k === 'kind' || v === undefined || spec.requiredKeys.has(k)) continue;
      const t = spec.optional.get(k);
      if (t === undefined) throw new InvalidOperationError(index, `exprs[${i}].${k}`, `not a field of a ${e.kind} expression`);
      const why = checkField(t, v);
      if (why) throw new InvalidOperationError(index, `exprs[${i}].${k}`, why);
    }
    const why = spec.check?.(rec);
    if (why) throw new InvalidOperationError(index, `exprs[${i}]`, `${e.kind}: ${why}`);
  }
}

interface CompiledSpec {
  required: [string, FieldSpec][];
  requiredKeys: Set<string>;
  optional: Map<string, FieldSpec>;
  check?: (e: Record<string, unknown>) => string | undefined;
}

const COMPILED_SPECS = new Map<string, CompiledSpec>(Object.entries(EXPR_SPECS).map(([kind, s]) => {
  const c: CompiledSpec = {
    required: Object.entries(s.required),
    requiredKeys: new Set(Object.keys(s.required)),
    optional: new Map(Object.entries(s.optional ?? {})),
  };
  if (s.check) c.check = s.check;
  return [kind, c];
}));

/** Queues operations for one atomic commit. */
export class Batch {
  readonly ops: Op[] = [];

  /** Queues `op` after validating it; returns this for chaining. */
  push(op: Op): this {
    validateOp(op, this.ops.length);
    this.ops.push(op);
    return this;
  }

  add(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  add(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  add(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this;
  add(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  add(object: 'element', e: Omit<ElementOp, 'verb' | 'object'>): this;
  add(object: Op['object'], o: object): this {
    return this.push({ ...o, verb: 'add', object } as Op);
  }

  create(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  create(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  create(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  create(object: 'table' | 'chain' | 'set', o: object): this {
    return this.push({ ...o, verb: 'create', object } as Op);
  }

  /** Inserts a rule before `position` (a handle), or at the start of the chain. */
  insert(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this {
    return this.push({ ...r, verb: 'insert', object });
  }

  /** Replaces the rule with `handle` in place. */
  replace(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this {
    return this.push({ ...r, verb: 'replace', object });
  }

  delete(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  delete(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  delete(object: 'rule', r: Omit<RuleOp, 'verb' | 'object' | 'exprs'> & { exprs?: Expr[] }): this;
  delete(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  delete(object: 'element', e: Omit<ElementOp, 'verb' | 'object'>): this;
  delete(object: Op['object'], o: object): this {
    return this.push({ ...o, verb: 'delete', object } as Op);
  }

  /** flush table: every rule of its chains; flush chain: its rules; flush set: its elements. */
  flush(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  flush(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  flush(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  flush(object: 'table' | 'chain' | 'set', o: object): this {
    return this.push({ ...o, verb: 'flush', object } as Op);
  }

  get length(): number {
    return this.ops.length;
  }
}
