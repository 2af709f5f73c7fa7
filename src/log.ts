/**
 * The daemon's logger: pino JSON lines on stdout, with two guarantees a log
 * shipper relies on.
 *  - Volume is bounded. A storm of events, a fight with another writer or a
 *    client retrying in a loop repeats the same line; after `burst` lines with
 *    the same level and message inside `windowMs`, the rest are counted, not
 *    written, and one line "N similar lines suppressed" (same level, with
 *    `suppressed` and `similarTo`) says how many when the window closes.
 *  - Every line's `level` is pino's severity. A logged object with its own
 *    `level` field (a fight level, say) once overwrote it; such a field is
 *    renamed `levelField` here instead.
 */
import pino, { type Logger, type DestinationStream } from 'pino';
import { NfkeeperError } from './base/errors.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = typeof LOG_LEVELS[number];

export function parseLogLevel(text: string): LogLevel {
  if ((LOG_LEVELS as readonly string[]).includes(text)) return text as LogLevel;
  throw new NfkeeperError(`--log-level: '${text}' is not a level; use one of ${LOG_LEVELS.join(', ')}`);
}

export interface DaemonLoggerOptions {
  level: LogLevel;
  /** Identical lines allowed per window before they are counted instead. */
  burst?: number;
  windowMs?: number;
  destination?: DestinationStream;
}

export interface DaemonLogger {
  logger: Logger;
  /** Writes the pending "suppressed" summaries now (at shutdown) and stops the timer. */
  close(): void;
}

interface Window { start: number; count: number; suppressed: number; level: number; msg: string }

export function createDaemonLogger(o: DaemonLoggerOptions): DaemonLogger {
  const burst = o.burst ?? 10;
  const windowMs = o.windowMs ?? 10_000;
  const windows = new Map<string, Window>();
  let bypass = false;
  let logger: Logger;

  const summarise = (w: Window) => {
    if (w.suppressed === 0) return;
    const label = logger.levels.labels[w.level] as pino.Level | undefined;
    bypass = true;
    try {
      logger[label ?? 'info']({ suppressed: w.suppressed, similarTo: w.msg, windowMs }, `${w.suppressed} similar lines suppressed`);
    } finally {
      bypass = false;
    }
    w.suppressed = 0;
  };
  // A storm that stops mid-window still gets its summary line. The timer runs only while a window
  // is open, so an idle daemon that logs nothing is not woken by it; it never keeps the process up.
  let timer: NodeJS.Timeout | undefined;
  const flush = (now: number, all: boolean) => {
    for (const [key, w] of windows) {
      if (all || now - w.start >= windowMs) {
        summarise(w);
        windows.delete(key);
      }
    }
    if (windows.size === 0 && timer) {
      clearInterval(timer);
      timer = undefined;
    }
  };

  logger = pino({
    level: o.level,
    base: { pid: process.pid },
    hooks: {
      logMethod(args: unknown[], method, level) {
        if (bypass) return method.apply(this, args as Parameters<typeof method>);
        let msg = '';
        const first = args[0];
        if (typeof first === 'object' && first !== null) {
          if (!(first instanceof Error) && Object.prototype.hasOwnProperty.call(first, 'level')) {
            const { level: levelField, ...rest } = first as Record<string, unknown>;
            args[0] = { ...rest, levelField };
          }
          msg = typeof args[1] === 'string' ? args[1] : first instanceof Error ? first.message : '';
        } else {
          msg = String(first);
        }
        const key = `${level}\0${msg}`;
        const now = Date.now();
        let w = windows.get(key);
        if (w && now - w.start >= windowMs) {
          summarise(w);
          w = undefined;
        }
        if (!w) {
          w = { start: now, count: 0, suppressed: 0, level, msg };
          windows.set(key, w);
          if (!timer) {
            timer = setInterval(() => flush(Date.now(), false), Math.max(100, windowMs / 2));
            timer.unref();
          }
        }
        if (++w.count > burst) {
          w.suppressed++;
          return;
        }
        return method.apply(this, args as Parameters<typeof method>);
      },
    },
  }, o.destination ?? pino.destination({ dest: 1, sync: true }));

  return {
    logger,
    close() {
      clearInterval(timer);
      flush(Date.now(), true);
    },
  };
}
