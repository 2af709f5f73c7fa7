/**
 * Set elements as the kernel identifies them, and the element operations that turn what the kernel
 * holds into what is desired; what makes two set definitions the same set.
 */
import { SET_ELEM_F, SET_F, type NftSet, type SetElement } from '../netlink/objects.js';
import { statefulKey } from '../rules/stateful.js';

/** What makes two definitions the same set: everything but handle, name and elements. */
export function setDefinitionKey(s: NftSet): string {
  // the kernel gives a set without a size 65535 (0xffff) once a rule's dynset (add/update @set) binds it
  const size = (s.flags & SET_F.EVAL) && s.size === 0xffff ? 0 : s.size ?? 0;
  return JSON.stringify([s.flags & ~SET_F.ANONYMOUS, s.keyType, s.keyLen, s.dataType ?? 0, s.dataLen ?? 0, s.policy ?? 0,
    size, s.timeout ?? 0, s.gcInterval ?? 0, s.fieldLen ?? [], s.userdata ?? '', s.objType ?? 0, statefulKey(s.exprs)]);
}

/** An element's identity in its set: key, key end and whether it ends an interval. */
export function elementId(e: SetElement): string {
  const f = e.flags ?? 0;
  // The key alone for the common case (no string building for 100,000 hash elements).
  if (e.keyEnd === undefined && (f & (SET_ELEM_F.INTERVAL_END | SET_ELEM_F.CATCHALL)) === 0) return e.key ?? '';
  return `${e.key ?? ''}/${e.keyEnd ?? ''}/${f & SET_ELEM_F.INTERVAL_END ? 'e' : ''}${f & SET_ELEM_F.CATCHALL ? 'c' : ''}`;
}

/** Two elements with every field equal (the same element object, or a reload's new copy of it). */
export function sameElementFields(o: SetElement, n: SetElement): boolean {
  return o === n || (o.key === n.key && o.data === n.data && o.verdict === n.verdict && o.chain === n.chain && o.objref === n.objref && o.flags === n.flags
    && o.keyEnd === n.keyEnd && o.userdata === n.userdata && o.timeout === n.timeout && o.expiration === n.expiration
    && (o.exprs === n.exprs || statefulKey(o.exprs) === statefulKey(n.exprs)));
}

/**
 * What an element holds besides its identity. A timeout counts only when the
 * config gives one, and the expiration never does: the kernel counts it down.
 * Its statements count only when the config gives them (the kernel gives every
 * element of a set with statements the set's) and the kernel's element says what
 * they are, and without their state.
 */
export function sameContent(want: SetElement, have: SetElement): boolean {
  return (want.data ?? '') === (have.data ?? '') && (want.verdict ?? '') === (have.verdict ?? '')
    && (want.chain ?? '') === (have.chain ?? '') && (want.objref ?? '') === (have.objref ?? '') && (want.userdata ?? '') === (have.userdata ?? '')
    && (want.timeout === undefined || want.timeout === have.timeout)
    // (an element from a notification carries none: the monitor does not decode them)
    && (want.exprs === undefined || have.exprs === undefined || statefulKey(want.exprs) === statefulKey(have.exprs));
}

export interface ElementDiff {
  add: SetElement[];
  /** Kernel elements as dumped (a delete op names only their identity: deletable()). */
  delete: SetElement[];
  /** Elements the config gives with a timeout that are gone: expired, so left to the kernel. */
  expired: number;
}

/**
 * The element operations that turn `have` into `want`: kernel elements that
 * are not wanted or hold other data go, wanted ones that are missing or
 * differ come (a changed element is a delete and an add). Elements with a
 * timeout in the config are the kernel's once added: one that is gone has
 * expired and is not added again. `timedSeen` says which were added (the keeper
 * remembers; see DiffOptions.timedSeen): a timed element that is not is added.
 * Without it every one that is gone counts as expired. A dynamic set's extra elements are the
 * data path's (`add @set`), so they stay.
 */
export function diffElements(want: readonly SetElement[], have: readonly SetElement[], set: NftSet,
  timedSeen?: ReadonlySet<string>): ElementDiff {
  const haveById = new Map<string, SetElement>();
  for (const e of have) haveById.set(elementId(e), e);
  const out: ElementDiff = { add: [], delete: [], expired: 0 };
  // Matched kernel elements are marked in haveById: what is left unmarked is not wanted (one map,
  // not a second set of every wanted id, whose garbage dominated a big diff).
  for (const w of want) {
    const id = elementId(w);
    const h = haveById.get(id);
    if (h === MATCHED) continue;  // a duplicate of a wanted element
    if (!h) {
      if ((w.timeout !== undefined || w.expiration !== undefined) && (!timedSeen || timedSeen.has(id))) { out.expired++; continue; }
      out.add.push(w);
      continue;
    }
    haveById.set(id, MATCHED);
    if (!sameContent(w, h)) {
      out.delete.push(h);
      out.add.push(w);
    }
  }
  const keepExtra = (set.flags & (SET_F.EVAL)) !== 0;
  if (!keepExtra) for (const h of haveById.values()) if (h !== MATCHED) out.delete.push(h);
  return out;
}

const MATCHED: SetElement = Object.freeze({});

/** What a delete names: the identity only. */
export function deletable(e: SetElement): SetElement {
  return { key: e.key, ...(e.keyEnd !== undefined ? { keyEnd: e.keyEnd } : {}), flags: e.flags ?? 0 };
}
