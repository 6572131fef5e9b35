// Reading V8 heap snapshots (bench/lib/heap-snapshot.mjs) for `bench router
// --profile`: the objects a process keeps alive, by kind. Two snapshots of
// one router, idle and with a load's requests in flight, give what one
// request in flight keeps alive — what a scavenge copies at the load's
// level, and the length of its pause (issue 14).

/** The parts of a .heapsnapshot this reads. */
interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** Objects of one kind alive in a snapshot: how many, and their own bytes (not what they retain). */
export interface Kind {
  count: number;
  bytes: number;
}

/** A snapshot's objects by kind: a constructor's name, or what V8 calls the rest (closures by their function's name, strings and code as one kind each). */
export type HeapCensus = Map<string, Kind>;

/** The kind an object is counted under. */
function kindOf(type: string, name: string): string {
  switch (type) {
    case "object":
      return name;
    case "closure":
      return `${name || "(anonymous)"}()`;
    case "string":
    case "concatenated string":
    case "sliced string":
      return "(string)";
    case "code":
      return "(code)";
    case "number":
      return "(heap number)";
    case "native":
      // Array buffers' backing stores live off the V8 heap: a scavenge does not copy them.
      return name.startsWith("system / JSArrayBufferData") ? "(array buffer data, off-heap)" : `(native) ${name}`;
    default:
      return `(${type}) ${name}`;
  }
}

/** Counts a snapshot's nodes by kind. */
export function heapCensus(text: string): HeapCensus {
  const snap = JSON.parse(text) as Snapshot;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf("type");
  const nameAt = fields.indexOf("name");
  const sizeAt = fields.indexOf("self_size");
  const { nodes, strings } = snap;
  const census: HeapCensus = new Map();
  for (let i = 0; i < nodes.length; i += width) {
    const kind = kindOf(types[nodes[i + typeAt]!]!, strings[nodes[i + nameAt]!]!);
    const k = census.get(kind);
    if (k) {
      k.count++;
      k.bytes += nodes[i + sizeAt]!;
    } else census.set(kind, { count: 1, bytes: nodes[i + sizeAt]! });
  }
  return census;
}

/** What `loaded` holds beyond `idle`, kind by kind. */
export function censusGrowth(idle: HeapCensus, loaded: HeapCensus): HeapCensus {
  const out: HeapCensus = new Map();
  for (const [kind, k] of loaded) {
    const before = idle.get(kind) ?? { count: 0, bytes: 0 };
    out.set(kind, { count: k.count - before.count, bytes: k.bytes - before.bytes });
  }
  for (const [kind, k] of idle) if (!loaded.has(kind)) out.set(kind, { count: -k.count, bytes: -k.bytes });
  return out;
}

/** Requests in flight in a snapshot: the Node server's responses not yet ended (one per request). */
export function responsesIn(census: HeapCensus): number {
  return census.get("ServerResponse")?.count ?? 0;
}

/**
 * The growth per request in flight as a markdown table: its total on the
 * V8 heap (what a scavenge copies while the request is young), the
 * off-heap bytes apart, then the `top` kinds by bytes.
 */
export function liveTable(growth: HeapCensus, inFlight: number, top = 25): string {
  if (inFlight <= 0) return "(no request was in flight when the snapshot was taken)";
  const per = (x: number) => x / inFlight;
  const rows = [...growth].filter(([, k]) => k.bytes !== 0).sort((a, b) => b[1].bytes - a[1].bytes);
  const offHeap = (kind: string) => kind.startsWith("(array buffer data");
  const onHeap = rows.filter(([kind]) => !offHeap(kind)).reduce((s, [, k]) => s + k.bytes, 0);
  const off = rows.filter(([kind]) => offHeap(kind)).reduce((s, [, k]) => s + k.bytes, 0);
  const lines = [
    `${inFlight} requests in flight: ${per(onHeap).toFixed(0)} bytes per request on the V8 heap, ${per(off).toFixed(0)} off it (array buffers' backing stores).`,
    // Whatever the top kinds by bytes are, Node's own pair per request says the count is right (about 1 each).
    `Per request, Node's request and response: ${per(growth.get("IncomingMessage")?.count ?? 0).toFixed(2)} IncomingMessage, ${per(growth.get("ServerResponse")?.count ?? 0).toFixed(2)} ServerResponse.`,
    "",
    "| kind | objects per request | bytes per request |",
    "|---|---:|---:|",
    ...rows.slice(0, top).map(([kind, k]) => `| \`${kind}\` | ${per(k.count).toFixed(2)} | ${per(k.bytes).toFixed(0)} |`),
  ];
  return lines.join("\n");
}
