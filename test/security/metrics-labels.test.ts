// Issue 10, item 9: metrics were labelled with the raw request path, so
// anyone (no key needed) could grow /metrics without bound — 5,000 distinct
// paths took it from 18 KiB to 88.6 MiB. Labels are now route patterns, and
// every path no route matches shares route="unmatched".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;

beforeAll(async () => {
  fx = await startTestRouter();
});

afterAll(async () => {
  await fx?.close();
});

const metrics = async () => (await fetch(`${fx.router.adminUrl}/metrics`)).text();

describe("metrics cardinality", () => {
  it("5,000 requests to distinct unauthenticated paths leave /metrics the size it was", async () => {
    // One of each answer first, so the series the attack could touch exist.
    await (await fetch(`${fx.router.url}/warm-up-path`)).text();
    await (await fetch(`${fx.router.url}/v1/leases/lease_warm`)).text();
    const before = (await metrics()).length;
    const paths: string[] = [];
    for (let i = 0; i < 5000; i++) {
      // Unknown paths, unknown methods on known paths, and parameters of a real route.
      paths.push(i % 3 === 0 ? `/x/${i}/${"a".repeat(i % 50)}` : i % 3 === 1 ? `/v1/chat/completions/${i}` : `/v1/leases/lease_${i}`);
    }
    const statuses = new Set<number>();
    for (let i = 0; i < paths.length; i += 50) {
      await Promise.all(
        paths.slice(i, i + 50).map(async (p) => {
          const r = await fetch(`${fx.router.url}${p}`);
          statuses.add(r.status);
          await r.text();
        }),
      );
    }
    expect(statuses.has(404) || statuses.has(401)).toBe(true);
    const text = await metrics();
    // Counter values grow a digit or two; no new series appear.
    expect(text.length).toBeLessThan(before + 1024);
    expect(text).not.toMatch(/route="\/x\//);
    expect(text).not.toMatch(/lease_\d/);
    expect(text).toMatch(/switchyard_requests_total\{route="unmatched",status="404"\} \d+/);
    expect(text).toMatch(/switchyard_requests_total\{route="\/v1\/leases\/:id",status="\d+"\} \d+/);
  });

  it("a matched route is labelled by its pattern", async () => {
    const r = await fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(r.status).toBe(401);
    await r.text();
    expect(await metrics()).toMatch(/switchyard_requests_total\{route="\/v1\/chat\/completions",status="401"\} \d+/);
  });
});
