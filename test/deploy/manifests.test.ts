// deploy/k8s rendered by `kubectl kustomize` (the base, and the production
// overlay with its example secrets in place of the real ones): every object
// validates against the Kubernetes schemas, and the manifests say what the
// code needs — the router's probes on its real port, a ConfigMap the real
// loadConfig accepts, every reference resolving, GPU workers, a migration Job.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { loadConfig, type Config } from "../../apps/router/src/config.ts";
import { missingProductionState } from "../../apps/cli/src/commands/router.ts";
import { catalog } from "../../workers/agent/src/models/catalog.ts";
import { kustomize, renderOverlay, repoRoot, validateObjects, KUBE_VERSIONS, type KubeObject } from "./kube.ts";

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: {
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    configMapKeyRef?: { name: string; key: string; optional?: boolean };
    fieldRef?: { fieldPath: string };
  };
}
interface Probe {
  httpGet?: { path: string; port: number | string };
  exec?: { command: string[] };
  periodSeconds?: number;
  failureThreshold?: number;
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  envFrom?: { secretRef?: { name: string }; configMapRef?: { name: string } }[];
  ports?: { name?: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  lifecycle?: { preStop?: { exec?: { command: string[] } } };
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  securityContext?: {
    runAsNonRoot?: boolean;
    runAsUser?: number;
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    capabilities?: { drop?: string[]; add?: string[] };
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}
interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: { name: string; configMap?: { name: string }; secret?: { secretName: string }; hostPath?: { path: string }; emptyDir?: object }[];
  serviceAccountName?: string;
  automountServiceAccountToken?: boolean;
  terminationGracePeriodSeconds?: number;
  restartPolicy?: string;
  nodeSelector?: Record<string, string>;
  tolerations?: { key?: string; operator?: string; effect?: string }[];
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; seccompProfile?: { type: string } };
}
interface PodTemplate {
  metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
  spec: PodSpec;
}

const spec = (o: KubeObject): any => (o as any).spec;
const template = (o: KubeObject): PodTemplate => spec(o).template as PodTemplate;
const workloads = (objs: KubeObject[]) => objs.filter((o) => ["Deployment", "DaemonSet", "Job", "StatefulSet"].includes(o.kind));

function find(objs: KubeObject[], kind: string, name: string): KubeObject {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  if (!o) throw new Error(`no ${kind} ${name} among ${objs.map((x) => `${x.kind}/${x.metadata.name}`).join(", ")}`);
  return o;
}
/** A generated object (ConfigMap/Secret) by the name it had before kustomize's hash suffix. */
function generated(objs: KubeObject[], kind: string, base: string): KubeObject {
  const o = objs.find((x) => x.kind === kind && (x.metadata.name === base || new RegExp(`^${base}-[a-z0-9]{10}$`).test(x.metadata.name)));
  if (!o) throw new Error(`no ${kind} generated as ${base}`);
  return o;
}
function container(objs: KubeObject[], kind: string, name: string, containerName: string): Container {
  const c = template(find(objs, kind, name)).spec.containers.find((x) => x.name === containerName);
  if (!c) throw new Error(`${kind}/${name} has no container ${containerName}`);
  return c;
}
function portNumber(c: Container, port: number | string): number {
  if (typeof port === "number") return port;
  const p = c.ports?.find((x) => x.name === port);
  if (!p) throw new Error(`container ${c.name} has no port named ${port}`);
  return p.containerPort;
}
function secretValue(objs: KubeObject[], name: string, key: string): string | undefined {
  const s = objs.find((x) => x.kind === "Secret" && x.metadata.name === name) as (KubeObject & { data?: Record<string, string>; stringData?: Record<string, string> }) | undefined;
  if (!s) return undefined;
  if (s.stringData?.[key] !== undefined) return s.stringData[key];
  const b64 = s.data?.[key];
  return b64 === undefined ? undefined : Buffer.from(b64, "base64").toString("utf8");
}
/** The container's environment as the kubelet would set it (secrets and config maps resolved; field refs to sample values). */
function resolvedEnv(objs: KubeObject[], c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v: string) => env[v] ?? m);
    const sk = e.valueFrom?.secretKeyRef;
    if (sk) {
      const v = secretValue(objs, sk.name, sk.key);
      if (v !== undefined) env[e.name] = v;
    }
    const fr = e.valueFrom?.fieldRef;
    if (fr) env[e.name] = fr.fieldPath === "status.podIP" ? "10.1.2.3" : fr.fieldPath === "spec.nodeName" ? "gpu-node-1" : "x";
  }
  return env;
}

let base: KubeObject[];
let prod: KubeObject[];
let cleanup = () => {};
let scratch: string;
/** The rendered ConfigMap's switchyard.yaml, loaded by the router's own loadConfig with the router's environment. */
let routerConfig: Config;

function loadConfigMap(objs: KubeObject[], env: Record<string, string>): Config {
  const cm = generated(objs, "ConfigMap", "switchyard-config") as KubeObject & { data: Record<string, string> };
  const file = path.join(scratch, `switchyard-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, cm.data["switchyard.yaml"]!);
  return loadConfig({ file, env });
}

beforeAll(() => {
  scratch = mkdtempSync(path.join(os.tmpdir(), "sy-deploy-test-"));
  base = kustomize(path.join(repoRoot, "deploy", "k8s", "base"));
  const r = renderOverlay("production");
  prod = r.objects;
  cleanup = r.cleanup;
  routerConfig = loadConfigMap(prod, resolvedEnv(prod, container(prod, "Deployment", "switchyard-router", "router")));
}, 120_000);

afterAll(() => {
  cleanup();
  rmSync(scratch, { recursive: true, force: true });
});

describe("schemas", () => {
  it(
    `every object of the base and the production overlay validates against the strict Kubernetes schemas (${KUBE_VERSIONS.join(", ")})`,
    () => {
      const kinds = prod.map((o) => o.kind).sort();
      expect(kinds).toEqual(
        ["ConfigMap", "DaemonSet", "Deployment", "HorizontalPodAutoscaler", "Job", "Namespace", "NetworkPolicy", "PodDisruptionBudget", "Secret", "Secret", "Service", "ServiceAccount", "ServiceAccount"].sort(),
      );
      const objects = [...base, ...prod];
      const results = validateObjects(objects);
      expect(results).toHaveLength(objects.length * KUBE_VERSIONS.length);
      const failures = results.filter((r) => !r.ok).map((r) => `${r.kind}/${r.name} @ ${r.version}: ${r.error}`);
      expect(failures).toEqual([]);
    },
    300_000,
  );

  it("the validator refuses what an API server would: an unknown field, a wrong type, an unknown kind", () => {
    const d = structuredClone(find(prod, "Deployment", "switchyard-router")) as any;
    d.spec.template.spec.containers[0].readinessProbe.httpGet.pathh = "/readyz";
    const p = structuredClone(find(prod, "PodDisruptionBudget", "switchyard-router")) as any;
    p.spec.maxUnavailable = { one: 1 };
    const results = validateObjects([d, p, { apiVersion: "v1", kind: "Routerr", metadata: { name: "x" } }], ["1.37.0"]);
    expect(results.map((r) => r.ok)).toEqual([false, false, false]);
    expect(results[0]!.error).toContain("pathh");
    expect(results[1]!.error).toContain("maxUnavailable");
    expect(results[2]!.error).toMatch(/Couldn't find schema/);
  });
});

describe("router", () => {
  it("readiness is /readyz and liveness /healthz on the router's configured port, which the Service targets", () => {
    const c = container(prod, "Deployment", "switchyard-router", "router");
    expect(routerConfig.router.host).toBe("0.0.0.0"); // the kubelet probes the pod IP
    expect(c.readinessProbe?.httpGet?.path).toBe("/readyz");
    expect(portNumber(c, c.readinessProbe!.httpGet!.port)).toBe(routerConfig.router.port);
    expect(c.livenessProbe?.httpGet?.path).toBe("/healthz");
    expect(portNumber(c, c.livenessProbe!.httpGet!.port)).toBe(routerConfig.router.port);
    const svc = find(prod, "Service", "switchyard-router");
    const targets = (spec(svc).ports as { targetPort: number | string }[]).map((p) => portNumber(c, p.targetPort));
    expect(targets).toEqual([routerConfig.router.port]);
    // Never the admin port: its /readyz shows where the state lives.
    expect(targets).not.toContain(routerConfig.router.adminPort);
  });

  it("Prometheus scrapes /metrics on the admin port", () => {
    const d = find(prod, "Deployment", "switchyard-router");
    const c = container(prod, "Deployment", "switchyard-router", "router");
    const a = template(d).metadata.annotations ?? {};
    expect(a["prometheus.io/scrape"]).toBe("true");
    expect(a["prometheus.io/path"]).toBe("/metrics");
    expect(Number(a["prometheus.io/port"])).toBe(routerConfig.router.adminPort);
    expect(c.ports?.map((p) => p.containerPort)).toContain(routerConfig.router.adminPort);
    expect(routerConfig.router.adminHost).toBe("0.0.0.0");
  });

  it("the ConfigMap's switchyard.yaml is the base file, loads with loadConfig (no unknown keys), and with the router's Secret the router has all its shared state", () => {
    const cm = generated(prod, "ConfigMap", "switchyard-config") as KubeObject & { data: Record<string, string> };
    expect(cm.data["switchyard.yaml"]).toBe(readFileSync(path.join(repoRoot, "deploy", "k8s", "base", "switchyard.yaml"), "utf8"));
    // Alone (no environment) it is valid, and holds no state address or secret.
    const alone = loadConfigMap(prod, {});
    expect(alone.redis.url).toBeUndefined();
    expect(alone.database.url).toBeUndefined();
    expect(alone.workers.secretKey).toBeUndefined();
    // With the Deployment's environment: what `switchyard router` requires.
    expect(missingProductionState(routerConfig)).toEqual([]);
    expect(routerConfig.redis.url).toMatch(/^rediss?:\/\/[^@]+:[^@]+@/); // a password in the URL
    expect(routerConfig.database.url).toMatch(/^postgres(ql)?:\/\//);
    expect(routerConfig.workers.secretKey?.length).toBeGreaterThanOrEqual(16);
    // Empty provider keys in the example leave the paid APIs off.
    expect(routerConfig.providers.openrouter).toBeUndefined();
    expect(routerConfig.providers.anthropic).toBeUndefined();
    // No router in a pod has workers on its own machine.
    expect(routerConfig.routing.chain).not.toContain("local");
  });

  it("a key loadConfig does not know in the ConfigMap would stop the router: the check above can fail", () => {
    const cm = structuredClone(generated(prod, "ConfigMap", "switchyard-config")) as KubeObject & { data: Record<string, string> };
    const doc = parseYaml(cm.data["switchyard.yaml"]!) as { redis: Record<string, unknown> };
    doc.redis.ulr = "redis://redis-0:6379"; // a typo of redis.url
    cm.data["switchyard.yaml"] = stringifyYaml(doc);
    expect(() => loadConfigMap([cm], {})).toThrow(/redis\.ulr: unknown key .*did you mean redis\.url\?/);
  });

  it("rolls without losing capacity: HPA owns replicas, surge before stop, one disruption at a time, preStop then drain within the grace period", () => {
    const d = find(prod, "Deployment", "switchyard-router");
    expect(spec(d).replicas).toBeUndefined(); // an apply never resets the HPA's count
    expect(spec(d).strategy.rollingUpdate.maxUnavailable).toBe(0);
    const hpa = find(prod, "HorizontalPodAutoscaler", "switchyard-router");
    expect(spec(hpa).scaleTargetRef).toMatchObject({ apiVersion: "apps/v1", kind: "Deployment", name: "switchyard-router" });
    expect(spec(hpa).minReplicas).toBeGreaterThanOrEqual(2);
    expect(spec(hpa).maxReplicas).toBeGreaterThan(spec(hpa).minReplicas);
    const pdb = find(prod, "PodDisruptionBudget", "switchyard-router");
    expect(spec(pdb).maxUnavailable).toBe(1);
    expect(spec(pdb).maxUnavailable).toBeLessThan(spec(hpa).minReplicas);
    const c = container(prod, "Deployment", "switchyard-router", "router");
    const sleep = Number(c.lifecycle?.preStop?.exec?.command.at(-1));
    expect(sleep).toBeGreaterThan(0);
    // The endpoint leaves within the readiness probe's window, during the preStop sleep.
    expect(c.readinessProbe!.periodSeconds! * c.readinessProbe!.failureThreshold!).toBeLessThanOrEqual(sleep);
    expect(template(d).spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(sleep + 60);
    // Requests: the HPA's CPU utilisation is measured against them.
    expect(c.resources?.requests?.cpu).toBeDefined();
  });
});

describe("references", () => {
  it("every Secret, ConfigMap, ServiceAccount and env var a workload names exists in the rendering, with the keys it reads", () => {
    const problems: string[] = [];
    for (const w of workloads(prod)) {
      const where = `${w.kind}/${w.metadata.name}`;
      const pod = template(w).spec;
      const names = (kind: string) => new Set(prod.filter((o) => o.kind === kind).map((o) => o.metadata.name));
      if (pod.serviceAccountName && !names("ServiceAccount").has(pod.serviceAccountName)) problems.push(`${where}: ServiceAccount ${pod.serviceAccountName}`);
      for (const v of pod.volumes ?? []) {
        if (v.configMap && !names("ConfigMap").has(v.configMap.name)) problems.push(`${where}: volume ${v.name} ConfigMap ${v.configMap.name}`);
        if (v.secret && !names("Secret").has(v.secret.secretName)) problems.push(`${where}: volume ${v.name} Secret ${v.secret.secretName}`);
      }
      for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
        for (const m of c.volumeMounts ?? []) if (!pod.volumes?.some((v) => v.name === m.name)) problems.push(`${where}/${c.name}: mount of unknown volume ${m.name}`);
        const defined = new Set<string>();
        for (const e of c.env ?? []) {
          const sk = e.valueFrom?.secretKeyRef;
          if (sk) {
            if (!names("Secret").has(sk.name)) problems.push(`${where}/${c.name}: ${e.name} → Secret ${sk.name}`);
            else if (!sk.optional && secretValue(prod, sk.name, sk.key) === undefined) problems.push(`${where}/${c.name}: ${e.name} → key ${sk.key} missing in Secret ${sk.name}`);
          }
          const ck = e.valueFrom?.configMapKeyRef;
          if (ck && !names("ConfigMap").has(ck.name)) problems.push(`${where}/${c.name}: ${e.name} → ConfigMap ${ck.name}`);
          for (const [, v] of (e.value ?? "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) if (!defined.has(v!)) problems.push(`${where}/${c.name}: ${e.name} uses $(${v}) before it is defined`);
          defined.add(e.name);
        }
        for (const f of c.envFrom ?? []) {
          if (f.secretRef && !names("Secret").has(f.secretRef.name)) problems.push(`${where}/${c.name}: envFrom Secret ${f.secretRef.name}`);
          if (f.configMapRef && !names("ConfigMap").has(f.configMapRef.name)) problems.push(`${where}/${c.name}: envFrom ConfigMap ${f.configMapRef.name}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it("selectors of the Service, PDB, HPA and NetworkPolicy match the pods they mean", () => {
    const matches = (sel: Record<string, string>, labels: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v);
    const routerPods = template(find(prod, "Deployment", "switchyard-router")).metadata.labels;
    const workerPods = template(find(prod, "DaemonSet", "switchyard-worker")).metadata.labels;
    expect(matches(spec(find(prod, "Service", "switchyard-router")).selector, routerPods)).toBe(true);
    expect(matches(spec(find(prod, "PodDisruptionBudget", "switchyard-router")).selector.matchLabels, routerPods)).toBe(true);
    expect(matches(spec(find(prod, "Deployment", "switchyard-router")).selector.matchLabels, routerPods)).toBe(true);
    expect(matches(spec(find(prod, "Service", "switchyard-router")).selector, workerPods)).toBe(false);
    const np = spec(find(prod, "NetworkPolicy", "switchyard-worker"));
    expect(matches(np.podSelector.matchLabels, workerPods)).toBe(true);
    expect(matches(np.ingress[0].from[0].podSelector.matchLabels, routerPods)).toBe(true);
    expect(np.ingress[0].ports[0].port).toBe(9100);
  });

  it("every object of the overlay lands in its namespace", () => {
    for (const o of prod) {
      if (o.kind === "Namespace") expect(o.metadata.name).toBe("switchyard");
      else expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe("switchyard");
    }
  });
});

describe("workers", () => {
  it("the DaemonSet runs on GPU nodes, requests nvidia.com/gpu and asks the agent for CUDA", () => {
    const ds = find(prod, "DaemonSet", "switchyard-worker");
    const pod = template(ds).spec;
    const c = container(prod, "DaemonSet", "switchyard-worker", "worker");
    expect(Number(c.resources?.limits?.["nvidia.com/gpu"])).toBeGreaterThanOrEqual(1);
    expect(c.resources?.requests?.["nvidia.com/gpu"]).toEqual(c.resources?.limits?.["nvidia.com/gpu"]);
    expect(Object.keys(pod.nodeSelector ?? {}).some((k) => k.startsWith("nvidia.com/"))).toBe(true);
    expect(pod.tolerations).toContainEqual(expect.objectContaining({ key: "nvidia.com/gpu", operator: "Exists" }));
    expect(c.image).toMatch(/\/switchyard-worker-cuda:[^:]+$/);
    expect(c.args?.join(" ")).toContain("--device cuda");
  });

  it("each worker's id is its node's name, its invite comes from the invites Secret, and it advertises its pod IP on the port it serves", () => {
    const c = container(prod, "DaemonSet", "switchyard-worker", "worker");
    const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e]));
    expect(env.SWITCHYARD_WORKER_ID?.valueFrom?.fieldRef?.fieldPath).toBe("spec.nodeName");
    const resolved = resolvedEnv(prod, c);
    const pod = template(find(prod, "DaemonSet", "switchyard-worker")).spec;
    const invites = c.volumeMounts?.find((m) => m.mountPath === resolved.SWITCHYARD_INVITES);
    expect(invites?.readOnly).toBe(true);
    const secretName = pod.volumes?.find((v) => v.name === invites!.name)?.secret?.secretName;
    expect(secretName).toBe("switchyard-worker-invites");
    // The example invite is keyed the way the entrypoint reads it: <node>.redis-url, <node>.token.
    expect(secretValue(prod, secretName!, `${resolved.SWITCHYARD_WORKER_ID}.redis-url`)).toMatch(/^redis:\/\/sy-worker-gpu-node-1:/);
    expect(secretValue(prod, secretName!, `${resolved.SWITCHYARD_WORKER_ID}.token`)).toBeTruthy();
    // Workers write their records under the prefix routers read.
    expect(resolved.SWITCHYARD_REDIS__KEY_PREFIX).toBe(routerConfig.redis.keyPrefix);
    const port = Number(resolved.SWITCHYARD_WORKER_PORT);
    expect(resolved.SWITCHYARD_ADVERTISE).toBe(`http://10.1.2.3:${port}`);
    expect(c.ports?.map((p) => p.containerPort)).toEqual([port]);
    expect(portNumber(c, c.livenessProbe!.httpGet!.port)).toBe(port);
    expect(c.readinessProbe?.httpGet?.path).toBe("/readyz");
    expect(portNumber(c, c.readinessProbe!.httpGet!.port)).toBe(port);
    // A fresh node fetches its models before it listens: the startup probe allows for it.
    expect(c.startupProbe!.periodSeconds! * c.startupProbe!.failureThreshold!).toBeGreaterThanOrEqual(600);
  });

  it("serves catalog models into a volume, and drains within its grace period", () => {
    const c = container(prod, "DaemonSet", "switchyard-worker", "worker");
    const resolved = resolvedEnv(prod, c);
    const models = resolved.SWITCHYARD_MODELS!.split(/\s+/);
    expect(models.length).toBeGreaterThan(0);
    for (const m of models) expect(Object.keys(catalog)).toContain(m);
    const pod = template(find(prod, "DaemonSet", "switchyard-worker")).spec;
    const cache = c.volumeMounts?.find((m) => m.mountPath === resolved.SWITCHYARD_CACHE);
    expect(cache).toBeDefined();
    expect(pod.volumes?.find((v) => v.name === cache!.name)?.hostPath).toBeDefined();
    // The agent drains for up to 30 s (startAgent's drainGraceMs) after SIGTERM.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(30);
  });
});

describe("components/cpu-workers", () => {
  let cpu: KubeObject[];
  let done = () => {};
  beforeAll(() => {
    const r = renderOverlay("production", { components: ["cpu-workers"] });
    cpu = r.objects;
    done = r.cleanup;
  }, 120_000);
  afterAll(() => done());

  it("turns the DaemonSet into CPU workers: the worker image, --device cpu, no GPU asked for, and still valid", () => {
    const ds = find(cpu, "DaemonSet", "switchyard-worker");
    const pod = template(ds).spec;
    const c = container(cpu, "DaemonSet", "switchyard-worker", "worker");
    expect(c.image).toMatch(/\/switchyard-worker:[^:]+$/);
    expect(pod.initContainers?.[0]?.image).toBe(c.image);
    expect(c.args).toEqual(["--device", "cpu"]);
    expect(JSON.stringify(pod)).not.toContain("nvidia.com/gpu");
    expect(pod.nodeSelector).toEqual({ "switchyard/worker": "cpu" });
    // Everything else is the production overlay's, unchanged.
    expect(cpu.filter((o) => o.kind !== "DaemonSet")).toEqual(prod.filter((o) => o.kind !== "DaemonSet"));
    const failures = validateObjects([ds]).filter((r) => !r.ok);
    expect(failures).toEqual([]);
  });
});

describe("migration", () => {
  it("the Job runs `switchyard migrate` from the router image against the configured database, never an embedded one", () => {
    const job = find(prod, "Job", "switchyard-migrate");
    const pod = template(job).spec;
    expect(["Never", "OnFailure"]).toContain(pod.restartPolicy);
    const c = pod.containers[0]!;
    expect(c.args?.[0]).toBe("migrate");
    expect(c.image).toBe(container(prod, "Deployment", "switchyard-router", "router").image);
    const config = loadConfigMap(prod, resolvedEnv(prod, c));
    expect(config.database.url).toBe(routerConfig.database.url);
    expect(spec(job).backoffLimit).toBeGreaterThan(0);
  });
});

describe("images and security", () => {
  it("every image is one of deploy/docker/Dockerfile's targets, with a pinned tag", () => {
    const dockerfile = readFileSync(path.join(repoRoot, "deploy", "docker", "Dockerfile"), "utf8");
    const targets = new Set([...dockerfile.matchAll(/^FROM\s+\S+\s+AS\s+(\S+)/gim)].map((m) => m[1]!));
    const images = new Set<string>();
    const cpu = renderOverlay("production", { components: ["cpu-workers"] });
    cpu.cleanup();
    for (const objs of [base, prod, cpu.objects]) {
      for (const w of workloads(objs)) for (const c of [...template(w).spec.containers, ...(template(w).spec.initContainers ?? [])]) images.add(c.image);
    }
    expect(images.size).toBeGreaterThan(0);
    for (const image of images) {
      const m = /^(?:.*\/)?switchyard-([a-z0-9-]+):([A-Za-z0-9._-]+)$/.exec(image);
      expect(m, `${image}: switchyard-<target>:<tag>`).not.toBeNull();
      expect(targets.has(m![1]!), `${image}: no stage '${m![1]}' in deploy/docker/Dockerfile`).toBe(true);
      expect(m![2]).not.toBe("latest");
    }
    // All three recipes' images are used by some rendering.
    expect([...images].map((i) => /switchyard-([a-z0-9-]+):/.exec(i)![1]).sort()).toEqual(expect.arrayContaining(["router", "worker", "worker-cuda"]));
  });

  it("pods run as non-root with no service account token, containers drop every capability on a read-only root, with requests and limits", () => {
    const problems: string[] = [];
    for (const w of workloads(prod)) {
      const where = `${w.kind}/${w.metadata.name}`;
      const pod = template(w).spec;
      if (pod.securityContext?.runAsNonRoot !== true) problems.push(`${where}: pod runAsNonRoot`);
      if (!pod.securityContext?.runAsUser) problems.push(`${where}: pod runAsUser`);
      if (pod.securityContext?.seccompProfile?.type !== "RuntimeDefault") problems.push(`${where}: seccomp`);
      if (pod.automountServiceAccountToken !== false) problems.push(`${where}: service account token mounted`);
      const all = [...pod.containers.map((c) => ({ c, init: false })), ...(pod.initContainers ?? []).map((c) => ({ c, init: true }))];
      for (const { c, init } of all) {
        const s = c.securityContext ?? {};
        const at = `${where}/${c.name}`;
        if (s.allowPrivilegeEscalation !== false) problems.push(`${at}: allowPrivilegeEscalation`);
        if (s.readOnlyRootFilesystem !== true) problems.push(`${at}: readOnlyRootFilesystem`);
        if (!s.capabilities?.drop?.includes("ALL")) problems.push(`${at}: capabilities not dropped`);
        for (const r of ["cpu", "memory"]) {
          if (c.resources?.requests?.[r] === undefined) problems.push(`${at}: no ${r} request`);
          if (c.resources?.limits?.[r] === undefined) problems.push(`${at}: no ${r} limit`);
        }
        const root = s.runAsUser === 0 || s.runAsNonRoot === false;
        if (!init && (root || (s.capabilities?.add?.length ?? 0) > 0)) problems.push(`${at}: runs as root or adds capabilities`);
        // The one exception: an init container that hands the node's cache directory to the worker's user, and can do nothing else.
        if (init && root && (JSON.stringify(s.capabilities?.add) !== JSON.stringify(["CHOWN"]) || c.command?.[0] !== "chown")) problems.push(`${at}: a root init container beyond chown`);
      }
    }
    expect(problems).toEqual([]);
  });
});
