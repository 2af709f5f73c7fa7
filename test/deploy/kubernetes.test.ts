/**
 * The Kubernetes manifests rendered as `kubectl apply -k` would, then checked
 * against the API objects' schemas: kubernetes-models' validators (generated
 * from the Kubernetes OpenAPI spec: types, required fields, enums, formats)
 * and, because those allow unknown fields as the API server's non-strict
 * decoding does, TypeScript's excess-property check against the same models'
 * interfaces, which refuses a misspelt field (`seccompProfle`) anywhere.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import { loadConfig } from '../../src/config/config.js';
import { parseListen } from '../../src/keeper/http.js';
import { tempDir } from '../helpers/tmp.js';

const DIR = 'deploy/kubernetes';
type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [k: string]: unknown };

/** What kustomize does with this kustomization: its resources, its namespace, its image override. */
function render(dir: string): Obj[] {
  const k = parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8'));
  expect(Object.keys(k).sort()).toEqual(['apiVersion', 'images', 'kind', 'namespace', 'resources']);
  const out: Obj[] = [];
  for (const file of k.resources as string[]) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), 'utf8'))) {
      const o = doc.toJS() as Obj;
      o.metadata.namespace = k.namespace;
      const containers = ((o.spec as any)?.template?.spec?.containers ?? []) as { image: string }[];
      for (const c of containers) {
        const img = (k.images as { name: string; newName?: string; newTag?: string }[]).find((i) => c.image.split(/[:@]/)[0] === i.name);
        if (img) c.image = `${img.newName ?? img.name}:${img.newTag ?? c.image.split(':')[1] ?? 'latest'}`;
      }
      out.push(o);
    }
  }
  return out;
}

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

/** tsc's excess-property and type check of each object against its model's interface. */
function typeCheck(objects: { type: string; from: string; value: unknown }[]): string[] {
  const file = resolve('test/deploy/.manifests-check.ts');
  const src = objects.map((o, i) => `import type { ${o.type} as T${i} } from '${o.from}';\nexport const o${i}: T${i} = ${JSON.stringify(o.value, null, 1)};\n`).join('');
  const options: ts.CompilerOptions = { strict: true, noEmit: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, skipLibCheck: true, target: ts.ScriptTarget.ES2022 };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) => name === file ? ts.createSourceFile(name, src, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
}

describe('Kubernetes manifests', () => {
  const objects = render(DIR);
  const ds = objects.find((o) => o.kind === 'DaemonSet') as any;
  const cm = objects.find((o) => o.kind === 'ConfigMap') as any;

  it.skipIf(!kubectl)('render as kubectl kustomize (kustomize v5) renders them', () => {
    const r = spawnSync('kubectl', ['kustomize', DIR], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const theirs = parseAllDocuments(r.stdout).map((d) => d.toJS());
    const key = (o: Obj) => `${o.kind}/${o.metadata.name}`;
    expect(theirs.map(key).sort()).toEqual(objects.map(key).sort());
    for (const o of theirs) expect(o).toEqual(objects.find((x) => key(x) === key(o)));
  });

  it('validate against the Kubernetes API schemas, and no field is unknown to them', () => {
    const pm = parse(readFileSync(join(DIR, 'podmonitor.yaml'), 'utf8'));
    expect(() => new DaemonSet(ds).validate()).not.toThrow();
    expect(() => new ConfigMap(cm).validate()).not.toThrow();
    expect(() => new PodMonitor(pm).validate()).not.toThrow();
    const checks = [
      { type: 'IDaemonSet', from: 'kubernetes-models/apps/v1/DaemonSet', value: ds },
      { type: 'IConfigMap', from: 'kubernetes-models/v1/ConfigMap', value: cm },
      { type: 'IPodMonitor', from: '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor', value: pm },
    ];
    expect(typeCheck(checks)).toEqual([]);
  });

  it('the schema checks can fail: a wrong type and a misspelt field are caught', () => {
    const bad = structuredClone(ds);
    bad.spec.template.spec.containers[0].ports[0].containerPort = '9469';
    expect(() => new DaemonSet(bad).validate()).toThrow(/containerPort must be integer/);
    const typo = structuredClone(ds);
    typo.spec.template.spec.securityContext = { seccompProfle: { type: 'RuntimeDefault' } };
    const errors = typeCheck([{ type: 'IDaemonSet', from: 'kubernetes-models/apps/v1/DaemonSet', value: typo }]);
    expect(errors.join('\n')).toMatch(/seccompProfle/);
  });

  it('the DaemonSet: Linux nodes, host network, NET_ADMIN only, RuntimeDefault seccomp, no token, scrapeable', () => {
    expect(objects.every((o) => o.metadata.namespace === 'kube-system')).toBe(true);
    const pod = ds.spec.template.spec;
    const c = pod.containers[0];
    expect(c.image).toBe('localhost/nfkeeper:0.1.0');
    // Only where the image can run: scripts/image.sh builds amd64.
    expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' });
    expect(pod.securityContext.seccompProfile).toEqual({ type: 'RuntimeDefault' });
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.hostNetwork).toBe(true);
    // Attribution: the kernel's pids are the host's (docs/operations.md, who deletes your rules).
    expect(pod.hostPID).toBe(true);
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);
    expect(c.securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['NET_ADMIN'] });
    expect(c.securityContext.privileged).toBe(false);
    expect(c.securityContext.allowPrivilegeEscalation).toBe(false);
    // Metrics: the port the daemon listens on is the port declared, annotated and probed.
    const port = c.ports.find((p: { name: string }) => p.name === 'metrics');
    expect(c.args.slice(0, 3)).toEqual(['run', '--config', '/etc/nfkeeper/config.yaml']);
    const listen = c.args[c.args.indexOf('--metrics') + 1];
    expect(listen).toBe(`[$(HOST_IP)]:${port.containerPort}`);
    // What the kubelet's expansion gives on an IPv4 and an IPv6 node, as the daemon parses it.
    expect(parseListen(listen.replace('$(HOST_IP)', '10.0.0.5'))).toEqual({ host: '10.0.0.5', port: port.containerPort });
    expect(parseListen(listen.replace('$(HOST_IP)', 'fd00::5'))).toEqual({ host: 'fd00::5', port: port.containerPort });
    expect(c.env.find((e: { name: string }) => e.name === 'HOST_IP').valueFrom.fieldRef.fieldPath).toBe('status.hostIP');
    const ann = ds.spec.template.metadata.annotations;
    expect(ann).toMatchObject({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(port.containerPort), 'prometheus.io/path': '/metrics' });
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'metrics' });
    const pm = parse(readFileSync(join(DIR, 'podmonitor.yaml'), 'utf8'));
    expect(pm.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);
    expect(pm.spec.podMetricsEndpoints[0].port).toBe('metrics');
    // Node-owned state: the owners socket and state file, and flannel's lease.
    const mounts = Object.fromEntries(c.volumeMounts.map((m: { name: string; mountPath: string }) => [m.mountPath, m.name]));
    const hostPath = (name: string) => pod.volumes.find((v: { name: string }) => v.name === name)?.hostPath?.path;
    for (const p of ['/run/nfkeeper', '/var/lib/nfkeeper', '/var/cache/nfkeeper', '/run/flannel']) expect(hostPath(mounts[p])).toBe(p);
    expect(pod.volumes.find((v: { name: string }) => v.name === mounts['/etc/nfkeeper']).configMap.name).toBe(cm.metadata.name);
  });

  it('the ConfigMap is one config for every node: each node\'s subnet.env gives its own rules', () => {
    const text: string = cm.data['config.yaml'];
    expect(text).not.toMatch(/10\.244\.\d+\.\d+/);
    const dir = tempDir('k8s');
    const rulesFor = (subnet: string) => {
      const env = join(dir, 'subnet.env');
      writeFileSync(env, `FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=${subnet}\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n`);
      writeFileSync(join(dir, 'config.yaml'), text.replace('/run/flannel/subnet.env', env));
      return loadConfig(join(dir, 'config.yaml')).tables[0]!.chains[0]!.rules.map((r) => r.text);
    };
    expect(rulesFor('10.244.1.1/24')).toEqual([
      'meta mark & 0x4000 == 0x4000 return',
      'ip saddr 10.244.1.1/24 ip daddr 10.244.0.0/16 return',
      'ip saddr 10.244.0.0/16 ip daddr 10.244.1.1/24 return',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.1/24 return',
      'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
    ]);
    const other = rulesFor('10.244.2.1/24');
    expect([other[1], other[2], other[3]]).toEqual(['ip saddr 10.244.2.1/24 ip daddr 10.244.0.0/16 return',
      'ip saddr 10.244.0.0/16 ip daddr 10.244.2.1/24 return', 'ip saddr != 10.244.0.0/16 ip daddr 10.244.2.1/24 return']);
  });
});
