// Unknown configuration keys are errors: a typo (`redis.ulr`) must stop the
// process, not leave it running on embedded defaults. One walk of the zod
// schema against the raw (file + env) tree finds every key no section
// declares, and suggests the declared key it most likely meant.
import type * as z from "zod";

export interface UnknownKey {
  /** Dotted path of the unknown key, e.g. "redis.ulr". */
  path: string;
  /** The declared key at the same level it most likely meant, as a dotted path. */
  suggestion?: string;
}

type Def = { type: string; innerType?: z.ZodType; in?: z.ZodType; out?: z.ZodType; shape?: Record<string, z.ZodType>; valueType?: z.ZodType; element?: z.ZodType; options?: z.ZodType[] };

function defOf(schema: z.ZodType): Def {
  return (schema as unknown as { _zod: { def: Def } })._zod.def;
}

/** Strips the wrappers that do not change which keys an object accepts. */
function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  for (;;) {
    const d = defOf(s);
    if ((d.type === "default" || d.type === "prefault" || d.type === "optional" || d.type === "nullable" || d.type === "readonly" || d.type === "catch") && d.innerType) s = d.innerType;
    else if (d.type === "pipe" && d.in) s = d.in;
    else return s;
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Edit distance (insert, delete, substitute, swap of neighbours). */
function distance(a: string, b: string): number {
  const m = a.length;
  const n = b.length;
  const d = Array.from({ length: m + 1 }, (_, i) => [i, ...new Array<number>(n).fill(0)]);
  for (let j = 1; j <= n; j++) d[0]![j] = j;
  for (let i = 1; i <= m; i++) {
    for (let j = 1; j <= n; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[m]![n]!;
}

/** The known key closest to `key`, if it is close enough to be a typo. */
export function closestKey(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  let best: string | undefined;
  let bestScore = Infinity;
  for (const k of known) {
    const score = k.toLowerCase() === lower ? 0 : distance(lower, k.toLowerCase());
    if (score < bestScore) {
      best = k;
      bestScore = score;
    }
  }
  // Short keys tolerate one slip, longer ones two (or a third of their length).
  const limit = Math.max(1, Math.min(3, Math.floor(key.length / 3)));
  return bestScore <= limit ? best : undefined;
}

/** Every key of `raw` the schema does not declare (objects are walked; records' values too). */
export function unknownConfigKeys(schema: z.ZodType, raw: unknown, path: string[] = []): UnknownKey[] {
  const s = unwrap(schema);
  const d = defOf(s);
  const out: UnknownKey[] = [];
  if (d.type === "object" && d.shape && isPlainObject(raw)) {
    const known = Object.keys(d.shape);
    for (const [key, value] of Object.entries(raw)) {
      const child = Object.hasOwn(d.shape, key) ? d.shape[key] : undefined;
      if (!child) {
        const suggestion = closestKey(key, known);
        out.push({ path: [...path, key].join("."), ...(suggestion ? { suggestion: [...path, suggestion].join(".") } : {}) });
      } else {
        out.push(...unknownConfigKeys(child, value, [...path, key]));
      }
    }
  } else if (d.type === "record" && d.valueType && isPlainObject(raw)) {
    for (const [key, value] of Object.entries(raw)) out.push(...unknownConfigKeys(d.valueType, value, [...path, key]));
  } else if (d.type === "array" && d.element && Array.isArray(raw)) {
    raw.forEach((v, i) => out.push(...unknownConfigKeys(d.element!, v, [...path, String(i)])));
  } else if (d.type === "union" && d.options && isPlainObject(raw)) {
    // A union accepts a key when any of its object options declares it.
    const perOption = d.options.map((o) => unknownConfigKeys(o, raw, path));
    const fewest = perOption.reduce((a, b) => (b.length < a.length ? b : a), perOption[0] ?? []);
    out.push(...fewest);
  }
  return out;
}
