// A request schema's fast path (issue 14). zod parses a body into a new
// value: a fresh object for every object, a payload and an issue list for
// every field. For the bodies nearly every client sends — no defaults to
// fill, no transforms, no keys to strip — that value equals the body. So
// once per schema, acceptsAsIs compiles a predicate that says "zod would
// accept this body and hand it back unchanged": it tests each value's type
// as zod's parser for that type does, and runs the schema's own checks
// through the checks themselves (each check's `_zod.check`, the function
// zod calls), so a bound, a regex or a refinement is never restated here.
// What it cannot vouch for — a transform, a default, a type it does not
// know, an async refinement, an object whose unknown keys zod would strip —
// answers false, and the body goes through zod as before, for its value or
// for the error that names the bad field. Zod stays the one schema; a
// differential test (accept-as-is.test.ts) holds the two to each other.
import type * as z from "zod";

type Accept = (value: unknown) => boolean;

/** The zod 4 internals read here: a schema's definition and its checks. */
interface Check {
  _zod: { def: { check: string; when?: (payload: Payload) => boolean }; check(payload: Payload): unknown };
}
interface Def {
  type: string;
  coerce?: boolean;
  checks?: Check[];
  innerType?: Schema;
  element?: Schema;
  options?: Schema[];
  shape?: Record<string, Schema>;
  catchall?: Schema;
  keyType?: Schema;
  valueType?: Schema;
  entries?: Record<string, unknown>;
  values?: unknown[];
}
interface Schema {
  _zod: { def: Def };
}
interface Payload {
  value: unknown;
  issues: unknown[];
}

const never: Accept = () => false;
const always: Accept = () => true;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The schema's checks as zod runs them when nothing failed before: each
 * (unless its `when` says to skip it) on a payload holding the value; any
 * issue, or a promise (an async refinement), and the fast path gives up.
 */
function withChecks(checks: Check[] | undefined, test: Accept): Accept {
  if (!checks || checks.length === 0) return test;
  return (v) => {
    if (!test(v)) return false;
    const payload: Payload = { value: v, issues: [] };
    for (const ch of checks) {
      const when = ch._zod.def.when;
      if (when && !when(payload)) continue;
      if (ch._zod.check(payload) instanceof Promise || payload.issues.length > 0) return false;
    }
    return true;
  };
}

const compiled = new WeakMap<object, Accept>();

function compile(schema: Schema): Accept {
  const known = compiled.get(schema);
  if (known) return known;
  // A schema may contain itself (an object whose shape names it through a
  // getter): while it is being built, a reference to it forwards to what
  // the build returns.
  let built: Accept | undefined;
  compiled.set(schema, (v) => built!(v));
  built = build(schema._zod.def);
  compiled.set(schema, built);
  return built;
}

function build(def: Def): Accept {
  if (def.coerce) return never;
  switch (def.type) {
    case "string":
      return withChecks(def.checks, (v) => typeof v === "string");
    case "number":
      // zod's number refuses NaN and ±Infinity (JSON has neither, a caller might).
      return withChecks(def.checks, (v) => typeof v === "number" && Number.isFinite(v));
    case "boolean":
      return withChecks(def.checks, (v) => typeof v === "boolean");
    case "null":
      return (v) => v === null;
    case "unknown":
    case "any":
      return withChecks(def.checks, always);
    case "literal": {
      const values = new Set(def.values);
      return withChecks(def.checks, (v) => values.has(v));
    }
    case "enum": {
      const values = new Set(Object.values(def.entries ?? {}));
      return withChecks(def.checks, (v) => values.has(v));
    }
    case "optional": {
      const inner = compile(def.innerType!);
      return withChecks(def.checks, (v) => v === undefined || inner(v));
    }
    case "nullable": {
      const inner = compile(def.innerType!);
      return withChecks(def.checks, (v) => v === null || inner(v));
    }
    case "array": {
      const element = compile(def.element!);
      return withChecks(def.checks, (v) => {
        if (!Array.isArray(v)) return false;
        for (let i = 0; i < v.length; i++) if (!element(v[i])) return false;
        return true;
      });
    }
    case "union": {
      // Plain and discriminated alike: zod hands back the option that
      // accepts, and an option accepted here is handed back unchanged.
      const options = def.options!.map(compile);
      return withChecks(def.checks, (v) => {
        for (const o of options) if (o(v)) return true;
        return false;
      });
    }
    case "object":
      return withChecks(def.checks, objectAccept(def));
    case "record":
      return withChecks(def.checks, recordAccept(def));
    default:
      // pipe, transform, default, catch, lazy, date, bigint, tuple, …: zod's.
      return never;
  }
}

function objectAccept(def: Def): Accept {
  const shape = def.shape!;
  const keys = Object.keys(shape);
  const fields = keys.map((k) => compile(shape[k]!));
  const known = new Set(keys);
  // Unknown keys: a loose object keeps them as they are; a strict one
  // refuses them and a plain one strips them — zod's answer either way.
  const catchallType = def.catchall?._zod.def.type;
  const keepsUnknown = catchallType === "unknown" || catchallType === "any";
  return (v) => {
    if (!isObject(v)) return false;
    for (let i = 0; i < keys.length; i++) if (!fields[i]!(v[keys[i]!])) return false;
    // JSON.parse makes "__proto__" an own key, which zod's copy does not keep as one.
    if (Object.hasOwn(v, "__proto__")) return false;
    if (!keepsUnknown) for (const k in v) if (!known.has(k)) return false;
    return true;
  };
}

function recordAccept(def: Def): Accept {
  // Keys typed as plain strings only: zod reads enum and literal keys as a
  // list every record must cover, and may rewrite a numeric key.
  if (def.keyType?._zod.def.type !== "string") return never;
  const key = compile(def.keyType);
  const value = compile(def.valueType!);
  return (v) => {
    if (!isObject(v) || Object.getPrototypeOf(v) !== Object.prototype) return false;
    // zod's copy leaves "__proto__" out.
    if (Object.hasOwn(v, "__proto__")) return false;
    for (const k in v) if (!key(k) || !value(v[k])) return false;
    return true;
  };
}

/**
 * The schema's predicate: true only for a value zod would accept and return
 * unchanged (equal, key for key), so the value itself can stand for zod's
 * parse. Compiled on first use and kept with the schema.
 */
export function acceptsAsIs(schema: z.ZodType): Accept {
  return compile(schema as unknown as Schema);
}
