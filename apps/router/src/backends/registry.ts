// The paid providers, in their default chain order. Adding one: a folder
// backends/<name>/ with its provider.ts (defineProvider), and one line here.
import * as z from "zod";
import { anthropic } from "./anthropic/provider.ts";
import { openrouter } from "./openrouter/provider.ts";
import type { ProviderConnection, ProviderContext } from "./provider.ts";

export const providerRegistry = [openrouter, anthropic] as const;

type Registered = (typeof providerRegistry)[number];
export type ProviderKey = Registered["key"];

/** The providers' keys, in registry order. */
export const providerKeys: readonly ProviderKey[] = providerRegistry.map((p) => p.key);

/** The `providers` config section's shape: each provider's own section, optional. */
export type ProvidersShape = { [P in Registered as P["key"]]: z.ZodOptional<P["config"]> };
export function providersShape(): ProvidersShape {
  return Object.fromEntries(providerRegistry.map((p) => [p.key, p.config.optional()])) as ProvidersShape;
}

/** `routing.models.<alias>`'s provider fields: the name each provider knows the alias by. */
export function aliasFields(): Record<ProviderKey, z.ZodOptional<z.ZodString>> {
  return Object.fromEntries(providerKeys.map((k) => [k, z.string().optional()])) as Record<ProviderKey, z.ZodOptional<z.ZodString>>;
}

/** The configured providers, connected, in registry order. */
export function connectProviders(
  config: { [P in Registered as P["key"]]?: z.infer<P["config"]> },
  ctx: ProviderContext,
): Array<{ key: ProviderKey; connection: ProviderConnection }> {
  const out: Array<{ key: ProviderKey; connection: ProviderConnection }> = [];
  for (const p of providerRegistry) {
    const cfg = config[p.key];
    if (!cfg) continue;
    // Each provider reads its own section (the union of providers is not one call signature).
    out.push({ key: p.key, connection: (p.connect as (c: typeof cfg, x: ProviderContext) => ProviderConnection)(cfg, ctx) });
  }
  return out;
}

/** The provider's name for `model` by convention, if one has it; undefined when none claims it. */
export function providerClaiming(model: string): ProviderKey | undefined {
  return providerRegistry.find((p) => p.conventionalName(model) !== undefined)?.key;
}

export function providerOf(key: ProviderKey): Registered {
  return providerRegistry.find((p) => p.key === key)!;
}
