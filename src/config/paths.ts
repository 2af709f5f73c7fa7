/**
 * Where the daemon's files are unless the config says otherwise. A module of its own, without the
 * schema's imports, because the command line's option defaults name them and a command that does
 * not read a config (version, status) should not load the config's schema for that.
 */
export const DEFAULT_SOCKET = '/run/nfkeeper/nfkeeper.sock';
export const DEFAULT_STATE = '/var/lib/nfkeeper/owners.json';
/** The daemon's restart record (src/keeper/record.ts): under /run, so a reboot clears it. */
export const DEFAULT_RECORD_DIR = '/run/nfkeeper';
/**
 * The compile cache (src/config/compile-cache.ts) of `run` and `apply`: persistent storage, so the
 * first start after a reboot and an apply at boot find the config compiled. Its key holds nothing
 * of one boot that is not checked again (interface indexes are resolved again).
 */
export const DEFAULT_CACHE_DIR = '/var/cache/nfkeeper';

/**
 * --cache-dir's default for this user: root's DEFAULT_CACHE_DIR, another user's under their own
 * cache directory ($XDG_CACHE_HOME, else ~/.cache), as bin/nfkeeper.js places V8's code cache: a
 * user who may not write /var/cache (nor trust root's files there) still has a cache. None when the
 * environment names no absolute directory.
 */
export function defaultCacheDir(uid = process.geteuid?.(), env: Readonly<Record<string, string | undefined>> = process.env): string | undefined {
  if (uid === 0 || uid === undefined) return DEFAULT_CACHE_DIR;
  const home = env.XDG_CACHE_HOME || (env.HOME && `${env.HOME}/.cache`);
  return home && home.startsWith('/') ? `${home}/nfkeeper` : undefined;
}
/** The environment variable that sets --cache-dir when the command line does not. */
export const CACHE_DIR_ENV = 'NFKEEPER_CACHE_DIR';
