/**
 * validateOp: every queued operation is checked before anything is sent, so
 * a malformed one never reaches the kernel and its error names the op and the
 * field. Expressions are checked against EXPR_SCHEMA (expr.ts), the same
 * description the addon's encoder is generated from: the encoder ignores
 * fields it does not know, so a misspelt field would silently vanish from the
 * rule; here it is refused instead.
 */
import { InvalidOperationError } from '../base/errors.js';
import { u16le } from '../base/little-endian.js';
import { EncodedRuleOp, type Op } from './ops.js';
import { EXPR_SCHEMA, FAMILY, MAX_BLOB, MAX_DATA, MAX_STATEFUL_EXPRS, STATEFUL_KINDS, type Expr, type FieldSpec, type KindSpec } from './expr.js';
import { CHAIN_F, OBJ_TYPE, type SetElement } from './objects.js';

const FAMILIES = new Set<string>(Object.keys(FAMILY.values));
const VERBS: Record<Op['object'], readonly string[]> = {
  table: ['add', 'create', 'delete', 'flush'],
  chain: ['add', 'create', 'delete', 'flush'],
  rule: ['add', 'insert', 'replace', 'delete'],
  set: ['add', 'create', 'delete', 'flush'],
  element: ['add', 'delete'],
  obj: ['add', 'create', 'delete'],
};
const HEX = /^(?:[0-9a-f]{2})*$/;
// NFT_USERDATA_MAXLEN
const MAX_USERDATA = 256;
// NFT_NAME_MAXLEN is 256 including the terminating NUL.
const MAX_NAME = 255;
// NFT_RULE_MAXEXPRS
const MAX_EXPRS = 128;

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

// NFTA_RULE_EXPRESSIONS, a nest
const RULE_EXPRESSIONS = 4, NLA_F_NESTED = 0x8000;

/** `b` is one NFTA_RULE_EXPRESSIONS attribute, its length its own (what encodeExprs gives). */
function checkEncodedExprs(index: number, b: unknown): void {
  if (!Buffer.isBuffer(b) || b.length < 4 || b.length > 0xffff || u16le(b, 0) !== b.length
    || (u16le(b, 2) & ~NLA_F_NESTED) !== RULE_EXPRESSIONS) {
    throw new InvalidOperationError(index, 'encoded', 'must be one NFTA_RULE_EXPRESSIONS attribute');
  }
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
      // a bound chain is added by its id, the kernel names it
      checkName(index, 'name', op.name, !(op.verb === 'add' && op.id !== undefined && op.flags !== undefined && (op.flags & CHAIN_F.BINDING) !== 0));
      checkU32(index, 'id', op.id);
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
      checkName(index, 'chain', op.chain, !(op.verb === 'add' && op.chainId !== undefined));
      checkU32(index, 'chainId', op.chainId);
      if (op.chain !== undefined && op.chainId !== undefined) throw new InvalidOperationError(index, 'chainId', "takes either 'chain' or 'chainId', not both");
      checkHandle(index, 'handle', op.handle);
      checkHandle(index, 'position', op.position);
      checkU32(index, 'id', op.id);
      checkU32(index, 'positionId', op.positionId);
      if (op.position !== undefined && op.positionId !== undefined) {
        throw new InvalidOperationError(index, 'positionId', "takes either 'position' or 'positionId', not both");
      }
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
      // Encoded already from expressions this check passed when they were stored: only the attribute's frame.
      if (op instanceof EncodedRuleOp) checkEncodedExprs(index, op.encoded);
      else if (op.verb !== 'delete') {
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
      checkU32(index, 'gcInterval', op.gcInterval);
      checkU32(index, 'objType', op.objType);
      if (op.fieldLen !== undefined) {
        // Fewer than NFT_REG32_COUNT parts (libnftnl finds the count at the first zero length), each 1-255 bytes (u8)
        if (!Array.isArray(op.fieldLen) || op.fieldLen.length < 1 || op.fieldLen.length > 15
          || op.fieldLen.some((n) => !Number.isInteger(n) || n < 1 || n > 255)) {
          throw new InvalidOperationError(index, 'fieldLen', 'must be 1 to 15 part lengths of 1-255 bytes');
        }
      }
      if (op.verb === 'add' || op.verb === 'create') {
        checkU32(index, 'keyType', op.keyType);
        checkU32(index, 'keyLen', op.keyLen);
        if (op.keyLen === undefined) throw new InvalidOperationError(index, 'keyLen', 'a new set needs a key length');
      }
      validateStatefulExprs(op.exprs, index, 'exprs');
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
    case 'obj':
      checkName(index, 'table', op.table, true);
      checkName(index, 'name', op.name, true);
      checkHandle(index, 'handle', op.handle);
      checkHex(index, 'userdata', op.userdata);
      if (!Object.hasOwn(OBJ_TYPE, op.type)) throw new InvalidOperationError(index, 'type', `must be one of ${Object.keys(OBJ_TYPE).join(', ')}`);
      if (op.verb !== 'delete') validateObjData(op.type, op.data, index);
      break;
  }
}

/** What the addon's object table (native/object.cc) takes per field: its width, or a string. */
const OBJ_FIELDS: Record<string, Record<string, 8 | 16 | 32 | 64 | 'str' | 'u32[]'>> = {
  counter: { packets: 64, bytes: 64 },
  quota: { bytes: 64, consumed: 64, flags: 32 },
  'ct helper': { name: 'str', l3proto: 16, l4proto: 8 },
  limit: { rate: 64, unit: 64, burst: 32, type: 32, flags: 32 },
  'ct timeout': { l3proto: 16, l4proto: 8, policy: 'u32[]' },
  secmark: { ctx: 'str' },
  'ct expectation': { l3proto: 16, l4proto: 8, dport: 16, timeout: 32, size: 8 },
  synproxy: { mss: 16, wscale: 8, flags: 32 },
};

function validateObjData(type: string, data: unknown, index: number): void {
  if (typeof data !== 'object' || data === null) throw new InvalidOperationError(index, 'data', 'must be an object');
  const fields = OBJ_FIELDS[type]!;
  for (const [k, v] of Object.entries(data)) {
    const w = fields[k];
    if (w === undefined) throw new InvalidOperationError(index, `data.${k}`, `is not a field of a ${type} (${Object.keys(fields).join(', ')})`);
    if (w === 'str') {
      if (typeof v !== 'string' || v.includes('\0')) throw new InvalidOperationError(index, `data.${k}`, 'must be a string without NUL');
    } else if (w === 'u32[]') {
      // (libnftnl holds at most 11 timeouts: TCP's states)
      if (!Array.isArray(v) || v.length > 11 || v.some((x) => typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x >= 2 ** 32)) {
        throw new InvalidOperationError(index, `data.${k}`, 'must be an array of at most 11 u32');
      }
    } else if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || (w < 64 && v >= 2 ** w)) {
      throw new InvalidOperationError(index, `data.${k}`, `must be a u${w}`);
    }
  }
}

const ELEMENT_HEX = ['key', 'keyEnd', 'data', 'userdata'] as const;

function validateElement(e: SetElement, index: number, at: string): void {
  if (typeof e !== 'object' || e === null) throw new InvalidOperationError(index, at, 'must be an object');
  for (const k of ELEMENT_HEX) {
    const v = e[k];
    if (v !== undefined) checkHex(index, `${at}.${k}`, v, k === 'userdata' ? MAX_USERDATA : MAX_DATA);
  }
  if (e.objref !== undefined) checkName(index, `${at}.objref`, e.objref, true);
  validateStatefulExprs(e.exprs, index, `${at}.exprs`);
  for (const k of ['timeout', 'expiration'] as const) {
    const v = e[k];
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 0)) {
      throw new InvalidOperationError(index, `${at}.${k}`, 'must be a non-negative safe integer (ms)');
    }
  }
}

// --- expressions, by the schema ----------------------------------------------------

function intIn(v: unknown, lo: number, hi: number): string | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi ? undefined : `must be an integer in ${lo}..${hi}`;
}

/** Why `v` does not fit field `spec`, or undefined. Exported for the schema's tests. */
export function checkField(spec: FieldSpec, v: unknown): string | undefined {
  switch (spec.type) {
    case 'enum': {
      // A number passes through: the decoder gives one for a value the schema does not name.
      if (typeof v === 'number') return intIn(v, -0x80000000, 0xffffffff);
      const names = spec.enum!.values;
      return typeof v === 'string' && Object.hasOwn(names, v) ? undefined
        : `must be one of ${Object.keys(names).join(', ')} (or a number)`;
    }
    // NFT_REG32_15 is 23; the kernel refuses the gaps, the encoder's u32 would take any.
    case 'reg': return intIn(v, 0, 31);
    case 'u8': return intIn(v, 0, 0xff);
    case 'u16': return intIn(v, 0, 0xffff);
    case 'u32': return intIn(v, 0, 0xffffffff);
    case 'i32': return intIn(v, -0x80000000, 0x7fffffff);
    case 'u64':
      return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? undefined : 'must be a non-negative safe integer';
    case 'str':
      if (typeof v !== 'string' || v.length === 0) return 'must be a non-empty string';
      if (v.includes('\0')) return 'contains a NUL byte';
      return spec.max !== undefined && Buffer.byteLength(v) > spec.max ? `longer than ${spec.max} bytes` : undefined;
    case 'data':
    case 'blob': {
      if (typeof v !== 'string' || !HEX.test(v)) return 'must be lowercase hex bytes';
      const max = spec.max ?? (spec.type === 'data' ? MAX_DATA : MAX_BLOB);
      return v.length / 2 > max ? `is ${v.length / 2} bytes, more than ${max}` : undefined;
    }
  }
}

interface CompiledKind {
  required: [string, FieldSpec][];
  requiredKeys: Set<string>;
  fields: Map<string, FieldSpec>;
  exactlyOne: readonly (readonly [string, string])[];
  check: KindSpec['check'];
}

const KINDS = new Map<string, CompiledKind>(Object.entries(EXPR_SCHEMA).map(([kind, s]: [string, KindSpec]) => {
  const fields = Object.entries(s.fields);
  const required = fields.filter(([, f]) => !f.optional);
  return [kind, {
    required,
    requiredKeys: new Set(required.map(([k]) => k)),
    fields: new Map(fields),
    exactlyOne: s.exactlyOne ?? [],
    check: s.check,
  }];
}));

/**
 * Expression lists already checked that cannot change since: frozen arrays of frozen expressions
 * (every field the schema knows is a primitive). The keeper's event repairs re-add the same frozen
 * rules on every repair; checking them once keeps the repair path short. Only the first ops of a
 * batch are remembered (small batches: repairs), so a 100,000-rule install does not leave 100,000
 * entries behind.
 */
const checkedFrozen = new WeakSet<readonly Expr[]>();
const REMEMBER_UP_TO_OP = 64;

/**
 * The rule expressions checked last: an expression of the next rule that is the same frozen object
 * at the same place was checked then, and is not again (a chain of compacted rules shares most of
 * its expressions, src/model/compact.ts).
 */
let lastChecked: readonly Expr[] = [];

function validateExprs(exprs: readonly Expr[], index: number): void {
  if (checkedFrozen.has(exprs)) return;
  validateExprsOnce(exprs, index, 'exprs', lastChecked);
  lastChecked = exprs;
  if (index < REMEMBER_UP_TO_OP && Object.isFrozen(exprs) && exprs.every((e) => Object.isFrozen(e))) checkedFrozen.add(exprs);
}

/**
 * Throws InvalidOperationError (op 0) when a rule's expressions would not pass a batch's check: the
 * check an expression list is given before it is encoded once and kept (encodeRuleExprs). An
 * expression that is the same frozen object at the same place in `previous` was checked there.
 */
export function validateRuleExprs(exprs: readonly Expr[], previous: readonly Expr[] = []): void {
  validateExprsOnce(exprs, 0, 'exprs', previous);
}

const STATEFUL = new Set<string>(STATEFUL_KINDS);

/** A set's, an element's or a dynset's own expressions: 1 or 2 stateful ones (counter, limit, quota, connlimit). */
function validateStatefulExprs(exprs: unknown, index: number, at: string): void {
  if (exprs === undefined) return;
  if (!Array.isArray(exprs) || exprs.length < 1 || exprs.length > MAX_STATEFUL_EXPRS) {
    throw new InvalidOperationError(index, at, `must be 1 to ${MAX_STATEFUL_EXPRS} expressions`);
  }
  for (let i = 0; i < exprs.length; i++) {
    const k = (exprs[i] as { kind?: unknown } | null)?.kind;
    if (typeof k !== 'string' || !STATEFUL.has(k)) {
      throw new InvalidOperationError(index, `${at}[${i}].kind`, `must be one of ${STATEFUL_KINDS.join(', ')}`);
    }
  }
  validateExprsOnce(exprs as Expr[], index, at);
}

function validateExprsOnce(exprs: readonly Expr[], index: number, at = 'exprs', previous: readonly Expr[] = []): void {
  if (exprs.length > MAX_EXPRS) throw new InvalidOperationError(index, 'exprs', `a rule holds at most ${MAX_EXPRS} expressions`);
  for (let i = 0; i < exprs.length; i++) {
    const e = exprs[i];
    // Checked as the previous rule's and unchangeable since (a dynset's own list is an array of its own).
    if (e !== undefined && e === previous[i] && Object.isFrozen(e) && e.kind !== 'dynset') continue;
    const spec = typeof e === 'object' && e !== null && typeof e.kind === 'string' ? KINDS.get(e.kind) : undefined;
    if (spec === undefined) {
      throw new InvalidOperationError(index, `${at}[${i}].kind`,
        `unknown expression kind '${String((e as { kind?: unknown } | null)?.kind)}'`);
    }
    const kind = e!.kind;
    const rec = e as unknown as Record<string, unknown>;
    // (indexed loops: an iterator and a destructured pair per field and per expression were most of
    // what validating a big batch allocated)
    for (let j = 0; j < spec.required.length; j++) {
      const k = spec.required[j]![0], f = spec.required[j]![1];
      const v = rec[k];
      if (v === undefined) throw new InvalidOperationError(index, `${at}[${i}].${k}`, `a ${kind} expression needs '${k}'`);
      const why = checkField(f, v);
      if (why) throw new InvalidOperationError(index, `${at}[${i}].${k}`, why);
    }
    for (const k in rec) {
      const v = rec[k];
      if (k === 'kind' || v === undefined || spec.requiredKeys.has(k)) continue;
      // a dynset's own statements
      if (k === 'exprs' && kind === 'dynset') { validateStatefulExprs(v, index, `${at}[${i}].exprs`); continue; }
      const f = spec.fields.get(k);
      if (f === undefined) throw new InvalidOperationError(index, `${at}[${i}].${k}`, `not a field of a ${kind} expression`);
      const why = checkField(f, v);
      if (why) throw new InvalidOperationError(index, `${at}[${i}].${k}`, why);
    }
    for (let j = 0; j < spec.exactlyOne.length; j++) {
      const a = spec.exactlyOne[j]![0], b = spec.exactlyOne[j]![1];
      if ((rec[a] === undefined) === (rec[b] === undefined)) {
        throw new InvalidOperationError(index, `${at}[${i}]`, `${kind}: needs exactly one of '${a}' and '${b}'`);
      }
    }
    const why = spec.check?.(rec);
    if (why) throw new InvalidOperationError(index, `${at}[${i}]`, `${kind}: ${why}`);
  }
}
