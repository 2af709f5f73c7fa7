/**
 * Loaded into `nfkeeper run` by test/reliability/cache-readonly.test.ts (node --import): makes the
 * node:fs calls NFK_FAIL names fail, as the kernel fails them, for the compile cache's files only
 * (a path whose name has `compiled-` in it). NFK_FAIL: `call:CODE`, comma-separated (`rmSync:EROFS`,
 * `linkSync:EACCES`). Each failure is said on stderr (`failed CALL NAME CODE`). No code of
 * nfkeeper's is changed: the bundle calls node:fs through its module object.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';

const write = fs.writeSync;
for (const spec of (process.env.NFK_FAIL ?? '').split(',').filter(Boolean)) {
  const [name, code] = spec.split(':');
  const f = fs[name];
  fs[name] = function (...args) {
    const path = typeof args[0] === 'string' ? args[0] : '';
    if (path.includes('compiled-')) {
      write(2, `failed ${name} ${path.replace(/^.*\//, '')} ${code}\n`);
      throw Object.assign(new Error(`${code}: injected, ${name} '${path}'`), { code, syscall: name, path });
    }
    return f.apply(this, args);
  };
}
syncBuiltinESMExports();
