// Issue 10 item 8: the cross-tenant prompt oracle. Tenant beta sends a long
// system prompt; tenant alpha sends the same prompt with
// `x-switchyard-debug: route` and must not see `prefix` in
// x-switchyard-route, nor be steered to the worker that holds beta's prompt
// — neither from the router's memory nor from the names workers advertise
// in their heartbeats. Beta's own follow-ups keep their affinity. Real
// routers and Redis registry; sim workers that advertise what the real agent
// does (the router-sent name, through the agent's own `routerPrefixName`).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant } from "@switchyard/db";
import { PREFIX_NAME_FIELD, prefixKey, routerPrefixName, type WorkerRecord } from "@switchyard/state";
import { SimWorker, type SimWorkerOptions } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MODEL = "oracle-m";
const system = {
  role: "system",
  content:
    "You are the internal assistant of Beta Corp. Merger code name BLUEFIN closes on March 3; never disclose the acquisition price of 41 dollars per share to anyone outside the deal team.",
};

/** A sim worker that advertises prefixes like the agent: the names the router sent with the generations it finished. */
class AdvertisingSim extends SimWorker {
  readonly advertised: string[] = [];
  constructor(opts: SimWorkerOptions) {
    super(opts);
  }
  override record(): WorkerRecord {
    return { ...super.record(), prefixes: [...this.advertised].reverse() };
  }
  /** After a request ended: note its prefix name as the agent does, and beat. */
  async noteLast(): Promise<void> {
    const name = this.lastBody ? routerPrefixName(this.lastBody) : undefined;
    if (name && !this.advertised.includes(name)) this.advertised.push(name);
    await this.heartbeat();
  }
}

let fx: RouterFixture;
let other: RouterFixture | undefined;
const sims: AdvertisingSim[] = [];
/** Per router fixture: tenant → API key (each test router has its own database). */
const keys = new Map<RouterFixture, Record<string, string>>();
const ids: Record<string, number> = {};

/** Tenants alpha and beta in this router's database, created in the same order so their ids match across routers (as one shared Postgres gives them). */
async function seedTenants(router: RouterFixture): Promise<void> {
  const k: Record<string, string> = {};
  for (const name of ["alpha", "beta"]) {
    const t = await createTenant(router.db.db, `oracle-${name}`);
    if (!t.ok) throw new Error(`tenant ${name}: ${t.reason}`);
    if (ids[name] === undefined) ids[name] = t.tenant.id;
    expect(t.tenant.id).toBe(ids[name]);
    k[name] = (await createKey(router.db.db, t.tenant.id)).key;
  }
  keys.set(router, k);
}

beforeAll(async () => {
  fx = await startTestRouter({ "routing.scorer.epsilon": 0 });
  await seedTenants(fx);
  for (const id of ["or-1", "or-2"]) {
    const w = await new AdvertisingSim({ id, models: [MODEL], registry: fx.registry, heartbeatMs: 200, ttlMs: 5_000, slots: 8 }).start();
    sims.push(w);
  }
  await waitFor(() => fx.router.deps.directory.all().length === 2, { what: "both sims visible" });
});

afterAll(async () => {
  await Promise.all(sims.map((w) => w.stop()));
  await other?.close();
  await fx?.close();
});

async function ask(router: RouterFixture, tenant: string, question: string, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${router.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys.get(router)![tenant]}`, "content-type": "application/json", "x-switchyard-debug": "route" },
    body: JSON.stringify({ model: MODEL, messages: [system, { role: "user", content: question }], max_tokens: 2, ...extra }),
  });
  expect(res.status).toBe(200);
  await res.text();
  const backend = res.headers.get("x-switchyard-backend")!;
  const sim = sims.find((w) => `worker:${w.id}` === backend)!;
  await sim.noteLast();
  return { backend, route: res.headers.get("x-switchyard-route") ?? "", sim };
}

/** The part of the explanation about one worker. */
const routeOf = (route: string, backend: string) => route.split("; ").find((p) => p.startsWith(`${backend} `)) ?? "";

describe("prefix affinity is per tenant", () => {
  it("beta's prompt: the worker is told a beta-scoped name, never the client's, and advertises only that", async () => {
    // Beta even tries to choose the name the worker advertises: the router overwrites it.
    const first = await ask(fx, "beta", "Who is on the deal team?", { [PREFIX_NAME_FIELD]: "attacker-chosen-name-0001" });
    const betaName = prefixKey("/v1/chat/completions", { messages: [system] }, String(ids.beta))!;
    expect(first.sim.lastBody![PREFIX_NAME_FIELD]).toBe(betaName);
    expect(first.sim.advertised).toEqual([betaName]);
    // Alpha's identical prompt has a name unrelated to beta's.
    expect(prefixKey("/v1/chat/completions", { messages: [system] }, String(ids.alpha))).not.toBe(betaName);
    await waitFor(() => fx.router.deps.directory.all().some((w) => w.prefixes.includes(betaName)), { what: "beta's name in the heartbeat" });
  });

  it("alpha sends beta's prompt with x-switchyard-debug: route: no 'prefix' in the explanation; beta's follow-up has it", async () => {
    const holder = sims.find((w) => w.advertised.length > 0)!;
    const forAlpha = await ask(fx, "alpha", "Who is on the deal team?");
    expect(forAlpha.route).toContain("worker:");
    expect(forAlpha.route).not.toContain("prefix");
    // The worker alpha reached was told alpha's name, not beta's.
    expect(forAlpha.sim.lastBody![PREFIX_NAME_FIELD]).toBe(prefixKey("/v1/chat/completions", { messages: [system] }, String(ids.alpha)));

    const forBeta = await ask(fx, "beta", "When does it close?");
    expect(forBeta.backend).toBe(`worker:${holder.id}`);
    expect(routeOf(forBeta.route, forBeta.backend)).toContain("prefix");
  });

  it("a router that never saw the prompt follows heartbeats for beta, and shows alpha nothing", async () => {
    // By now each sim may advertise one name of each tenant: they must not match the other tenant.
    other = await startTestRouter({ "routing.scorer.epsilon": 0, "redis.keyPrefix": fx.redis.prefix });
    await seedTenants(other);
    await waitFor(() => other!.router.deps.directory.all().some((w) => w.prefixes.length > 0), { what: "advertised names visible to the second router" });
    const betaName = prefixKey("/v1/chat/completions", { messages: [system] }, String(ids.beta))!;
    const betaHolder = sims.find((w) => w.advertised.includes(betaName))!;
    // Make alpha's own name unknown to every worker, so any 'prefix' for alpha could only come from beta's.
    for (const w of sims) w.advertised.splice(0, w.advertised.length, ...w.advertised.filter((n) => n === betaName));
    await Promise.all(sims.map((w) => w.heartbeat()));
    await waitFor(() => other!.router.deps.directory.all().every((w) => w.prefixes.every((n) => n === betaName)), { what: "alpha's names gone" });

    const forAlpha = await ask(other, "alpha", "What is the acquisition price?");
    expect(forAlpha.route).not.toContain("prefix");

    const forBeta = await ask(other, "beta", "What is the code name?");
    expect(forBeta.backend).toBe(`worker:${betaHolder.id}`);
    expect(routeOf(forBeta.route, forBeta.backend)).toContain("prefix");
  });
});
