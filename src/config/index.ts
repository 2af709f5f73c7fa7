/** The YAML config: loading with positioned errors (every one of them), and the limits it is held to. */
export {
  MAX_CONFIG_BYTES, MAX_CONFIG_RULES, PRIORITY_NAMES, loadConfig, parseConfig, parseNftConfig, parsePriority,
  type Config,
} from './config.js';
export { type ChainConfig, type TableConfig } from '../model/desired.js';
