// Shared by the admission tests: a real router with admission config, extra
// tenants with keys, sim workers with decode slots, and streams that can be
// held open, timed and cancelled.
import { afterAll, afterEach } from "vitest";
import { createKey, createTenant } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";
import type { AdmissionGate } from "../../apps/router/src/admission/gate.ts";

export const MODEL = "adm-m";

export interface Harness {
  fx: RouterFixture;
  gate: AdmissionGate;
  keys: Record<string, string>;
  sim(opts: { id: string; slots: number }): Promise<SimWorker>;
  stopSims(): Promise<void>;
  close(): Promise<void>;
}

export async function startHarness(tenants: string[], overrides: Record<string, unknown>): Promise<Harness> {
  const fx = await startTestRouter(overrides);
  const keys: Record<string, string> = { acme: fx.key };
  for (const name of tenants) {
    const t = await createTenant(fx.db.db, name);
    if (!t.ok) throw new Error(`tenant ${name}: ${t.reason}`);
    keys[name] = (await createKey(fx.db.db, t.tenant.id)).key;
  }
  const gate = fx.router.deps.admission;
  if (!gate) throw new Error("the router has no admission gate");
  const sims: SimWorker[] = [];
  return {
    fx,
    gate,
    keys,
    sim: async ({ id, slots }) => {
      // Heartbeats far apart: admission must count its own admissions between them.
      const w = await new SimWorker({ id, models: [MODEL], registry: fx.registry, slots, heartbeatMs: 60_000, ttlMs: 120_000 }).start();
      sims.push(w);
      await waitFor(() => fx.router.deps.directory.all().some((r) => r.id === id), { what: `${id} visible` });
      return w;
    },
    stopSims: async () => {
      await Promise.all(sims.splice(0).map((w) => w.stop()));
      await waitFor(() => fx.router.deps.directory.all().length === 0, { what: "registry empty" });
    },
    close: () => fx.close(),
  };
}

export interface Call {
  tenant: string;
  label: string;
  /** Resolves when the request ended: status, when headers and the end arrived, the body. */
  done: Promise<{ status: number; headersAt: number; endAt: number; body: string; headers: Headers }>;
  abort(): void;
}

/**
 * A streamed chat. `hold`: a long stream (holds a decode slot until aborted);
 * `sim`: a stream of this shape; otherwise one short token.
 */
export function call(
  h: Harness,
  tenant: string,
  opts: { label?: string; hold?: boolean; priority?: string; model?: string; sim?: { tokens: number; interTokenMs?: number; ttftMs?: number } } = {},
): Call {
  const ac = new AbortController();
  const sim = opts.sim ?? (opts.hold ? { tokens: 10_000, interTokenMs: 20 } : { tokens: 1, ttftMs: 20 });
  const headers: Record<string, string> = { authorization: `Bearer ${h.keys[tenant]}`, "content-type": "application/json" };
  if (opts.priority) headers["x-switchyard-priority"] = opts.priority;
  const done = (async () => {
    const res = await fetch(`${h.fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: opts.model ?? MODEL, stream: true, messages: [{ role: "user", content: "hi" }], sim }),
      signal: ac.signal,
    });
    const headersAt = performance.now();
    const body = await res.text();
    return { status: res.status, headersAt, endAt: performance.now(), body, headers: res.headers };
  })();
  done.catch(() => {}); // aborted holders
  return { tenant, label: opts.label ?? tenant, done, abort: () => ac.abort() };
}

export function waiting(h: Harness, band: "interactive" | "standard" | "batch", model = MODEL): number {
  return h.gate.inspect(model)?.waiting[band] ?? 0;
}

/** Aborts these calls and waits until the pool is idle again. */
export async function settleDown(h: Harness, calls: Call[], sims: SimWorker[]): Promise<void> {
  for (const c of calls) c.abort();
  await waitFor(
    () => {
      const s = h.gate.inspect(MODEL);
      return sims.every((w) => w.inFlight === 0) && (!s || (s.outstanding === 0 && s.waiting.interactive + s.waiting.standard + s.waiting.batch === 0));
    },
    { what: "pool idle", timeoutMs: 5000 },
  );
}

export interface HarnessHooks {
  /** The calls `start` made since the last test ended (aborted after each test). */
  calls: Call[];
  /** A streamed chat, aborted after the test. */
  start(tenant: string, opts?: Parameters<typeof call>[2]): Call;
  /** A sim worker with `slots` decode slots, stopped after the test. */
  pool(id: string, slots: number): Promise<SimWorker>;
}

/**
 * Registers a suite's hooks on the harness `harness()` returns: after each
 * test its calls are aborted, the pool waited idle and its sims stopped; after
 * all, the harness is closed, then `afterClose` runs.
 */
export function harnessHooks(harness: () => Harness | undefined, afterClose?: () => Promise<void>): HarnessHooks {
  const calls: Call[] = [];
  const sims: SimWorker[] = [];
  afterEach(async () => {
    const h = harness()!;
    await settleDown(h, calls, sims);
    calls.length = 0;
    await h.stopSims();
    sims.length = 0;
  });
  afterAll(async () => {
    await harness()?.close();
    await afterClose?.();
  });
  return {
    calls,
    start: (tenant, opts = {}) => {
      const c = call(harness()!, tenant, opts);
      calls.push(c);
      return c;
    },
    pool: async (id, slots) => {
      const w = await harness()!.sim({ id, slots });
      sims.push(w);
      return w;
    },
  };
}
