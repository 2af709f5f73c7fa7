/**
 * Loaded into `nfkeeper run` by the after-ready sweep (node --import, test/reliability/after-ready.test.ts):
 * counts the points of the daemon's work once it said "nfkeeper running", of two kinds: `fs`, each
 * call that opens, writes, syncs, closes, renames or removes a file (the same in every run), and
 * `turn`, each turn of the event loop a setImmediate gives (the slices; others' turns among them
 * vary a little from run to run), and ends the process with SIGKILL at the one KILL_AT_POINT names
 * ("fs:12", "turn:3"). KILL_AT_POINT=census: kills at none and says each point on stderr ("point
 * fs 12 what"), for the census of a run. KILL_ARM_PATH (a regular expression) counts from the first
 * file call on a path it matches instead (that call is point fs 1): a one-shot command's write of
 * one file (test/keeper/held-proof-faults.test.ts, apply's proof). No code of nfkeeper's is changed:
 * the bundle calls node:fs through its module object, and setImmediate through the global.
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';

const [kind, at] = (process.env.KILL_AT_POINT ?? 'census').split(':');
const write = fs.writeSync;
const armPath = process.env.KILL_ARM_PATH ? new RegExp(process.env.KILL_ARM_PATH) : undefined;
let armed = false;
const n = { fs: 0, turn: 0 };

function point(of, what) {
  if (!armed) return;
  const k = ++n[of];
  if (kind === 'census') write(2, `point ${of} ${k} ${what}\n`);
  else if (of === kind && k === Number(at)) {
    write(2, `killed at point ${of} ${k} ${what}\n`);
    process.kill(process.pid, 'SIGKILL');
  }
}

for (const name of ['openSync', 'fsyncSync', 'fdatasyncSync', 'ftruncateSync', 'closeSync', 'renameSync', 'unlinkSync', 'rmSync', 'writeFileSync', 'mkdirSync']) {
  const f = fs[name];
  fs[name] = function (...args) {
    if (armPath && !armed && typeof args[0] === 'string' && armPath.test(args[0])) armed = true;
    point('fs', `${name}${typeof args[0] === 'string' ? ` ${args[0].replace(/^.*\//, '')}` : ''}`);
    return f.apply(this, args);
  };
}
fs.writeSync = function (fd, ...rest) {
  // fd 1 and 2: the log, and this hook's own lines.
  if (fd > 2) point('fs', 'writeSync');
  const r = write.call(this, fd, ...rest);
  if (fd === 1 && !armed && !armPath) {
    const text = typeof rest[0] === 'string' ? rest[0] : Buffer.from(rest[0]).toString('latin1');
    if (text.includes('"msg":"nfkeeper running"')) armed = true;
  }
  return r;
};
syncBuiltinESMExports();

const immediate = globalThis.setImmediate;
globalThis.setImmediate = function (f, ...args) {
  return immediate((...a) => {
    point('turn', 'turn');
    return f(...a);
  }, ...args);
};
