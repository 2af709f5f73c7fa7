import { describe, expect, it } from 'vitest';
import { DurationError, parseBoundedDuration, parseDuration } from '../../src/base/duration.js';

describe('parseDuration', () => {
  it('takes Go-style compound durations and bare milliseconds', () => {
    expect(parseDuration('1m30s')).toBe(90_000);
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('2h45m10s')).toBe(9_910_000);
    expect(parseDuration('100us')).toBe(0.1);
    expect(parseDuration('250')).toBe(250);
    expect(parseDuration(' 1s ')).toBe(1000);
  });

  it('refuses anything else with a DurationError naming the text', () => {
    for (const bad of ['5x', '', 's', '1m30', '1 m', '-1s', '1s2', 'ms1']) {
      expect(() => parseDuration(bad), bad).toThrow(DurationError);
    }
    expect(() => parseDuration('5x')).toThrow("'5x' is not a duration (like 500ms, 30s, 1m30s, 1h)");
  });

  it('bounds name the flag and the range', () => {
    expect(parseBoundedDuration('--interval', '1m30s', 10, 3_600_000)).toBe(90_000);
    expect(() => parseBoundedDuration('--interval', '0', 10, 3_600_000)).toThrow('--interval: 0 is out of range; use between 10ms and 1h');
    expect(() => parseBoundedDuration('--interval', '61m', 10, 3_600_000)).toThrow('--interval: 61m is out of range; use between 10ms and 1h');
  });
});
