/**
 * Loaded into `nfkeeper run` by the after-ready sweep (node --import, test/reliability/after-ready.test.ts):
 * counts the points of the daemon's work once it said "nfkeeper running" (each turn of the event
 * loop a setImmediate gives, each call that opens, writes, syncs, renames or removes a file) and
 * ends the process with SIGKILL at the KILL_AT_POINT-th. KILL_AT_POINT=0: kills at none and says
 * each point on stderr ("point N what"), for the census of a run. No code of nfkeeper's is changed:
 * the bundle calls node:fs through its module object, and setImmediate through the global.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';

const at = Number(process.env.KILL_AT_POINT ?? '0');
const write = fs.writeSync;
let armed = false;
let n = 0;

function point(what) {
  if (!armed) return;
  n++;
  if (at === 0) write(2, `point ${n} ${what}\n`);
  else if (n === at) {
    write(2, `killed at point ${n} ${what}\n`);
    process.kill(process.pid, 'SIGKILL');
  }
}

for (const name of ['openSync', 'fsyncSync', 'fdatasyncSync', 'ftruncateSync', 'closeSync', 'renameSync', 'unlinkSync', 'rmSync', 'writeFileSync', 'mkdirSync']) {
  const f = fs[name];
  fs[name] = function (...args) {
    point(`${name}${typeof args[0] === 'string' ? ` ${args[0].replace(/^.*\//, '')}` : ''}`);
    return f.apply(this, args);
  };
}
fs.writeSync = function (fd, ...rest) {
  // fd 1 and 2: the log, and this hook's own lines.
  if (fd > 2) point('writeSync');
  const r = write.call(this, fd, ...rest);
  if (fd === 1 && !armed) {
    const text = typeof rest[0] === 'string' ? rest[0] : Buffer.from(rest[0]).toString('latin1');
    if (text.includes('"msg":"nfkeeper running"')) armed = true;
  }
  return r;
};
syncBuiltinESMExports();

const immediate = globalThis.setImmediate;
globalThis.setImmediate = function (f, ...args) {
  return immediate((...a) => {
    point('turn');
    return f(...a);
  }, ...args);
};
