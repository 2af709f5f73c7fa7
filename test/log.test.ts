import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createDaemonLogger } from '../src/log.js';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { lines, destination };
}

describe('the daemon logger', () => {
  it('a field named level never overwrites pino\'s severity', () => {
    const c = capture();
    const { logger, close } = createDaemonLogger({ level: 'info', destination: c.destination });
    logger.warn({ level: 3, other: 1 }, 'fight');
    logger.error({ level: 'x' }, 'other');
    close();
    expect(c.lines).toMatchObject([{ level: 40, levelField: 3, other: 1, msg: 'fight' }, { level: 50, levelField: 'x', msg: 'other' }]);
  });

  it('repeated identical lines are summarised per window, at their own level', async () => {
    const c = capture();
    const { logger, close } = createDaemonLogger({ level: 'info', destination: c.destination, burst: 3, windowMs: 200 });
    for (let i = 0; i < 100; i++) logger.warn({ i }, 'storm');
    logger.info('different');
    expect(c.lines.filter((l) => l.msg === 'storm')).toHaveLength(3);
    // The window closes (the timer writes the summary even with no further line).
    const t0 = Date.now();
    while (!c.lines.some((l) => l.similarTo === 'storm') && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 20));
    expect(c.lines.find((l) => l.similarTo === 'storm')).toMatchObject({ level: 40, suppressed: 97, msg: '97 similar lines suppressed' });
    // A new window lets the line through again.
    logger.warn('storm');
    close();
    expect(c.lines.filter((l) => l.msg === 'storm')).toHaveLength(4);
    expect(c.lines.some((l) => l.msg === 'different')).toBe(true);
    for (const l of c.lines) expect([30, 40]).toContain(l.level);
  });
});
