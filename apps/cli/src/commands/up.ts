// `switchyard up`: the whole fabric on one machine — embedded PostgreSQL, the
// in-process registry, a router on 127.0.0.1:8080 and a local worker serving
// SmolLM2 (chat) and MiniLM (embeddings) from the Candle engine. First start creates tenant `local` and an API key, saved under the
// data directory so later starts reuse it.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { createKey, createTenant, findTenant, hashKey, lookupKeyByHash, type Db } from "@switchyard/db";
import { evenRanges, ggufBlockCount, resolveModel, startAgent, type AgentHandle, type AgentOptions } from "@switchyard/agent";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { startRouter } from "@switchyard/router";
import { MemoryRegistryStore } from "@switchyard/state";
import { configFrom, openDb } from "../context.ts";
import { untilSignal } from "../signals.ts";
import { UsageError } from "../usage.ts";
import { databaseUrlFile } from "./db.ts";

async function ensureLocalKey(db: Db, home: string): Promise<{ key: string; created: boolean }> {
  const keyFile = path.join(home, "api-key");
  if (existsSync(keyFile)) {
    const key = (await readFile(keyFile, "utf8")).trim();
    const owner = await lookupKeyByHash(db, hashKey(key));
    if (owner && !owner.revoked) return { key, created: false };
  }
  let tenant = await findTenant(db, "local");
  if (!tenant) {
    const r = await createTenant(db, "local");
    if (!r.ok) throw new Error("could not create tenant 'local'");
    tenant = r.tenant;
  }
  const { key } = await createKey(db, tenant.id, "up");
  await writeFile(keyFile, key + "\n", { mode: 0o600 });
  return { key, created: true };
}

/** `--split N`: N shards of the model, 2 ≤ N ≤ its blocks. */
export function parseSplit(spec: string | undefined): number | undefined {
  if (spec === undefined) return undefined;
  const n = Number(spec);
  if (!/^\d{1,3}$/.test(spec) || n < 2) throw new UsageError(`up: --split must be a number of shards, 2 or more (got '${spec}')`);
  return n;
}

/**
 * The local shards of `--split N`: the chat model's blocks cut into N even
 * ranges, one worker each (the first also serves the other models, e.g.
 * embeddings); the router places them into a pipeline like any shards.
 */
async function startShards(n: number, models: string[], common: Omit<AgentOptions, "models" | "workerId" | "layers">, step: (msg: string) => void): Promise<AgentHandle[]> {
  const resolved = await Promise.all(models.map((m) => resolveModel(m)));
  const llm = resolved.find((m) => m.kind === ModelKind.LLAMA_GGUF);
  if (!llm) throw new UsageError("up: --split needs a llama (GGUF) model among --model");
  const blocks = await ggufBlockCount(llm.path);
  if (n > blocks) throw new UsageError(`up: --split ${n}: ${llm.name} has only ${blocks} blocks`);
  const others = models.filter((_, i) => resolved[i] !== llm);
  const ranges = evenRanges(blocks, n);
  step(`splitting ${llm.name} (${blocks} blocks) into ${n} local shards: ${ranges.map((r) => `${r.start}-${r.end}`).join(", ")}`);
  return Promise.all(
    ranges.map((layers, i) => startAgent({ ...common, models: i === 0 ? [llm.name, ...others] : [llm.name], workerId: `local-shard-${i}`, layers })),
  );
}

export async function upCommand(flags: { config?: string; model?: string[]; device?: string; "no-worker"?: boolean; split?: string }): Promise<number> {
  const split = parseSplit(flags.split);
  const config = configFrom(flags);
  // The router and the local worker share a secret made for this run.
  config.workers.token ??= randomBytes(24).toString("base64url");
  await mkdir(config.home, { recursive: true });
  const step = (msg: string) => process.stderr.write(`» ${msg}\n`);
  step(`starting embedded PostgreSQL in ${path.resolve(config.home, "pg")}`);
  const db = await openDb(config, { migrate: true, quiet: true, createEmbedded: true });
  // Finance reaches the ledger with this URL (psql, switchyard psql); the port is random.
  const urlFile = databaseUrlFile(config);
  await writeFile(urlFile, db.url + "\n", { mode: 0o600 });
  await chmod(urlFile, 0o600);
  step(`database migrated: ${db.url}  (saved in ${urlFile}; 'switchyard psql' opens it)`);
  const { key, created } = await ensureLocalKey(db.db, config.home);
  const registry = new MemoryRegistryStore();
  const router = await startRouter(config, { registry, db, embeddedDatabase: !config.database.url });
  process.stderr.write(
    [
      "",
      `Switchyard router: ${router.url}  (metrics: ${router.adminUrl}/metrics)`,
      `API key for tenant 'local'${created ? " (new)" : ""}: ${key}`,
      `  saved in ${path.resolve(config.home, "api-key")}`,
      "",
    ].join("\n"),
  );
  const agents: AgentHandle[] = [];
  if (flags["no-worker"]) {
    step("no local worker (--no-worker): /v1/models lists only remote workers");
  } else {
    step("starting the local worker (models are fetched and the engine is built on first run)");
    const models = flags.model?.length ? flags.model : ["smollm2-135m-instruct", "all-minilm-l6-v2"];
    const common = {
      registry,
      token: config.workers.token,
      device: (flags.device ?? "auto") as "auto",
      log: (msg: string, fields?: Record<string, unknown>) => {
        if (msg === "engine" || msg === "heartbeat failed") return;
        step(`worker: ${msg}${fields ? " " + JSON.stringify(fields) : ""}`);
      },
    };
    if (split) agents.push(...(await startShards(split, models, common, step)));
    else agents.push(await startAgent({ ...common, models, workerId: "local" }));
    for (const agent of agents) {
      try {
        await agent.supervisor.whenReady();
      } catch (err) {
        await Promise.all(agents.map((a) => a.stop()));
        throw new UsageError(`up: ${(err as Error).message}`);
      }
      // Make the router see `ready` now rather than at its next poll.
      await agent.heartbeat();
    }
    await router.deps.directory.refresh();
    for (const agent of agents) step(`local worker ready on ${agent.supervisor.device}: ${agent.models.map((m) => m.name).join(", ")}${split ? ` (${agent.id})` : ""}`);
    if (split) step(`pipeline: ${router.deps.directory.pipelines(agents[0]!.models[0]!.name).map((p) => p.stages.length + 1).join(", ") || "none"} shards`);
  }
  process.stderr.write(
    [
      "",
      `Try: curl -s ${router.url}/v1/chat/completions -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\`,
      `       -d '{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"Say hello"}]}'`,
      "",
    ].join("\n"),
  );
  const sig = await untilSignal();
  step(`${sig}: shutting down`);
  await Promise.all(agents.map((a) => a.stop()));
  await router.close();
  await db.close();
  await db.stopEmbedded();
  return 0;
}
