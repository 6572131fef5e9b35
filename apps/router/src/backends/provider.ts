// What a paid provider declares to be one, in its own folder: its config key,
// how it names models, where a crashed attempt's cost comes from, and how its
// backends are built. backends/registry.ts lists them; config, the chain and
// server.ts iterate that list and never name a provider.
import type * as z from "zod";
import type { CrashCostLookup } from "../billing/orphans.ts";
import type { FieldSupport } from "./fields.ts";
import type { UpstreamLimits } from "./transport.ts";
import type { Backend } from "./types.ts";

/** What the router hands every provider it connects. */
export interface ProviderContext {
  connectTimeoutMs: number;
  limits: UpstreamLimits;
}

/** A configured provider, connected. */
export interface ProviderConnection {
  /** Its backend for one upstream model name (the chain keeps them, bounded). */
  backend(model: string): Backend;
  /** What an orphaned attempt cost, for the orphan finisher (billing/orphans.ts). Its live price is the price book's (`prices`, keyed by the provider's key). */
  costLookup: CrashCostLookup;
  close(): Promise<void>;
}

export interface Provider<K extends string = string, S extends z.ZodType = z.ZodType> {
  /**
   * Its name everywhere: the config section `providers.<key>`, the chain step,
   * the alias field `routing.models.<alias>.<key>`, the BackendKind and the
   * price book's backend name.
   */
  readonly key: K;
  /** The `providers.<key>` config section; the provider is on when the section is set. */
  readonly config: S;
  /** The environment variable that sets `providers.<key>.apiKey`. */
  readonly apiKeyEnv: string;
  /** What it does with each request field (its folder's fields.ts; the README's table is rendered from these). */
  readonly fields: FieldSupport;
  /** The name it knows `model` by when no alias says: set only when `model` looks like one of its own. */
  conventionalName(model: string): string | undefined;
  connect(cfg: z.infer<S>, ctx: ProviderContext): ProviderConnection;
}
