// Server-sent events: parse an upstream byte stream into event payloads, and
// format payloads for the client. Comment lines (": keep-alive") are dropped:
// they are not progress.
export async function* parseSse(chunks: AsyncIterable<Uint8Array | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  let data: string[] = [];
  for await (const chunk of chunks) {
    buf += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (data.length > 0) {
          yield data.join("\n");
          data = [];
        }
        continue;
      }
      if (line.startsWith(":")) continue;
      if (line.startsWith("data:")) data.push(line.slice(line.charAt(5) === " " ? 6 : 5));
      // `event:`/`id:`/`retry:` fields are not used by OpenAI-style streams.
    }
  }
  if (data.length > 0) yield data.join("\n");
}

const encoder = new TextEncoder();

export function sseEvent(payload: string): Uint8Array {
  return encoder.encode(`data: ${payload}\n\n`);
}

export const SSE_DONE = "[DONE]";
