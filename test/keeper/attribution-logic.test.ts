/**
 * The attribution's logic apart from the kernel: cgroup paths to unit, container and pod (the
 * formats of runtimes this machine cannot run: systemd and cgroupfs drivers of docker, containerd,
 * CRI-O and podman, Kubernetes' kubepods hierarchies), the bounded ring, the bounded comm labels,
 * and a pid that /proc no longer shows or shows as another program.
 */
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Attribution, CommLabels, cgroupOwner, cgroupPath, resolveCommitter } from '../../src/keeper/attribution.js';
import type { MonitorBatch } from '../../src/netlink/events.js';
import { tempDir } from '../helpers/tmp.js';

const ID = 'f3a9c1e2d4b5a6978877665544332211ffeeddccbbaa00998877665544332211';
const UID = '0b7c3e4a-1d2f-4a5b-8c9d-0e1f2a3b4c5d';

describe('cgroup paths', () => {
  it.each([
    ['/system.slice/nftables.service', { unit: 'nftables.service' }],
    ['/system.slice/run-r3f2a.scope', { unit: 'run-r3f2a.scope' }],
    ['/user.slice/user-0.slice/session-4.scope', { unit: 'session-4.scope' }],
    [`/system.slice/docker-${ID}.scope`, { container: { id: ID, runtime: 'docker' } }],
    [`/docker/${ID}`, { container: { id: ID, runtime: 'docker' } }],
    [`/machine.slice/libpod-${ID}.scope/container`, { container: { id: ID, runtime: 'podman' } }],
    [`/libpod_parent/libpod-${ID}`, { container: { id: ID, runtime: 'podman' } }],
    [`/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-${ID}.scope`, { unit: 'user@1000.service', container: { id: ID, runtime: 'podman' } }],
    [`/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${UID.replace(/-/g, '_')}.slice/cri-containerd-${ID}.scope`,
      { pod: UID, container: { id: ID, runtime: 'containerd' } }],
    [`/kubepods.slice/kubepods-pod${UID.replace(/-/g, '_')}.slice/crio-${ID}.scope`, { pod: UID, container: { id: ID, runtime: 'cri-o' } }],
    [`/kubepods/burstable/pod${UID}/${ID}`, { pod: UID, container: { id: ID } }],
    // Seen from a container's own cgroup namespace: the path climbs out of it first.
    [`/../../kubepods-besteffort-pod${UID.replace(/-/g, '_')}.slice/cri-containerd-${ID}.scope`, { pod: UID, container: { id: ID, runtime: 'containerd' } }],
    ['/', {}],
    [`/system.slice/libpod-conmon-${ID}.scope`, {}],
  ])('%s', (path, owner) => {
    expect(cgroupOwner(path)).toEqual(owner);
  });

  it('takes the unified hierarchy, else the systemd one, else the first controller off the root', () => {
    expect(cgroupPath('0::/system.slice/a.service\n')).toBe('/system.slice/a.service');
    expect(cgroupPath('2:cpu:/x\n1:name=systemd:/system.slice/b.service\n0::/\n')).toBe('/system.slice/b.service');
    expect(cgroupPath('9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n')).toBe('/process_api/abc');
    expect(cgroupPath('0::/\n')).toBe('/');
  });
});

describe('the committer in /proc', () => {
  function fakeProc(pid: number, files: Record<string, string>, exe?: string): string {
    const root = tempDir('proc');
    mkdirSync(join(root, String(pid)));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(root, String(pid), name), text);
    if (exe) symlinkSync(exe, join(root, String(pid), 'exe'));
    return root;
  }

  it('a pid /proc does not have: the kernel\'s pid and name, and why nothing more', () => {
    expect(resolveCommitter(4242, 'nft', { procRoot: tempDir('proc'), initialPidNamespace: true }))
      .toEqual({ pid: 4242, comm: 'nft', unresolved: 'the process had exited before it could be looked up' });
  });

  it('a pid that now names another program is not taken for the committer', () => {
    const root = fakeProc(77, { comm: 'sshd\n', cmdline: 'sshd\0', cgroup: '0::/system.slice/ssh.service\n' });
    expect(resolveCommitter(77, 'nft', { procRoot: root, initialPidNamespace: true }))
      .toEqual({ pid: 77, comm: 'nft', unresolved: 'pid 77 is now \'sshd\': reused, or the process renamed itself' });
  });

  it('outside the initial pid namespace /proc is not looked at', () => {
    const root = fakeProc(77, { comm: 'nft\n' });
    expect(resolveCommitter(77, 'nft', { procRoot: root, initialPidNamespace: false }).unresolved).toMatch(/initial pid namespace/);
  });

  it('reads exe, cmdline, parent and cgroup', () => {
    const root = fakeProc(77, { comm: 'nft\n', cmdline: 'nft\0-f\0/etc/nftables.conf\0', stat: '77 (nft) R 1 77 77 0',
      cgroup: '0::/system.slice/nftables.service\n' }, '/usr/sbin/nft');
    mkdirSync(join(root, '1'));
    writeFileSync(join(root, '1', 'comm'), 'systemd\n');
    expect(resolveCommitter(77, 'nft', { procRoot: root, initialPidNamespace: true })).toEqual({
      pid: 77, comm: 'nft', exe: '/usr/sbin/nft', cmdline: 'nft -f /etc/nftables.conf', parent: { pid: 1, comm: 'systemd' },
      cgroup: '/system.slice/nftables.service', unit: 'nftables.service',
    });
  });
});

describe('the ring and the labels', () => {
  const batch = (generation: number, comm: string): MonitorBatch => ({
    overflow: false, generation, truncated: false, foreign: true, events: [
      { type: 'delrule', family: 'ip', table: 'nfkeeper', name: 'postrouting', handle: generation, portId: 1 },
    ], by: { pid: 0, comm },
  });

  it('keeps the last `history` changes, newest first, and answers each with the repair after it', () => {
    const a = new Attribution({ history: 4, initialPidNamespace: true });
    const owned = new Set(['ip nfkeeper']);
    for (let g = 1; g <= 10; g++) a.note(batch(g, 'nft'), owned);
    expect(a.length).toBe(4);
    expect(a.recent(10).map((c) => c.generation)).toEqual([10, 9, 8, 7]);
    const answered = a.answered({ generation: 11, cause: 'event', ops: ['add rule ip nfkeeper postrouting'], latencyMs: 1 });
    // The unanswered are bounded by the same size.
    expect(answered.map((c) => c.generation)).toEqual([7, 8, 9, 10]);
    expect(a.recent(1)[0]!.repair?.generation).toBe(11);
    expect(a.note({ ...batch(12, 'nft'), events: [{ type: 'deltable', family: 'ip', table: 'other', portId: 1 }] }, owned)).toBeUndefined();
  });

  it('gives the first N distinct names their own label, the rest `other`, no name `unknown`', () => {
    const l = new CommLabels(2);
    expect(['nft', 'iptables-nft', 'kube-proxy', 'nft', undefined].map((c) => l.of(c))).toEqual(['nft', 'iptables-nft', 'other', 'nft', 'unknown']);
  });
});
