// POST /v1/chat/completions — OpenAI chat, streamed or not.
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields, streamOptionsNeedStream, UINT32_MAX } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

/**
 * OpenAI's content part types, as it lists them in its own 400. Any other
 * (a `video_url`, a typo) is refused here rather than passed on: a paid
 * upstream may bill it by a size nothing here can bound before it runs, and
 * a worker would ignore it silently.
 */
const CONTENT_PART_TYPES = ["text", "image_url", "input_audio", "refusal", "file"] as const;
const contentPart = z.looseObject({
  // A refinement, not z.enum: inside the content union an enum's miss reads as
  // "no option matched" on `content`; this one names the part's `type`.
  type: z
    .string()
    .refine((t) => (CONTENT_PART_TYPES as readonly string[]).includes(t), {
      error: (issue) => `Invalid value: '${String(issue.input).slice(0, 64)}'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', and 'file'.`,
    })
    // The same, said in JSON Schema for the OpenAPI document.
    .meta({ enum: [...CONTENT_PART_TYPES] }),
});

/** An assistant message's call, as OpenAI sends it back in the conversation. */
const toolCall = z.looseObject({
  id: z.string(),
  type: z.literal("function"),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

export const chatMessageSchema = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
  name: z.string().optional(),
  tool_calls: z.array(toolCall).nullish(),
  tool_call_id: z.string().nullish(),
});

const jsonSchema = z.record(z.string(), z.unknown());
const functionName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "1-64 letters, digits, _ or -");

/**
 * Structured outputs and tool calls, as OpenAI defines them. Workers enforce
 * them by constrained decoding; paid backends get them forwarded (or refused
 * by their adapter, as Anthropic's does for response_format).
 */
export const structuredFields = {
  response_format: z
    .discriminatedUnion("type", [
      z.looseObject({ type: z.literal("text") }),
      z.looseObject({ type: z.literal("json_object") }),
      z.looseObject({
        type: z.literal("json_schema"),
        json_schema: z.looseObject({ name: z.string().optional(), description: z.string().optional(), schema: jsonSchema.optional(), strict: z.boolean().nullish() }),
      }),
    ])
    .nullish(),
  tools: z
    .array(
      z.looseObject({
        type: z.literal("function"),
        function: z.looseObject({ name: functionName, description: z.string().optional(), parameters: jsonSchema.optional(), strict: z.boolean().nullish() }),
      }),
    )
    .max(128)
    .nullish(),
  tool_choice: z
    .union([
      z.enum(["none", "auto", "required"]),
      z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) }),
      // Call only these of the tools (pipeline/allowed-tools.ts narrows `tools` to them).
      z.looseObject({
        type: z.literal("allowed_tools"),
        allowed_tools: z.looseObject({ mode: z.enum(["auto", "required"]), tools: z.array(z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) })).min(1).max(128) }),
      }),
    ])
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
};

export const chatCompletionSchema = z
  .looseObject({
    ...generationFields,
    ...structuredFields,
    messages: z.array(chatMessageSchema).min(1),
    // OpenAI's values: a typo is a 400 here, not a value an upstream reads as it likes.
    verbosity: z.enum(["low", "medium", "high"]).nullish(),
    // OpenRouter's reasoning object, its values as it documents them.
    reasoning: z
      .looseObject({
        effort: z.enum(["xhigh", "high", "medium", "low", "minimal", "none"]).nullish(),
        max_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
        exclude: z.boolean().nullish(),
        enabled: z.boolean().nullish(),
      })
      .nullish(),
  })
  .superRefine((body, ctx) => {
    streamOptionsNeedStream(body, ctx);
    const choice = body.tool_choice;
    if (choice == null || choice === "none") return;
    const names = (body.tools ?? []).map((t) => t.function.name);
    if (names.length === 0) ctx.addIssue({ code: "custom", path: ["tool_choice"], message: "needs tools" });
    else if (typeof choice === "object" && choice.type === "allowed_tools") {
      const missing = choice.allowed_tools.tools.find((t) => !names.includes(t.function.name));
      if (missing) ctx.addIssue({ code: "custom", path: ["tool_choice", "allowed_tools", "tools"], message: `'${missing.function.name}' is not among the tools` });
    } else if (typeof choice === "object" && !names.includes(choice.function.name)) {
      ctx.addIssue({ code: "custom", path: ["tool_choice"], message: `'${choice.function.name}' is not among the tools` });
    }
  });

/** The answer's documented shape (OpenAI's chat.completion; streams are chat.completion.chunk events). */
export const chatCompletionAnswer = z.looseObject({ id: z.string(), object: z.literal("chat.completion"), choices: z.array(z.looseObject({ index: z.number().int() })) });

export function registerChatCompletions(app: RouteTable, deps: AppDeps): void {
  app.post(
    "/v1/chat/completions",
    authenticate(deps),
    jsonBody(deps, chatCompletionSchema),
    documented(
      { summary: "Create a chat completion", tag: "inference", operationId: "createChatCompletion", responses: completionAnswer(chatCompletionAnswer, "a chat.completion, or with stream: true an SSE stream of chat.completion.chunk events ending with data: [DONE]"), errors: inferenceErrors },
      (c) => handleInference(c, deps, "/v1/chat/completions"),
    ),
  );
}
