import { describe, expect, it } from "vitest";
import { usageCostMicro } from "@switchyard/db";
import { usageFrom } from "./usage.ts";

describe("usageFrom", () => {
  it("reads a prompt's audio tokens from OpenAI's prompt_tokens_details.audio_tokens", () => {
    // openai-python's CompletionUsage, as OpenAI sends it for gpt-4o-audio-preview.
    const body = {
      id: "chatcmpl-1",
      usage: {
        prompt_tokens: 1_000,
        completion_tokens: 20,
        total_tokens: 1_020,
        prompt_tokens_details: { cached_tokens: 200, audio_tokens: 300 },
        completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
      },
    };
    expect(usageFrom(body)).toEqual({ prompt: 1_000, completion: 20, cached: 200, cacheWrite: 0, audio: 300, generationId: "chatcmpl-1" });
  });

  it("no details, or no audio in them: no audio field", () => {
    expect(usageFrom({ usage: { prompt_tokens: 7, completion_tokens: 4 } })).toEqual({ prompt: 7, completion: 4, cached: 0, cacheWrite: 0 });
    expect(usageFrom({ usage: { prompt_tokens: 7, completion_tokens: 4, prompt_tokens_details: null } })).toEqual({ prompt: 7, completion: 4, cached: 0, cacheWrite: 0 });
    expect(usageFrom({ usage: { prompt_tokens: 7, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 3, audio_tokens: 0 } } })).toEqual({ prompt: 7, completion: 4, cached: 3, cacheWrite: 0 });
  });

  it("audio is capped at what the cached and cache-written tokens leave of the prompt (a provider counting cached audio in both)", () => {
    const u = usageFrom({ usage: { prompt_tokens: 1_000, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 600, cache_write_tokens: 100, audio_tokens: 500 } } });
    expect(u).toMatchObject({ cached: 600, cacheWrite: 100, audio: 300 });
    expect(usageFrom({ usage: { prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 10, audio_tokens: 5 } } })?.audio).toBeUndefined();
  });

  it("cached and cache-written counts that overrun the prompt are capped to it, so the settle can price them", () => {
    const u = usageFrom({ usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 25, cache_write_tokens: 4, cache_write_1h_tokens: 4 } } })!;
    expect(u).toMatchObject({ prompt: 10, cached: 10, cacheWrite: 0 });
    expect(u.cacheWrite1h).toBeUndefined();
    const w = usageFrom({ usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 6, cache_write_tokens: 9 } } })!;
    expect(w).toMatchObject({ cached: 6, cacheWrite: 4 });
    // The price table takes what it gives (it refused the raw counts).
    const price = { inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 2_000_000n };
    expect(() => usageCostMicro({ promptTokens: 10, completionTokens: 2, cachedTokens: 25, cacheWriteTokens: 4 }, price)).toThrow(RangeError);
    expect(usageCostMicro({ promptTokens: w.prompt, completionTokens: w.completion, cachedTokens: w.cached, cacheWriteTokens: w.cacheWrite }, price)).toBeGreaterThan(0n);
  });
});
