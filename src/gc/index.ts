/** Foreign garbage collection (the Nomad case). */
export { GC_SCHEMA, DEFAULT_TAG, ID_RE, tagMatcher, type ForeignTable, type GcConfig, type TagMatcher } from '../config/gc.js';
export { LiveSetError, parseLiveSet, readLiveSet, type LiveSource } from './live.js';
export {
  GraceTracker, collect, planBatch, renderGarbage, ruleTags, scan,
  type CollectResult, type Garbage, type GarbageChain, type GarbageRule, type ScanOptions, type ScanResult,
} from './collect.js';
export { gcOnce, type GcOnceOptions } from './command.js';
export { GcLoop, type GcLoopOptions, type GcPass, type GcTotals } from './daemon.js';
export { findGarbage, type FoundGarbage, type GcRuleModel, type GcTableView } from './collect.js';
export { LegacyIptablesError, collectLegacy, parseSave, renderLegacyGarbage, type LegacyCollectResult, type LegacyGarbage } from './legacy.js';
export { readCniCache, readNomadAllocations, type CniCacheSource, type NomadSource } from './live.js';
