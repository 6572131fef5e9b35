// LiteLLM's proxy as a benchmark target: the streaming peer of Switchyard
// (Portkey's streaming path fails on Node 20). A pinned `litellm[proxy]` lives
// in a venv outside the repo (~/.cache/switchyard/litellm-venv), installed
// from PyPI on first use; the proxy runs as one process (one uvicorn worker,
// as the other targets are one process each) in front of the sim worker as an
// OpenAI-compatible upstream, with logging, telemetry, the UI, the database
// and every network fetch off. Anything that stops it from coming up is a
// `{ skipped }`, never a throw, so the rest of the bench still runs.
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Target } from "./load.ts";
import { findPython, runTool as run } from "./run-tool.ts";
import { repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";

/** The newest release whose `[proxy]` extra resolves from PyPI here (1.110.x needs `litellm-proxy`, not published). */
export const LITELLM_VERSION = "1.108.5";
export const LITELLM_VENV = process.env.SWITCHYARD_LITELLM_VENV ?? path.join(os.homedir(), ".cache", "switchyard", "litellm-venv");
// Beyond the `[proxy]` extra, as LiteLLM's own deployments have them:
// httptools, uvicorn's C HTTP parser (what `uvicorn[standard]` brings; else
// it parses HTTP in pure Python); the OpenTelemetry SDK (from the
// `proxy-runtime` extra, same pins): without it the auth step retries a
// failing import of LiteLLM's OTel module on every request.
const REQUIREMENTS = [`litellm[proxy]==${LITELLM_VERSION}`, "httptools==0.7.1", "opentelemetry-api==1.45.2", "opentelemetry-sdk==1.45.2"];
/** Exact versions of everything else, from a known-good install; dropped (with a note) if they no longer resolve. */
function constraintsFile(): string | undefined {
  try {
    // From the repository root, not this module: the CLI runs these sources as a bundle under dist/.
    const f = path.join(repoRoot(), "bench", "lib", "litellm-constraints.txt");
    return existsSync(f) ? f : undefined;
  } catch {
    return undefined;
  }
}
const MASTER_KEY = "sk-switchyard-bench";

/**
 * The proxy's entry point (what the venv's `litellm` script runs), with
 * Python's cyclic garbage collector off on interpreters before 3.12: there a
 * collection that runs inside a ContextVar.set can free the context's HAMT
 * under it (CPython issue #148891; 3.12's collector no longer triggers it),
 * and LiteLLM sets context variables on every request — its proxy died of
 * SIGSEGV in ContextVar.set after 50–300 requests here (Python 3.11.7).
 * Without the cyclic collector, reference cycles are freed only at exit,
 * which a bench's few thousand requests can carry (with it off, 2 × 920
 * streamed requests in a row went through without an error).
 */
const LAUNCH = [
  "import gc, sys",
  "if sys.version_info < (3, 12): gc.disable()",
  "from litellm import run_server",
  "sys.argv[0] = 'litellm'",
  "sys.exit(run_server())",
].join("\n");

export type LiteLLMStarted = { proc: Proc; target: Target; version: string; passesSimShape: boolean };

const lastLines = (s: string, n = 3) => s.trim().split("\n").slice(-n).join(" | ");

/** Ensures the venv holds the pinned LiteLLM; returns its `litellm` entry point, or why not. */
export async function ensureLiteLLM(log: (s: string) => void = () => {}): Promise<{ bin: string } | { skipped: string }> {
  const bin = path.join(LITELLM_VENV, "bin", "litellm");
  const pip = path.join(LITELLM_VENV, "bin", "pip");
  const marker = path.join(LITELLM_VENV, ".switchyard-installed");
  const constraintsPath = constraintsFile();
  const constraints = constraintsPath ? readFileSync(constraintsPath, "utf8") : "";
  const want = `${REQUIREMENTS.join(" ")} ${createHash("sha256").update(constraints).digest("hex").slice(0, 16)}`;
  if (existsSync(bin) && existsSync(marker) && readFileSync(marker, "utf8").trim() === want) return { bin };

  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)}s`;
  log(`[litellm] installing ${REQUIREMENTS.join(" ")} into ${LITELLM_VENV} (first use; ~1 min, ~750 MB)`);
  const python = await findPython(process.env.LITELLM_PYTHON, [3, 10], [3, 16]);
  if (!python) return { skipped: "no Python 3.10–3.15 with the venv module (set LITELLM_PYTHON)" };
  rmSync(LITELLM_VENV, { recursive: true, force: true });
  const venv = await run(python, ["-m", "venv", LITELLM_VENV], { timeoutMs: 120_000 });
  if (venv.code !== 0) return { skipped: `${python} -m venv failed: ${lastLines(venv.out)}` };

  const pipInstall = async (withConstraints: boolean) => {
    let collected = 0;
    const beat = setInterval(() => log(`[litellm] pip: still working, ${collected} packages resolved, ${elapsed()}`), 15_000);
    const args = ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off", ...REQUIREMENTS];
    if (withConstraints && constraintsPath) args.push("-c", constraintsPath);
    const r = await run(pip, args, {
      timeoutMs: 20 * 60_000,
      env: { PIP_NO_INPUT: "1" },
      onLine: (l) => {
        if (l.startsWith("Collecting ")) {
          collected++;
          if (collected === 1 || collected % 25 === 0) log(`[litellm] pip: ${collected} packages resolved (${l.slice(11).split(/[ <>=!~;\[(]/)[0]}…), ${elapsed()}`);
        } else if (l.startsWith("Installing collected packages")) log(`[litellm] pip: installing ${collected} packages, ${elapsed()}`);
        else if (l.startsWith("Successfully installed")) log(`[litellm] pip: installed, ${elapsed()}`);
        else if (l.startsWith("ERROR")) log(`[litellm] pip: ${l}`);
      },
    });
    clearInterval(beat);
    return r;
  };
  let r = await pipInstall(constraints !== "");
  if (r.code !== 0 && constraints !== "") {
    log(`[litellm] pinned dependency set did not install (${lastLines(r.out, 1)}); retrying with only ${REQUIREMENTS.join(" ")} pinned`);
    r = await pipInstall(false);
  }
  if (r.code !== 0 || !existsSync(bin)) return { skipped: `pip install ${REQUIREMENTS.join(" ")} failed: ${lastLines(r.out)}` };
  writeFileSync(marker, want + "\n");
  log(`[litellm] ready in ${elapsed()}`);
  return { bin };
}

/** The proxy's config: one model, "sim", an OpenAI-compatible upstream; no logging, callbacks, retries or extras. */
export function liteLLMConfig(upstream: string): Record<string, unknown> {
  return {
    model_list: [
      {
        model_name: "sim",
        litellm_params: { model: "openai/sim", api_base: upstream, api_key: "dummy" },
        // Not in the cost map; a zero price skips the per-request lookup miss.
        model_info: { input_cost_per_token: 0, output_cost_per_token: 0 },
      },
    ],
    litellm_settings: {
      drop_params: false, // unknown body fields (the sim's `sim` shape) go upstream in extra_body
      set_verbose: false,
      json_logs: false,
      callbacks: [],
      success_callback: [],
      failure_callback: [],
      num_retries: 0, // a proxy, like the other targets: errors are counted, not retried away
      request_timeout: 600,
    },
    router_settings: { num_retries: 0, routing_strategy: "simple-shuffle" },
    general_settings: {
      master_key: MASTER_KEY,
      disable_spend_logs: true,
      disable_error_logs: true,
      disable_adding_master_key_hash_to_db: true,
      background_health_checks: false,
      store_model_in_db: false,
    },
  };
}

/** Environment for the proxy: nothing inherited (no DATABASE_URL, REDIS_*, proxies, callbacks' keys), nothing fetched. */
function proxyEnv(): string[] {
  const keep = ["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ"].flatMap((k) => (process.env[k] !== undefined ? [`${k}=${process.env[k]}`] : []));
  const set: Record<string, string> = {
    LITELLM_LOCAL_MODEL_COST_MAP: "True",
    LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS: "True",
    LITELLM_LOCAL_AUTOROUTER_PRESETS: "True",
    LITELLM_LOCAL_BLOG_POSTS: "True",
    LITELLM_LOCAL_POLICY_TEMPLATES: "True",
    LITELLM_TELEMETRY_DISABLED: "true",
    LITELLM_LOG: "ERROR", // also turns uvicorn's per-request access log off
    LITELLM_DONT_SHOW_FEEDBACK_BOX: "True",
    LITELLM_MODE: "PRODUCTION", // don't load a .env from the working directory
    DISABLE_ADMIN_UI: "True",
    NO_DOCS: "True",
    NO_REDOC: "True",
    PYTHONUNBUFFERED: "1",
    PYTHONFAULTHANDLER: "1", // a crash prints every thread's Python stack (how the one above was found)
  };
  return [...keep, ...Object.entries(set).map(([k, v]) => `${k}=${v}`)];
}

/**
 * Installs (if needed) and starts LiteLLM's proxy on 127.0.0.1:`port` in
 * front of `upstream` (e.g. http://127.0.0.1:PORT/v1), waits until a chat
 * completion goes through, and checks whether the body's `sim` field reaches
 * the upstream (it does: LiteLLM forwards unknown params to OpenAI-compatible
 * providers as extra_body). The returned target needs its bearer key.
 */
export async function startLiteLLM(opts: { upstream: string; port: number; log?: (s: string) => void }): Promise<LiteLLMStarted | { skipped: string }> {
  const log = opts.log ?? (() => {});
  const installed = await ensureLiteLLM(log);
  if ("skipped" in installed) return installed;

  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-litellm-"));
  const config = path.join(dir, "config.json"); // JSON is YAML; LiteLLM reads it with yaml.safe_load
  writeFileSync(config, JSON.stringify(liteLLMConfig(opts.upstream), null, 2));
  const t0 = performance.now();
  // `env -i` execs the proxy in place: the Proc's pid (and CPU time) is the server's own.
  const proc = startProc(
    "env",
    ["-i", ...proxyEnv(), path.join(path.dirname(installed.bin), "python"), "-c", LAUNCH, "--config", config, "--host", "127.0.0.1", "--port", String(opts.port), "--num_workers", "1"],
    {},
    "litellm",
  );
  const stop = proc.stop;
  proc.stop = async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  };
  const fail = async (why: string) => {
    await proc.stop();
    return { skipped: why };
  };
  const url = `http://127.0.0.1:${opts.port}`;
  // Poll until it answers, giving up early if it dies (a bad config exits at once).
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) return fail(`litellm exited (${proc.child.exitCode ?? proc.child.signalCode}) before it answered`);
    try {
      await waitHttp(`${url}/health/liveliness`, { timeoutMs: 0, ok: (s) => s === 200 });
      break;
    } catch {
      if (Date.now() > deadline) return fail(`litellm did not answer on ${url} within 120 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const target: Target = { name: "litellm", url, path: "/v1/chat/completions", headers: { authorization: `Bearer ${MASTER_KEY}` } };

  // One real completion through it, shaped by `sim`: 3 tokens instead of the sim's default.
  let passesSimShape = false;
  try {
    const res = await fetch(url + target.path, {
      method: "POST",
      headers: { "content-type": "application/json", ...target.headers },
      body: JSON.stringify({ model: "sim", messages: [{ role: "user", content: "hi" }], sim: { ttftMs: 0, interTokenMs: 0, tokens: 3 } }),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    if (res.status !== 200) return await fail(`probe completion through litellm: HTTP ${res.status} ${text.slice(0, 300)}`);
    const content = (JSON.parse(text) as { choices?: { message?: { content?: string } }[] }).choices?.[0]?.message?.content ?? "";
    if (!content.startsWith("tok0 ")) return await fail(`probe completion through litellm: unexpected content ${JSON.stringify(content.slice(0, 100))}`);
    passesSimShape = content === "tok0 tok1 tok2 ";
  } catch (e) {
    return fail(`probe completion through litellm: ${String(e)}`);
  }
  log(`[litellm] ${LITELLM_VERSION} ready on ${url} in ${((performance.now() - t0) / 1000).toFixed(1)}s (sim shape ${passesSimShape ? "passes through" : "does NOT pass through"})`);
  return { proc, target, version: LITELLM_VERSION, passesSimShape };
}
