import { describe, expect, it } from "vitest";
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
});
