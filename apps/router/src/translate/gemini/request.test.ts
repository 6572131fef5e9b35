// The Gemini request translator without a router: Gemini CLI's own request
// (recorded from GeminiCLI 0.61.0 on gemini-2.5-flash, trimmed), tool round
// trips with and without ids, Google's Schema made JSON Schema, signed
// reasoning coming back on a model turn, and a 400 naming each field that
// cannot be honoured.
import { describe, expect, it } from "vitest";
import { ApiError } from "../../errors.ts";
import type { Json } from "../boundary.ts";
import { jsonSchemaOf, toChatRequest, toCountChatRequest } from "./request.ts";
import { mintThoughtSignature } from "./signature.ts";

const readFile = {
  name: "read_file",
  description: "Reads and returns the content of a specified file. If the file is large, the content will be truncated.",
  parametersJsonSchema: {
    type: "object",
    properties: {
      file_path: { description: "The path to the file to read.", type: "string" },
      start_line: { description: "Optional: The 1-based line number to start reading from.", type: "integer", minimum: 1 },
      end_line: { description: "Optional: The 1-based line number to end reading at (inclusive).", type: "integer", minimum: 1 },
    },
    required: ["file_path"],
  },
};
const glob = {
  name: "glob",
  description: "Efficiently finds files matching specific glob patterns (e.g., `src/**/*.ts`, `**/*.md`).",
  parametersJsonSchema: {
    type: "object",
    properties: {
      pattern: { description: "The glob pattern to match against (e.g., '**/*.py', 'docs/*.md').", type: "string" },
      dir_path: { description: "Optional: The absolute path to the directory to search within.", type: "string" },
      case_sensitive: { description: "Optional: Whether the search should be case-sensitive. Defaults to false.", type: "boolean" },
    },
    required: ["pattern"],
  },
};
const sessionContext =
  "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nMy operating system is: linux\n- **Workspace Directories:**\n  - /tmp/gmprobe/proj\n\n/tmp/gmprobe/proj/\n\n\n\n</session_context>";
/** Gemini CLI's body for `say hi` (POST …/models/gemini-2.5-flash:streamGenerateContent?alt=sse), its system prompt and tools shortened. */
const geminiCli: Json = {
  contents: [{ parts: [{ text: sessionContext }, { text: "say hi" }], role: "user" }],
  systemInstruction: { parts: [{ text: "You are a non-interactive CLI agent specializing in software engineering tasks.\n\n# Core Mandates\n" }], role: "user" },
  tools: [{ functionDeclarations: [readFile, glob] }],
  generationConfig: { temperature: 1, topP: 0.95, topK: 64, thinkingConfig: { includeThoughts: true, thinkingBudget: 8192 } },
};

const user = (...parts: Json[]): Json => ({ role: "user", parts });
const model = (...parts: Json[]): Json => ({ role: "model", parts });
const chatOf = (body: Json) => toChatRequest(body, "m", false).chat;
const messagesOf = (contents: Json[]) => chatOf({ contents }).messages as Json[];

/** The param of the 400 `fn` throws. */
function paramOf(fn: () => unknown): string | null {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    const e = err as ApiError;
    expect(e.code).toBe("invalid_request");
    expect(e.message.startsWith(`${e.param}: `)).toBe(true);
    return e.param;
  }
  throw new Error("no error thrown");
}

describe("Gemini CLI's request", () => {
  it("is the chat body a run sends: system first, its functions as chat tools, sampling and a thinking budget", () => {
    const { chat, includeThoughts, needs } = toChatRequest(geminiCli, "gemini-2.5-flash", true);
    expect(includeThoughts).toBe(true);
    expect(needs).toEqual([]);
    expect(chat).toEqual({
      model: "gemini-2.5-flash",
      messages: [
        { role: "system", content: "You are a non-interactive CLI agent specializing in software engineering tasks.\n\n# Core Mandates\n" },
        // Two pieces: a line break between them, not glued into one line.
        { role: "user", content: `${sessionContext}\nsay hi` },
      ],
      stream: true,
      stream_options: { include_usage: true },
      tools: [
        { type: "function", function: { name: "read_file", description: readFile.description, parameters: readFile.parametersJsonSchema } },
        { type: "function", function: { name: "glob", description: glob.description, parameters: glob.parametersJsonSchema } },
      ],
      temperature: 1,
      top_p: 0.95,
      top_k: 64,
      reasoning: { max_tokens: 8192 },
    });
  });

  it("counts the prompt a run sends, as {contents} or a whole generateContentRequest", () => {
    const { chat } = toChatRequest(geminiCli, "gemini-2.5-flash", false);
    expect(toCountChatRequest({ generateContentRequest: { model: "models/gemini-2.5-flash", ...geminiCli } }, "gemini-2.5-flash")).toEqual({
      model: "gemini-2.5-flash",
      messages: chat.messages,
      tools: chat.tools,
    });
    expect(toCountChatRequest({ contents: geminiCli.contents }, "gemini-2.5-flash")).toEqual({ model: "gemini-2.5-flash", messages: [(chat.messages as Json[])[1]] });
    // The same 400s as a run, named where the client sent them.
    expect(paramOf(() => toCountChatRequest({ generateContentRequest: { ...geminiCli, cachedContent: "cachedContents/x" } }, "m"))).toBe("generateContentRequest.cachedContent");
    expect(paramOf(() => toCountChatRequest({ contents: [user({ fileData: { fileUri: "x" } })] }, "m"))).toBe("contents[0].parts[0].fileData");
    expect(paramOf(() => toCountChatRequest({ contents: geminiCli.contents, generateContentRequest: geminiCli }, "m"))).toBe("generateContentRequest");
  });
});

describe("function calls", () => {
  it("without ids: the call gets one, the response finds it by name, two of one name in order", () => {
    const messages = messagesOf([
      user({ text: "read both" }),
      model({ text: "Reading." }, { functionCall: { name: "read_file", args: { file_path: "a" } } }, { functionCall: { name: "glob", args: { pattern: "*" } } }, { functionCall: { name: "read_file", args: { file_path: "b" } } }),
      user({ functionResponse: { name: "read_file", response: { output: "A" } } }, { functionResponse: { name: "glob", response: { output: "G" } } }, { functionResponse: { name: "read_file", response: { output: "B" } } }, { text: "thanks" }),
    ]);
    expect(messages).toEqual([
      { role: "user", content: "read both" },
      {
        role: "assistant",
        content: "Reading.",
        tool_calls: [
          { id: "call_1_0", type: "function", function: { name: "read_file", arguments: '{"file_path":"a"}' } },
          { id: "call_1_1", type: "function", function: { name: "glob", arguments: '{"pattern":"*"}' } },
          { id: "call_1_2", type: "function", function: { name: "read_file", arguments: '{"file_path":"b"}' } },
        ],
      },
      // The results first, right after the calls; the turn's text after them.
      { role: "tool", tool_call_id: "call_1_0", content: '{"output":"A"}' },
      { role: "tool", tool_call_id: "call_1_1", content: '{"output":"G"}' },
      { role: "tool", tool_call_id: "call_1_2", content: '{"output":"B"}' },
      { role: "user", content: "thanks" },
    ]);
  });

  it("with ids (Gemini CLI's): kept on both sides, whatever the order of the responses", () => {
    const messages = messagesOf([
      user({ text: "go" }),
      model({ functionCall: { id: "x1", name: "read_file", args: { file_path: "a" } } }, { functionCall: { id: "x2", name: "read_file" } }),
      { role: "function", parts: [{ functionResponse: { id: "x2", name: "read_file", response: { error: "no" } } }, { functionResponse: { id: "x1", name: "read_file", response: { output: "A" } } }] },
    ]);
    expect(messages.slice(1)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "x1", type: "function", function: { name: "read_file", arguments: '{"file_path":"a"}' } },
          { id: "x2", type: "function", function: { name: "read_file", arguments: "{}" } },
        ],
      },
      { role: "tool", tool_call_id: "x2", content: '{"error":"no"}' },
      { role: "tool", tool_call_id: "x1", content: '{"output":"A"}' },
    ]);
  });

  it("a response with no call left to answer is a 400 naming it", () => {
    const contents = [user({ text: "go" }), model({ functionCall: { name: "glob" } }), user({ functionResponse: { name: "glob", response: {} } }, { functionResponse: { name: "glob", response: {} } })];
    expect(paramOf(() => messagesOf(contents))).toBe("contents[2].parts[1].functionResponse");
  });

  it("an image beside a function response (Gemini CLI's read_file of one) follows the tool message", () => {
    const { chat, needs } = toChatRequest(
      { contents: [user({ text: "look" }), model({ functionCall: { name: "read_file", args: { file_path: "a.png" } } }), user({ functionResponse: { name: "read_file", response: { output: "read a.png" } } }, { inlineData: { mimeType: "image/png", data: "iVBORw0KGgo=" } })] },
      "m",
      false,
    );
    expect((chat.messages as Json[]).slice(2)).toEqual([
      { role: "tool", tool_call_id: "call_1_0", content: '{"output":"read a.png"}' },
      { role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] },
    ]);
    expect(needs).toEqual([{ feature: "image_input", param: "contents[2].parts[1].inlineData" }]);
  });
});

describe("model turns", () => {
  it("shown thoughts are dropped, streamed pieces of text joined as written", () => {
    const messages = messagesOf([user({ text: "hi" }), model({ text: "I should greet.", thought: true }, { text: "Hel" }, { text: "lo!" }), user({ text: "again" })]);
    expect(messages[1]).toEqual({ role: "assistant", content: "Hello!" });
  });

  it("a thoughtSignature this router minted gives its reasoning_details back to the turn; another is ignored", () => {
    const details = [{ type: "reasoning.text", text: "Let me read it.", signature: "EqQBCkYIBxgCKkA", format: "anthropic-claude-v1", index: 0 }];
    const messages = messagesOf([
      user({ text: "read a" }),
      model(
        { text: "Let me read it.", thought: true },
        { functionCall: { name: "read_file", args: { file_path: "a" } }, thoughtSignature: mintThoughtSignature(details) },
        // The same signature again on a later (empty) part: the turn's thinking, once.
        { text: "", thoughtSignature: mintThoughtSignature(details) },
      ),
      user({ functionResponse: { name: "read_file", response: { output: "A" } } }),
      // Gemini's own signature, from a conversation begun on Google: nothing a chat backend takes back.
      model({ text: "It says A.", thoughtSignature: "CiQBcsjafGy0b2+wHjQ4Y0iYJuJwq2Yz" }),
      user({ text: "ok" }),
    ]);
    expect(messages[1]).toEqual({ role: "assistant", content: null, tool_calls: [{ id: "call_1_0", type: "function", function: { name: "read_file", arguments: '{"file_path":"a"}' } }], reasoning_details: details });
    expect(messages[3]).toEqual({ role: "assistant", content: "It says A." });
  });

  it("a signature that reads as ours but is not whole is a 400 naming it", () => {
    const broken = Buffer.from("swy.rd1.!!!", "utf8").toString("base64");
    expect(paramOf(() => messagesOf([user({ text: "a" }), model({ text: "b", thoughtSignature: broken }), user({ text: "c" })]))).toBe("contents[1].parts[0].thoughtSignature");
  });
});

describe("Google's Schema", () => {
  it("becomes JSON Schema: lowercase types, nullable as a null type, propertyOrdering and format enum dropped, int64 bounds as numbers", () => {
    const schema = {
      type: "OBJECT",
      properties: {
        path: { type: "STRING", description: "where" },
        mode: { type: "STRING", format: "enum", enum: ["r", "w"], nullable: true },
        lines: { type: "ARRAY", items: { type: "INTEGER", format: "int32" }, minItems: "1" },
        ratio: { type: "NUMBER", nullable: true, example: 0.5 },
        flag: { anyOf: [{ type: "BOOLEAN" }, { type: "NULL" }] },
      },
      required: ["path"],
      propertyOrdering: ["path", "mode", "lines", "ratio", "flag"],
    };
    expect(jsonSchemaOf(schema, "s")).toEqual({
      type: "object",
      properties: {
        path: { type: "string", description: "where" },
        mode: { type: ["string", "null"], enum: ["r", "w", null] },
        lines: { type: "array", items: { type: "integer", format: "int32" }, minItems: 1 },
        ratio: { type: ["number", "null"], examples: [0.5] },
        flag: { anyOf: [{ type: "boolean" }, { type: "null" }] },
      },
      required: ["path"],
    });
    const chat = chatOf({ contents: [user({ text: "x" })], tools: [{ functionDeclarations: [{ name: "f", parameters: schema, response: { type: "STRING" } }, { name: "g" }] }] });
    expect(chat.tools).toEqual([
      { type: "function", function: { name: "f", parameters: jsonSchemaOf(schema, "s") } },
      { type: "function", function: { name: "g", parameters: { type: "object", properties: {} } } },
    ]);
    expect(paramOf(() => jsonSchemaOf({ type: "OBJECT", properties: { a: { type: "DATE" } } }, "p"))).toBe("p.properties.a.type");
  });

  it("a response schema is response_format json_schema; JSON alone json_object", () => {
    const contents = [user({ text: "x" })];
    expect(chatOf({ contents, generationConfig: { responseMimeType: "application/json", responseSchema: { type: "OBJECT", properties: { a: { type: "STRING" } } } } }).response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "response", schema: { type: "object", properties: { a: { type: "string" } } }, strict: false },
    });
    const js = { type: "object", properties: { a: { type: "string" } }, additionalProperties: false };
    expect(chatOf({ contents, generationConfig: { responseMimeType: "application/json", responseJsonSchema: js } }).response_format).toEqual({ type: "json_schema", json_schema: { name: "response", schema: js, strict: false } });
    expect(chatOf({ contents, generationConfig: { responseMimeType: "application/json" } }).response_format).toEqual({ type: "json_object" });
    expect(chatOf({ contents, generationConfig: { responseMimeType: "text/plain" } }).response_format).toBeUndefined();
  });
});

describe("configuration", () => {
  const contents = [user({ text: "x" })];
  const tools = [{ functionDeclarations: [{ name: "a" }, { name: "b" }] }];

  it("functionCallingConfig is tool_choice", () => {
    const choice = (functionCallingConfig: Json) => chatOf({ contents, tools, toolConfig: { functionCallingConfig } }).tool_choice;
    expect(choice({ mode: "AUTO" })).toBe("auto");
    expect(choice({ mode: "ANY" })).toBe("required");
    expect(choice({ mode: "NONE" })).toBe("none");
    expect(choice({ mode: "VALIDATED" })).toBe("auto");
    expect(choice({})).toBeUndefined();
    expect(choice({ mode: "ANY", allowedFunctionNames: ["b"] })).toEqual({ type: "function", function: { name: "b" } });
    expect(choice({ mode: "ANY", allowedFunctionNames: ["a", "b"] })).toEqual({
      type: "allowed_tools",
      allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "a" } }, { type: "function", function: { name: "b" } }] },
    });
    expect(choice({ mode: "AUTO", allowedFunctionNames: ["a"] })).toEqual({ type: "allowed_tools", allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "a" } }] } });
    // Without tools there is nothing to choose among: chat refuses a tool_choice alone.
    expect(chatOf({ contents, toolConfig: { functionCallingConfig: { mode: "ANY" } } }).tool_choice).toBeUndefined();
  });

  it("generationConfig's fields are chat's", () => {
    const chat = chatOf({
      contents,
      safetySettings: [{ category: "HARM_CATEGORY_HARASSMENT", threshold: "BLOCK_NONE" }],
      labels: { team: "a" },
      generationConfig: {
        maxOutputTokens: 100,
        stopSequences: ["END"],
        seed: 7,
        presencePenalty: 0.1,
        frequencyPenalty: 0.2,
        candidateCount: 1,
        responseLogprobs: true,
        logprobs: 3,
        responseModalities: ["TEXT"],
        mediaResolution: "MEDIA_RESOLUTION_LOW",
        enableEnhancedCivicAnswers: true,
      },
    });
    expect(chat).toEqual({ model: "m", messages: [{ role: "user", content: "x" }], max_tokens: 100, stop: ["END"], seed: 7, presence_penalty: 0.1, frequency_penalty: 0.2, logprobs: true, top_logprobs: 3 });
  });

  it("thinkingConfig is reasoning: a budget, dynamic, off, or a level", () => {
    const reasoning = (thinkingConfig: Json) => toChatRequest({ contents, generationConfig: { thinkingConfig } }, "m", false);
    expect(reasoning({ thinkingBudget: 2048 }).chat.reasoning).toEqual({ max_tokens: 2048 });
    expect(reasoning({ thinkingBudget: -1 }).chat.reasoning).toEqual({ enabled: true });
    expect(reasoning({ thinkingBudget: 0 }).chat.reasoning).toBeUndefined();
    expect(reasoning({ thinkingLevel: "HIGH" }).chat.reasoning).toEqual({ effort: "high" });
    expect(reasoning({ thinkingLevel: "low", includeThoughts: true })).toMatchObject({ chat: { reasoning: { effort: "low" } }, includeThoughts: true });
    expect(reasoning({ thinkingBudget: 1024 }).includeThoughts).toBe(false);
  });
});

describe("what cannot be honoured is a 400 naming the field", () => {
  const contents = [user({ text: "x" })];
  const cases: Array<[string, Json]> = [
    ["contents", { contents: [] }],
    ["contents", { contents: [model({ text: "only me" })] }],
    ["contents[0].role", { contents: [{ role: "system", parts: [{ text: "x" }] }] }],
    ["contents[0].parts", { contents: [{ role: "user", parts: [] }] }],
    ["contents[0].parts[0].fileData", { contents: [user({ fileData: { mimeType: "application/pdf", fileUri: "https://x" } })] }],
    ["contents[0].parts[0].inlineData.mimeType", { contents: [user({ inlineData: { mimeType: "application/pdf", data: "JVBERi0=" } })] }],
    ["contents[1].parts[0].inlineData", { contents: [user({ text: "x" }), model({ inlineData: { mimeType: "image/png", data: "iVBORw0KGgo=" } })] }],
    ["contents[1].parts[0].executableCode", { contents: [user({ text: "x" }), model({ executableCode: { language: "PYTHON", code: "1" } })] }],
    ["contents[0].parts[0].codeExecutionResult", { contents: [user({ codeExecutionResult: { outcome: "OUTCOME_OK" } })] }],
    ["contents[0].parts[0].videoMetadata", { contents: [user({ text: "x", videoMetadata: { fps: 1 } })] }],
    ["contents[0].parts[0].frobnicate", { contents: [user({ text: "x", frobnicate: 1 })] }],
    ["contents[0].parts[0]", { contents: [user({ text: "x", functionCall: { name: "a" } })] }],
    ["contents[0].parts[0].functionCall", { contents: [user({ functionCall: { name: "a" } })] }],
    ["contents[0].parts[0].functionResponse", { contents: [user({ functionResponse: { name: "a", response: {} } })] }],
    ["contents[1].parts[0].functionCall.args", { contents: [user({ text: "x" }), model({ functionCall: { name: "a", args: "{}" } })] }],
    ["systemInstruction.parts[1]", { contents, systemInstruction: { parts: [{ text: "a" }, { inlineData: { mimeType: "image/png", data: "x" } }] } }],
    ["tools[0].googleSearch", { contents, tools: [{ googleSearch: {} }] }],
    ["tools[1].codeExecution", { contents, tools: [{ functionDeclarations: [{ name: "a" }] }, { codeExecution: {} }] }],
    ["tools[0].urlContext", { contents, tools: [{ urlContext: {} }] }],
    ["tools[0].functionDeclarations[1].name", { contents, tools: [{ functionDeclarations: [{ name: "a" }, { name: "a" }] }] }],
    ["tools[0].functionDeclarations[0].parametersJsonSchema", { contents, tools: [{ functionDeclarations: [{ name: "a", parameters: { type: "OBJECT" }, parametersJsonSchema: { type: "object" } }] }] }],
    ["toolConfig.functionCallingConfig.mode", { contents, toolConfig: { functionCallingConfig: { mode: "SOMETIMES" } } }],
    ["toolConfig.functionCallingConfig.allowedFunctionNames", { contents, toolConfig: { functionCallingConfig: { mode: "NONE", allowedFunctionNames: ["a"] } } }],
    ["generationConfig.candidateCount", { contents, generationConfig: { candidateCount: 2 } }],
    ["generationConfig.responseMimeType", { contents, generationConfig: { responseMimeType: "text/x.enum" } }],
    ["generationConfig.responseMimeType", { contents, generationConfig: { responseSchema: { type: "STRING" } } }],
    ["generationConfig.responseSchema.type", { contents, generationConfig: { responseMimeType: "application/json", responseSchema: { type: "TUPLE" } } }],
    ["generationConfig.responseModalities", { contents, generationConfig: { responseModalities: ["TEXT", "IMAGE"] } }],
    ["generationConfig.speechConfig", { contents, generationConfig: { speechConfig: { voiceConfig: {} } } }],
    ["generationConfig.logprobs", { contents, generationConfig: { logprobs: 2 } }],
    ["generationConfig.temperature", { contents, generationConfig: { temperature: "hot" } }],
    ["generationConfig.topPp", { contents, generationConfig: { topPp: 1 } }],
    ["generationConfig.thinkingConfig.thinkingBudget", { contents, generationConfig: { thinkingConfig: { thinkingBudget: -2 } } }],
    ["generationConfig.thinkingConfig.thinkingLevel", { contents, generationConfig: { thinkingConfig: { thinkingLevel: "extreme" } } }],
    ["generationConfig.thinkingConfig.thinkingLevel", { contents, generationConfig: { thinkingConfig: { thinkingBudget: 100, thinkingLevel: "low" } } }],
    ["cachedContent", { contents, cachedContent: "cachedContents/abc" }],
    ["store", { contents, store: true }],
  ];
  it.each(cases)("%s", (param, body) => {
    expect(paramOf(() => chatOf(body))).toBe(param);
  });
});
