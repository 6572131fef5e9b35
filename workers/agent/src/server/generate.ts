// Runs one generation for the chat and the legacy completions routes: the
// whole answer as JSON, or the SSE stream with its one error event after the
// first byte. The shapes on each side are converters.ts's.
import { randomUUID } from "node:crypto";
import { FinishReason, type Done, type Event, type Loaded, type TokenLogprobs } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { pipelineRefusal, type GenerateEngine } from "../shard/pipeline.ts";
import type { WorkerContext } from "./context.ts";
import { errorEvent, errorJson } from "./errors.ts";
import { engineRequestId } from "./request.ts";
import { chatLogprobs, completionLogprobs, echoLogprobs, engineErrorStatus, finishName, samplingAsk, toGenerate, usageOf, type GenerateBody, type Input, type LogprobsAsk } from "./converters.ts";
import { ToolCallParser, toolCallDelta, type ToolCallPiece } from "./tool-calls.ts";

export type { GenerateBody } from "./converters.ts";
export { contentText } from "./converters.ts";

/** OpenAI's rules for the two shapes of the logprobs fields; a string is the 400 to answer. */
export function logprobsAsk(body: GenerateBody, chat: boolean): LogprobsAsk | string {
  if (chat) {
    if (body.logprobs != null && typeof body.logprobs !== "boolean") return "logprobs: must be a boolean";
    const top = body.top_logprobs ?? 0;
    if (!Number.isInteger(top) || top < 0 || top > 20) return "top_logprobs: an integer from 0 to 20";
    if (top > 0 && body.logprobs !== true) return "top_logprobs: needs logprobs: true";
    return body.logprobs === true ? { top } : undefined;
  }
  // Legacy completions ask with logprobs: N; a chat-style top_logprobs would be ignored.
  if (body.top_logprobs != null) return "top_logprobs: not a completions field; ask with logprobs: N (0 to 5)";
  if (body.logprobs == null) return undefined;
  if (typeof body.logprobs !== "number" || !Number.isInteger(body.logprobs) || body.logprobs < 0 || body.logprobs > 5) return "logprobs: an integer from 0 to 5";
  return { top: body.logprobs };
}

/** The body field the router puts the tenant's prefix-cache scope in (apps/router routing/scorer.ts CACHE_SCOPE_FIELD). */
export const CACHE_SCOPE_FIELD = "switchyard_cache_scope";
const CACHE_SCOPE = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The engine's prefix-cache salt for this request: the scope the router sent,
 * or "" (entries without a salt only match requests without one). The agent
 * never derives a scope itself; a malformed one is treated as none.
 */
export function routerCacheScope(body: Record<string, unknown>): string {
  const scope = body[CACHE_SCOPE_FIELD];
  return typeof scope === "string" && CACHE_SCOPE.test(scope) ? scope : "";
}

/**
 * Yields each generator's values, tagged with its index, as they come. Left
 * early (one failed, or the caller stopped), it ends the others: an engine
 * call's generator forgets its job only when it ends.
 */
async function* merged<T>(gens: AsyncGenerator<T>[]): AsyncGenerator<[number, T]> {
  const pull = (i: number) => gens[i]!.next().then((r) => ({ i, r }));
  const live = new Map(gens.map((_, i) => [i, pull(i)] as const));
  try {
    while (live.size > 0) {
      const { i, r } = await Promise.race(live.values());
      if (r.done) {
        live.delete(i);
        continue;
      }
      live.set(i, pull(i));
      yield [i, r.value];
    }
  } finally {
    // Each one left has a next() in flight: it ends once that settles (one that failed has ended).
    for (const [i, next] of live) void next.then(() => gens[i]!.return(undefined), () => {});
  }
}

/** How a choice ended, as the fields its (last) chunk carries. */
interface ChoiceEnd {
  finish_reason: string;
  /** The stop sequence that ended it (vLLM's field), only then. */
  stop_reason?: string;
}

/** One choice as it accumulates. */
interface ChoiceState {
  text: string;
  entries: TokenLogprobs[];
}

/** One engine generation (a prompt, with its n or best_of choices) as it accumulates. */
interface RunState {
  choices: Map<number, ChoiceState>;
  /** The echoed prompt's text and logprobs (completions' echo). */
  echo?: { text: string; entries: TokenLogprobs[] };
  done?: Done;
}

const meanLogprob = (c: ChoiceState) => (c.entries.length === 0 ? -Infinity : c.entries.reduce((s, e) => s + (e.chosen?.logprob ?? 0), 0) / c.entries.length);

export async function runGenerate(
  ctx: WorkerContext,
  engine: GenerateEngine,
  body: GenerateBody,
  /** One per prompt (completions' prompt may be a list); each gets n choices. */
  inputs: Input[],
  /**
   * model: what the engine reported loading (vocabulary, batch, FIM tokens);
   * prefix: the name of the prompt's long prefix, advertised once the engine has computed it;
   * cacheScope: the engine prefix-cache salt (the tenant's scope from the router, "" for none).
   */
  opts: { chat: boolean; requestId: string; spanId?: string | undefined; signal: AbortSignal; model: Loaded; prefix?: string; cacheScope?: string },
): Promise<Response> {
  const ask = logprobsAsk(body, opts.chat);
  if (typeof ask === "string") return errorJson(400, ask, "invalid_request", ask.split(":")[0]);
  const sampling = samplingAsk(body, opts.chat, opts.model);
  if ("param" in sampling) return errorJson(400, sampling.message, "invalid_request", sampling.param);
  const n = sampling.n;
  // best_of ranks choices by their mean logprob: the engine reports them even when the client did not ask.
  const engineAsk = ask ?? (sampling.generate > n ? { top: 0 } : undefined);
  const generates = inputs.map((input) => toGenerate(body, input, engineAsk, opts.cacheScope ?? "", sampling, opts.model.maxSeqLen));
  if (engine !== ctx.supervisor.client) {
    const refused = generates.map(pipelineRefusal).find((r) => r !== undefined);
    if (refused) return errorJson(400, `${refused}: not available on a split model (its shards sample one choice with temperature, top_p, top_k and seed)`, "invalid_request", refused);
  }
  // The trace's span id when the router sent one, so an engine log line leads to the span.
  const engineId = engineRequestId(opts.requestId, opts.spanId, () => randomUUID().slice(0, 8));
  const engineIds = inputs.map((_, p) => (inputs.length > 1 ? `${engineId}:${p}` : engineId));
  const id = `${opts.chat ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`;
  const created = Math.floor(Date.now() / 1000);
  const streams = generates.map((g, p) => engine.call({ case: "generate", value: g }, engineIds[p]!));
  const cancelAll = () => engineIds.forEach((e) => engine.cancel(e));
  const formatLogprobs = (entries: TokenLogprobs[], offset: number) =>
    ask === undefined ? null : opts.chat ? chatLogprobs(entries) : completionLogprobs(entries, offset);
  opts.signal.addEventListener("abort", cancelAll, { once: true });
  const end = ctx.begin();
  const release = () => {
    end();
    opts.signal.removeEventListener("abort", cancelAll);
  };
  const runs: RunState[] = inputs.map(() => ({ choices: new Map() }));
  /** The text an echo repeats: the prompt as sent, or the engine's decoding of token ids. */
  const echoText = (p: number, engineText: string) => {
    const input = inputs[p]!;
    return input.case === "prompt" ? input.value : engineText;
  };
  /** Folds one engine event into its run; true when it was the run's Done. */
  const absorb = (p: number, ev: Event): boolean => {
    const run = runs[p]!;
    if (ev.kind.case === "tokens") {
      const t = ev.kind.value;
      if (t.prompt) {
        run.echo = { text: echoText(p, t.text), entries: t.logprobs };
        return false;
      }
      let c = run.choices.get(t.index);
      if (!c) run.choices.set(t.index, (c = { text: "", entries: [] }));
      c.text += t.text;
      c.entries.push(...t.logprobs);
    } else if (ev.kind.case === "done") {
      run.done = ev.kind.value;
      return true;
    }
    return false;
  };
  // Tool calls are read out of each choice's text (tool-calls.ts), one parser
  // per choice; without tools the text is the content.
  const toolCalls = inputs.some((input) => input.case === "messages" && input.structured?.toolCalls === true);
  const parsers = new Map<number, ToolCallParser>();
  const parserOf = (index: number) => {
    if (!toolCalls) return undefined;
    let parser = parsers.get(index);
    if (!parser) parsers.set(index, (parser = new ToolCallParser()));
    return parser;
  };
  /**
   * How the choice ended, as its fields: finish_reason ("tool_calls" when the
   * model ended after making calls) and, when a stop sequence ended it, vLLM's
   * stop_reason naming it — "stop" alone does not tell it from EOS, and
   * Anthropic's stop_reason "stop_sequence" needs the match (the router's
   * translate/messages reads it). Absent otherwise.
   */
  const endOf = (done: Done, engineIndex: number, parser?: ToolCallParser): ChoiceEnd => {
    const c = done.choices.find((c) => c.index === engineIndex);
    const r = c?.finishReason ?? done.finishReason;
    const finish_reason = parser && parser.calls.length > 0 && r === FinishReason.STOP ? "tool_calls" : finishName(r);
    return c?.stopSequence ? { finish_reason, stop_reason: c.stopSequence } : { finish_reason };
  };
  const usage = () => {
    const all = runs.map((r) => usageOf(r.done!));
    const prompt = all.reduce((s, u) => s + u.prompt_tokens, 0);
    const completion = all.reduce((s, u) => s + u.completion_tokens, 0);
    const cached = all.reduce((s, u) => s + u.prompt_tokens_details.cached_tokens, 0);
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
  };

  if (!body.stream) {
    try {
      for await (const [p, ev] of merged(streams)) absorb(p, ev);
      if (runs.some((r) => !r.done)) return errorJson(502, "engine ended without a result", "engine_error");
      if (opts.prefix) ctx.notePrefix(opts.prefix);
      const choices = runs.flatMap((run, p) => {
        let picked = [...run.choices.entries()].sort(([a], [b]) => a - b);
        // best_of: the n with the highest mean logprob per token, best first.
        if (sampling.generate > n) picked = picked.sort(([, a], [, b]) => meanLogprob(b) - meanLogprob(a)).slice(0, n);
        return picked.map(([engineIndex, c], k) => {
          const index = p * n + k;
          if (opts.chat) {
            const parser = toolCalls ? new ToolCallParser() : undefined;
            let message: Record<string, unknown> = { role: "assistant", content: c.text };
            if (parser) {
              parser.feed(c.text);
              parser.finish();
              message = { role: "assistant", content: parser.calls.length > 0 && !parser.text ? null : parser.text, ...(parser.calls.length > 0 ? { tool_calls: parser.calls } : {}) };
            }
            return { index, message, ...endOf(run.done!, engineIndex, parser), logprobs: formatLogprobs(c.entries, 0) };
          }
          const end = endOf(run.done!, engineIndex);
          const echo = sampling.echo ? run.echo : undefined;
          const prefix = echo?.text ?? "";
          let logprobs: unknown = formatLogprobs(c.entries, prefix.length);
          if (echo && ask !== undefined) {
            const e = echoLogprobs(echo.entries);
            const g = logprobs as ReturnType<typeof completionLogprobs>;
            logprobs = { tokens: [...e.tokens, ...g.tokens], token_logprobs: [...e.token_logprobs, ...g.token_logprobs], top_logprobs: [...e.top_logprobs, ...g.top_logprobs], text_offset: [...e.text_offset, ...g.text_offset] };
          }
          return { index, text: prefix + c.text, ...end, logprobs };
        });
      });
      return Response.json({ id, object: opts.chat ? "chat.completion" : "text_completion", created, model: body.model, choices, usage: usage() });
    } catch (err) {
      // One prompt (or choice) failed: the others' jobs stop too, not run on for an answer nobody gets.
      cancelAll();
      const e = engineErrorStatus(err);
      return errorJson(e.status, e.message, e.code, e.param);
    } finally {
      release();
    }
  }

  // Streaming (best_of is n here): wait for the first event before committing
  // to a 200, so an engine that refuses the request answers with a proper status.
  const events = merged(streams);
  let first: IteratorResult<[number, Event]>;
  try {
    first = await events.next();
  } catch (err) {
    release();
    cancelAll();
    const e = engineErrorStatus(err);
    return errorJson(e.status, e.message, e.code, e.param);
  }
  const includeUsage = body.stream_options?.include_usage === true;
  const enc = new TextEncoder();
  const sse = (payload: string) => enc.encode(`data: ${payload}\n\n`);
  // Per choice: logprobs ride on the next chunk that goes out (a token's
  // text can be held back: an unfinished UTF-8 character, a possible stop
  // sequence), text offsets, whether the role went out.
  const pending = new Map<number, TokenLogprobs[]>();
  const sentChars = new Map<number, number>();
  const sentRole = new Set<number>();
  /** A chunk of one choice; its last one carries how it ended (`end`), null before. */
  const chunk = (index: number, text: string, end: ChoiceEnd | null, logprobs?: unknown) => {
    const lp = logprobs !== undefined ? logprobs : formatLogprobs(pending.get(index) ?? [], sentChars.get(index) ?? 0);
    pending.delete(index);
    sentChars.set(index, (sentChars.get(index) ?? 0) + text.length);
    const ending = end ?? { finish_reason: null };
    if (!opts.chat) return JSON.stringify({ id, object: "text_completion", created, model: body.model, choices: [{ index, text, ...ending, logprobs: lp }] });
    const delta = sentRole.has(index) ? (text || end === null ? { content: text } : {}) : { role: "assistant", content: text };
    sentRole.add(index);
    return JSON.stringify({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index, delta, ...ending, logprobs: lp }] });
  };
  /** A chat chunk of a choice read for tool calls: its text as content, its calls as OpenAI's delta.tool_calls. */
  const pieceChunk = (index: number, piece: ToolCallPiece) => {
    if (piece.kind === "text") return chunk(index, piece.text, null);
    const lp = formatLogprobs(pending.get(index) ?? [], 0);
    pending.delete(index);
    // OpenAI's first chunk of a call carries the role and a null content.
    const delta = { ...(sentRole.has(index) ? {} : { role: "assistant", content: null }), tool_calls: [toolCallDelta(piece)] };
    sentRole.add(index);
    return JSON.stringify({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index, delta, finish_reason: null, logprobs: lp }] });
  };
  /** The client went away (cancel): what fails after that is its leaving, not the engine. */
  let gone = false;
  // Pushed as the engine makes tokens, without waiting for a slow reader
  // (no backpressure, on purpose): the sequence's batch slot is the scarce
  // thing, and holding it for a reader would slow every stream batched with
  // it. What waits here is bounded by the sequence's own max_tokens (text,
  // a few hundred bytes an event), and a reader that leaves cancels it.
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      let current = first;
      let finished = 0;
      // Several choices: each opens with its role, in index order, before any
      // token, as OpenAI streams them. Clients build their snapshot from the
      // first chunk and append the indices after it (the openai Python SDK's
      // chat.completions.stream() failed with IndexError when choice 1 spoke first).
      if (opts.chat && runs.length * n > 1) {
        for (let index = 0; index < runs.length * n; index++) {
          const delta = parserOf(index) ? { role: "assistant" } : { role: "assistant", content: "" };
          sentRole.add(index);
          controller.enqueue(sse(JSON.stringify({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index, delta, finish_reason: null, logprobs: null }] })));
        }
      }
      try {
        while (!current.done) {
          const [p, ev] = current.value;
          if (ev.kind.case === "done" && ev.kind.value.finishReason === FinishReason.CANCELLED) break;
          const ended = absorb(p, ev);
          if (ev.kind.case === "tokens") {
            const t = ev.kind.value;
            if (t.prompt && sampling.echo && !opts.chat) {
              // The echoed prompt opens each of this prompt's choices.
              const echo = runs[p]!.echo!;
              const lp = ask === undefined ? null : echoLogprobs(echo.entries);
              for (let j = 0; j < n; j++) controller.enqueue(sse(chunk(p * n + j, echo.text, null, lp)));
            } else if (!t.prompt) {
              const index = p * n + t.index;
              pending.set(index, [...(pending.get(index) ?? []), ...t.logprobs]);
              const parser = opts.chat ? parserOf(index) : undefined;
              if (parser) for (const piece of parser.feed(t.text)) controller.enqueue(sse(pieceChunk(index, piece)));
              else if (t.text) controller.enqueue(sse(chunk(index, t.text, null)));
            }
          }
          if (ended) {
            const done = runs[p]!.done!;
            for (let j = 0; j < n; j++) {
              const index = p * n + j;
              const parser = opts.chat ? parserOf(index) : undefined;
              // Text held back as a possible call's start goes out as content.
              for (const piece of parser?.finish() ?? []) if (piece.kind === "text") controller.enqueue(sse(pieceChunk(index, piece)));
              controller.enqueue(sse(chunk(index, "", endOf(done, j, parser))));
            }
            if (++finished === runs.length) {
              if (opts.prefix) ctx.notePrefix(opts.prefix);
              if (includeUsage) controller.enqueue(sse(JSON.stringify({ id, object: opts.chat ? "chat.completion.chunk" : "text_completion", created, model: body.model, choices: [], usage: usage() })));
              controller.enqueue(sse("[DONE]"));
              break;
            }
          }
          current = await events.next();
        }
      } catch (err) {
        // After the first byte: exactly one error event, then close.
        cancelAll();
        if (gone) return;
        const e = engineErrorStatus(err);
        ctx.log("stream failed", { request_id: opts.requestId, error: e.message });
        try {
          controller.enqueue(sse(errorEvent(e.message, e.code)));
        } catch {
          // client already gone
        }
      } finally {
        release();
        try {
          controller.close();
        } catch {
          // already closed by cancel
        }
      }
    },
    cancel() {
      gone = true;
      cancelAll();
      void events.return(undefined);
      release();
    },
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}
