// Gemini's `thoughtSignature` (an opaque base64 value on a model turn's
// part, which clients such as Gemini CLI keep and send back with the turn)
// carries the answer's reasoning_details — Claude's signed thinking — the
// way the Responses route's `encrypted_content` does (responses/reasoning.ts,
// the same minted text, base64 as Gemini's bytes fields are): a tool-call
// turn reaches Claude again with its thinking first, as Anthropic requires.
// Opaque, not encrypted: what protects the thinking is Anthropic's
// signature inside it.
import type { Json } from "../boundary.ts";
import { mintEncryptedContent, readEncryptedContent } from "../responses/reasoning.ts";

/** The thoughtSignature of an answer's reasoning_details. */
export function mintThoughtSignature(details: Json[]): string {
  return Buffer.from(mintEncryptedContent(details), "utf8").toString("base64");
}

/**
 * The reasoning_details a thoughtSignature this router minted carries;
 * undefined for any other (a Gemini model's own, from a client that switched
 * providers: nothing a chat backend can take back). One that starts like
 * ours but does not read is the client's 400 naming `at`.
 */
export function readThoughtSignature(signature: unknown, at: string): Json[] | undefined {
  if (typeof signature !== "string" || signature === "") return undefined;
  return readEncryptedContent(Buffer.from(signature, "base64").toString("utf8"), at);
}
