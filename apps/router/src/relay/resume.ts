// Resuming a stream that broke mid-way, for requests that opt in: the text
// already relayed is replayed to another worker as the start of the answer
// (chat: a final assistant message to continue; completions: appended to
// the prompt), max_tokens shrinks by what was produced, and the
// continuation's chunks are rewritten to look like the first worker's (same
// id, created and model; no second role delta), so the client reads one
// uninterrupted stream with nothing repeated.
//
// Chat continuation asks with vLLM's fields (`continue_final_message: true`,
// `add_generation_prompt: false`), which Switchyard's own workers honour; a
// worker that ignores them starts a new assistant turn after the partial
// one, which reads less smoothly but still never repeats what the client
// already has.
import type { BackendRequest } from "../backends/types.ts";

interface Ident {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  object?: unknown;
  system_fingerprint?: unknown;
}

type Chunk = {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  object?: unknown;
  system_fingerprint?: unknown;
  choices?: Array<{ index?: number; delta?: { role?: unknown; content?: unknown }; text?: unknown; finish_reason?: unknown }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null;
};

/** What a continuation needs instead of another upstream call. */
export type Continuation =
  | { kind: "request"; req: BackendRequest }
  /** The answer was already complete (or its max_tokens reached): these payloads end it. */
  | { kind: "finish"; payloads: string[] }
  /** This request cannot be continued (e.g. a prompt list). */
  | { kind: "impossible"; why: string };

export function resumable(req: BackendRequest): boolean {
  if (!req.stream || req.raw) return false;
  // A continuation is one text carried on: not several choices, not an echo
  // or a fill-in-the-middle, and not penalties that count what was generated
  // (the continuation would see it as prompt).
  const b = req.body;
  if ((typeof b.n === "number" && b.n > 1) || b.echo === true || (typeof b.suffix === "string" && b.suffix !== "")) return false;
  if ((typeof b.frequency_penalty === "number" && b.frequency_penalty !== 0) || (typeof b.presence_penalty === "number" && b.presence_penalty !== 0)) return false;
  if (req.path === "/v1/chat/completions") return Array.isArray(req.body.messages) && !constrained(req.body);
  if (req.path === "/v1/completions") {
    const p = req.body.prompt;
    return typeof p === "string" || (Array.isArray(p) && p.length === 1 && typeof p[0] === "string");
  }
  return false;
}

/**
 * A grammar-constrained answer (a JSON response format, tool calls) cannot be
 * continued from its text: the continuation would start the grammar over,
 * and streamed tool calls are not content. Such a stream that breaks ends
 * with its error event instead.
 */
function constrained(body: Record<string, unknown>): boolean {
  const rf = body.response_format as { type?: unknown } | null | undefined;
  const tools = Array.isArray(body.tools) && body.tools.length > 0 && body.tool_choice !== "none";
  return tools || (rf != null && rf.type !== "text");
}

export class StreamResume {
  /** Text the client has received. */
  private text = "";
  /** Content chunks the client has received (one token each from our workers). */
  private tokens = 0;
  /** Tokens received before the current continuation started. */
  private base = 0;
  private ident: Ident | undefined;
  /** A finish_reason reached the client: the answer is complete. */
  private finished = false;
  /** Continuations opened so far. */
  resumes = 0;
  private readonly chat: boolean;

  constructor(
    private readonly req: BackendRequest,
    readonly maxResumes: number,
  ) {
    this.chat = req.path === "/v1/chat/completions";
  }

  /** Tokens the client has received so far. */
  get produced(): number {
    return this.tokens;
  }

  /** Every payload relayed to the client, after any rewrite. */
  track(payload: string): void {
    if (payload.charCodeAt(0) !== 123 /* { */) return;
    let p: Chunk;
    try {
      p = JSON.parse(payload) as Chunk;
    } catch {
      return;
    }
    this.ident ??= { id: p.id, created: p.created, model: p.model, object: p.object, system_fingerprint: p.system_fingerprint };
    const c = p.choices?.[0];
    if (!c) return;
    const piece = this.chat ? c.delta?.content : c.text;
    if (typeof piece === "string" && piece.length > 0) {
      this.text += piece;
      this.tokens++;
    }
    if (c.finish_reason !== null && c.finish_reason !== undefined) this.finished = true;
  }

  private maxTokensKey(): "max_tokens" | "max_completion_tokens" | undefined {
    const b = this.req.body;
    if (typeof b.max_completion_tokens === "number") return "max_completion_tokens";
    if (typeof b.max_tokens === "number") return "max_tokens";
    return undefined;
  }

  /** The next upstream request (counted as one resume), or how to end without one. */
  continuation(): Continuation {
    if (!resumable(this.req)) return { kind: "impossible", why: "only single-prompt chat and completion streams can be resumed" };
    if (this.finished) return { kind: "finish", payloads: ["[DONE]"] };
    const key = this.maxTokensKey();
    const max = key ? (this.req.body[key] as number) : undefined;
    if (max !== undefined && this.tokens >= max) return { kind: "finish", payloads: [this.finishChunk("length"), "[DONE]"] };
    const body: Record<string, unknown> = { ...this.req.body };
    if (key && max !== undefined) body[key] = max - this.tokens;
    if (this.chat) {
      if (this.text.length > 0) {
        body.messages = [...(this.req.body.messages as unknown[]), { role: "assistant", content: this.text }];
        body.continue_final_message = true;
        body.add_generation_prompt = false;
      }
    } else {
      const p = this.req.body.prompt;
      body.prompt = (typeof p === "string" ? p : (p as string[])[0]!) + this.text;
    }
    this.base = this.tokens;
    this.resumes++;
    return { kind: "request", req: { ...this.req, body } };
  }

  /** A continuation's payload, made to look like the first upstream's. */
  rewrite(payload: string): string {
    if (payload.charCodeAt(0) !== 123 /* { */ || !this.ident) return payload;
    let p: Chunk;
    try {
      p = JSON.parse(payload) as Chunk;
    } catch {
      return payload;
    }
    if ("error" in p) return payload;
    for (const k of ["id", "created", "model", "system_fingerprint"] as const) {
      if (this.ident[k] !== undefined) p[k] = this.ident[k];
    }
    for (const c of p.choices ?? []) {
      if (c.delta && "role" in c.delta) delete c.delta.role;
    }
    if (p.usage) {
      // The continuation's prompt held the answer so far: count it as output, as one request would have.
      const prompt = Math.max(0, (p.usage.prompt_tokens ?? 0) - this.base);
      const completion = (p.usage.completion_tokens ?? 0) + this.base;
      p.usage = { ...p.usage, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
    }
    return JSON.stringify(p);
  }

  private finishChunk(reason: string): string {
    const i = this.ident ?? {};
    return JSON.stringify(
      this.chat
        ? { id: i.id, object: "chat.completion.chunk", created: i.created, model: i.model, choices: [{ index: 0, delta: {}, finish_reason: reason, logprobs: null }] }
        : { id: i.id, object: "text_completion", created: i.created, model: i.model, choices: [{ index: 0, text: "", finish_reason: reason, logprobs: null }] },
    );
  }
}
