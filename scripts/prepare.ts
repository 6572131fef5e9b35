// Fetches the default models, builds the CPU engine and installs the Python
// tools and Claude Code the tests drive (all cached outside the clone), with progress. `npm
// test` and `.ci/run` call it first so tests never time out on a first
// download, a cold cargo build, a pip or an npm install.
import { catalog, ensureEngine, resolveModel } from "@switchyard/agent";

const t0 = Date.now();
for (const name of Object.keys(catalog)) {
  const m = await resolveModel(name);
  process.stderr.write(`» model ${name}: ${m.path}\n`);
}
const bin = await ensureEngine("cpu");
process.stderr.write(`» engine: ${bin}\n» prepared in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

// The OpenAPI fuzzer the API test runs (test/router/openapi.test.ts), from PyPI into its own cached venv.
const { ensureSchemathesis } = await import("./schemathesis.ts");
process.stderr.write(`» schemathesis: ${await ensureSchemathesis((s) => process.stderr.write(`${s}\n`))}\n`);

// The Python clients the e2e client test drives (test/e2e/python-clients.test.ts), into their own cached venv.
const { ensurePythonClients } = await import("./python-clients.ts");
process.stderr.write(`» python clients: ${await ensurePythonClients((s) => process.stderr.write(`${s}\n`))}\n`);

// Claude Code, Codex CLI and Gemini CLI, the clients the /v1/messages, /v1/responses and /v1beta/models e2e tests drive (test/router/claude-code.test.ts, codex.test.ts, gemini-cli.test.ts), from npm into their own cached folders.
const { ensureClaudeCode, ensureCodex, ensureGeminiCli } = await import("./agent-clis.ts");
process.stderr.write(`» claude code: ${await ensureClaudeCode((s) => process.stderr.write(`${s}\n`))}\n`);
process.stderr.write(`» codex: ${await ensureCodex((s) => process.stderr.write(`${s}\n`))}\n`);
process.stderr.write(`» gemini cli: ${await ensureGeminiCli((s) => process.stderr.write(`${s}\n`))}\n`);
