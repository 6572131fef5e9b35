// OpenRouter as a provider: `providers.openrouter`, "vendor/model" names by
// convention, the crash cost asked of its generation endpoint.
import * as z from "zod";
import type { Provider } from "../provider.ts";
import { OpenRouterBackend, OpenRouterConnections } from "./client.ts";
import { OpenRouterCostLookup } from "./cost-lookup.ts";
import { openrouterFields } from "./fields.ts";

/** Its `providers.openrouter` section. */
const config = z.object({
  apiKey: z.string().min(1),
  baseUrl: z.url().default("https://openrouter.ai/api/v1"),
  /** Sent as HTTP-Referer / X-Title: how OpenRouter attributes the app. */
  referer: z.string().optional(),
  title: z.string().default("Switchyard"),
});

export const openrouter: Provider<"openrouter", typeof config> = {
  key: "openrouter",
  config,
  apiKeyEnv: "OPENROUTER_API_KEY",
  fields: openrouterFields,
  conventionalName: (model) => (/^[\w.-]+\/[\w.:-]+$/.test(model) ? model : undefined),
  connect(cfg, ctx) {
    const conns = new OpenRouterConnections({ ...cfg, ...ctx });
    return { backend: (model) => new OpenRouterBackend(model, conns), costLookup: new OpenRouterCostLookup(conns), close: () => conns.close() };
  },
};
