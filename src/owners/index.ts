/** Owners: the control API, the state file, owners merged into the desired state, owned GC. */
export { OWNERS_SCHEMA, DEFAULT_LIMITS, DEFAULT_SOCKET, DEFAULT_STATE, type OwnersConfig } from '../config/owners.js';
export {
  OWNER_ID_RE, OWNER_SPEC, OwnerSpecError, compileOwner, ownerChainName, ownerOfRule, ownerTag, parseOwnerChain,
  validateOwnerId, type Owner, type OwnerSpec,
} from './spec.js';
export { mergeOwners, ownedGarbage, ownerIdsOf, type OwnedGarbage } from './merge.js';
export { OwnersStateError, loadOwners, saveOwners } from './state-file.js';
export { MAX_OWNERS, OwnerApplyError, OwnerLimitError, OwnerRegistry, OwnerStateWriteError } from './registry.js';
export {
  HEADERS_TIMEOUT_MS, IDLE_TIMEOUT_MS, MAX_BODY, MAX_CONNECTIONS, REQUEST_TIMEOUT_MS, route, serveControl,
  type ControlOptions, type ControlServer, type Reply,
} from './api.js';
export { NoDaemonError, call } from './client.js';
