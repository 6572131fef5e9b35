// Priority bands: which band a request runs in. A tenant has a default band
// and the highest it may ask for with `x-switchyard-priority`; asking for a
// lower band is always allowed, asking above the maximum is refused (403) —
// a silent downgrade would hide a misconfigured client behind slow answers.
import { priorityBands, type Config, type PriorityBand } from "../config.ts";

export type AdmissionConfig = Config["admission"];

/** 0 = highest priority (interactive). */
export function bandRank(band: PriorityBand): number {
  return priorityBands.indexOf(band);
}

/** The higher-priority of two bands. */
export function higherBand(a: PriorityBand, b: PriorityBand): PriorityBand {
  return bandRank(a) <= bandRank(b) ? a : b;
}

/** A tenant's own admission entry: own keys only (a tenant named `constructor` is not Object.prototype's). */
export function tenantEntry(cfg: AdmissionConfig, tenantName: string): AdmissionConfig["tenants"][string] | undefined {
  return Object.hasOwn(cfg.tenants, tenantName) ? cfg.tenants[tenantName] : undefined;
}

/** A tenant's weight in a pool's fair share (default 1). */
export function tenantWeight(cfg: AdmissionConfig, tenantName: string): number {
  return tenantEntry(cfg, tenantName)?.weight ?? 1;
}

export interface BandPolicy {
  defaultBand: PriorityBand;
  maxBand: PriorityBand;
}

/**
 * A tenant's policy: its own entry over the global defaults. A tenant given
 * only a default band may ask up to at least that band.
 */
export function bandPolicy(cfg: AdmissionConfig, tenantName: string): BandPolicy {
  const t = tenantEntry(cfg, tenantName);
  const defaultBand = t?.defaultBand ?? cfg.defaultBand;
  const maxBand = t?.maxBand ?? higherBand(cfg.maxBand, defaultBand);
  return { defaultBand, maxBand };
}

export type BandChoice =
  | { ok: true; band: PriorityBand }
  | { ok: false; reason: "invalid_priority"; asked: string }
  | { ok: false; reason: "priority_not_allowed"; asked: PriorityBand; maxBand: PriorityBand };

/** The band for one request: the header if present and allowed, else the tenant's default. */
export function chooseBand(cfg: AdmissionConfig, tenantName: string, header: string | undefined): BandChoice {
  const policy = bandPolicy(cfg, tenantName);
  if (header === undefined || header.trim() === "") return { ok: true, band: policy.defaultBand };
  const asked = header.trim().toLowerCase();
  if (!(priorityBands as readonly string[]).includes(asked)) return { ok: false, reason: "invalid_priority", asked: header };
  const band = asked as PriorityBand;
  if (bandRank(band) < bandRank(policy.maxBand)) return { ok: false, reason: "priority_not_allowed", asked: band, maxBand: policy.maxBand };
  return { ok: true, band };
}
