import { existsSync } from 'node:fs';
import { defineConfig } from 'vitest/config';

// Two tiers. `unit`: logic only, against the fake kernel or none; no root, no network namespace,
// no container (the fake kernel loads the built addon for its rule digests only, opening no
// socket): any user runs it in seconds (`npm run test:unit`), and
// scripts/test.sh runs it as nobody to keep it so. `kernel`: everything else, on the real kernel
// in throwaway namespaces, as root. A file belongs to `unit` only when listed here; a new or
// renamed file falls into `kernel`, which is always safe.
const UNIT = [
  'test/architecture.test.ts',
  'test/base/duration.test.ts',
  'test/bench/apply-ab-summary.test.ts',
  'test/bench/args.test.ts',
  'test/base/sliced.test.ts',
  'test/base/sealed-file.test.ts',
  'test/log.test.ts',
  'test/deploy.test.ts',
  'test/deploy/kubernetes.test.ts',
  'test/docs/config.test.ts',
  'test/docs/readme-cli.test.ts',
  'test/config/cache-write-faults.test.ts',
  'test/config/config.test.ts',
  'test/config/elide.test.ts',
  'test/config/env.test.ts',
  'test/model/stateful-objects.test.ts',
  'test/config/plain-tables.test.ts',
  'test/model/elements.test.ts',
  'test/rules/compile.test.ts',
  'test/rules/keyed-fuzz.test.ts',
  'test/rules/property.test.ts',
  'test/netlink/encode-padding.test.ts',
  'test/netlink/handles.test.ts',
  'test/netlink/creates-all.test.ts',
  'test/netlink/kernel-code.test.ts',
  'test/netlink/libc.test.ts',
  'test/netlink/schema.test.ts',
  'test/keeper/arming.test.ts',
  'test/keeper/attribution-logic.test.ts',
  'test/keeper/behaviour-fake.test.ts',
  'test/keeper/decisions.test.ts',
  'test/model/compact.test.ts',
  'test/keeper/fake.test.ts',
  'test/keeper/follow-events.test.ts',
  'test/keeper/plan.test.ts',
  'test/keeper/scheduler.test.ts',
  'test/keeper/view.test.ts',
  'test/owners/config.test.ts',
  'test/owners/durability.test.ts',
  'test/owners/merge.test.ts',
  'test/owners/registry.test.ts',
  'test/owners/spec-parse.test.ts',
];
// A listed file that moved would silently fall into `kernel`: say so instead.
for (const f of UNIT) if (!existsSync(new URL(f, import.meta.url))) throw new Error(`vitest.config.ts: unit file ${f} does not exist`);

export default defineConfig({
  test: {
    // Native sockets and namespaces: separate processes, two at a time on these 2-core machines.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      {
        extends: true,
        test: {
          name: 'kernel',
          include: ['test/**/*.test.ts'],
          exclude: UNIT,
          // Guards the root namespace's ruleset and removes this run's leftover namespaces.
          globalSetup: ['test/global-setup.ts'],
        },
      },
    ],
  },
});
