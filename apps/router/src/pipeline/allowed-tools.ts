// OpenAI's `tool_choice: {type: "allowed_tools", allowed_tools: {mode, tools}}`
// (call only these of the tools, `auto` or `required`) as every backend
// already understands it: `tools` narrowed to the allowed ones and the plain
// mode. The one difference: the tools left out are not in the prompt either.
import type { InferencePath } from "../backends/types.ts";
import { bodyEdited } from "../body-text.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** Rewrites a chat body's allowed_tools choice in place (the route's schema has checked its shape and names). */
export function narrowAllowedTools(path: InferencePath, body: Json): void {
  if (path !== "/v1/chat/completions") return;
  const choice = body.tool_choice;
  if (!isObj(choice) || choice.type !== "allowed_tools" || !isObj(choice.allowed_tools) || !Array.isArray(body.tools)) return;
  const { mode, tools } = choice.allowed_tools as { mode: "auto" | "required"; tools: { function: { name: string } }[] };
  const allowed = new Set(tools.map((t) => t.function.name));
  bodyEdited(body);
  body.tools = body.tools.filter((t) => isObj(t) && isObj(t.function) && allowed.has(t.function.name as string));
  body.tool_choice = mode;
}
