// Anthropic as a provider: `providers.anthropic`, "claude-…" names by
// convention, the crash cost from its price × the last usage seen.
import * as z from "zod";
import type { Provider } from "../provider.ts";
import { AnthropicBackend, AnthropicConnections } from "./client.ts";
import { AnthropicCostLookup } from "./cost-lookup.ts";
import { anthropicFields } from "./fields.ts";

/** Its `providers.anthropic` section. */
const config = z.object({
  apiKey: z.string().min(1),
  baseUrl: z.url().default("https://api.anthropic.com"),
  version: z.string().default("2023-06-01"),
  /** Anthropic requires max_tokens; used when the client sent none. */
  defaultMaxTokens: z.number().int().positive().default(4096),
});

export const anthropic: Provider<"anthropic", typeof config> = {
  key: "anthropic",
  config,
  apiKeyEnv: "ANTHROPIC_API_KEY",
  fields: anthropicFields,
  conventionalName: (model) => (model.startsWith("claude-") ? model : undefined),
  connect(cfg, ctx) {
    const conns = new AnthropicConnections({ ...cfg, ...ctx });
    return { backend: (model) => new AnthropicBackend(model, conns), costLookup: new AnthropicCostLookup(), close: () => conns.close() };
  },
};
