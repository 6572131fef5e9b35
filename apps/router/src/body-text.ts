// A request body's own JSON text, as the client sent it, kept beside the
// parsed body while the two still say the same thing: a worker is sent those
// bytes instead of JSON.stringify of the body (issue 14: "JSON parsed once
// and never re-serialized on the hot path where bytes can pass through").
// Re-serializing cost the router a walk of the whole body per request, and
// more the longer the conversation.
//
// Keyed by the body object itself, so a copy ({ ...body }, a resumed
// stream's continuation, a translated route's chat body) has no text and is
// serialized as before. The router changes a body in place in a few places
// only (the output limit's field, allowed_tools, the fields only it may set,
// stream usage); each says so here: `bodyEdited` forgets the text,
// `setBodyField` keeps it exact when the field was absent.
//
// The text is the decoded string JSON.parse read (invalid UTF-8 already
// replaced), so a worker reads what the router validated: the same
// JSON.parse of the same text.
const texts = new WeakMap<object, string>();

/** Remembers `text` as the JSON of `body` (which JSON.parse made of it, unchanged since). */
export function keepBodyText(body: object, text: string): void {
  texts.set(body, text);
}

/**
 * The client's text of this body, forgotten as it is handed out: it goes
 * upstream once, and a stream's body lives as long as the stream (its tab
 * holds it), so the text would be a second copy of it all that time.
 */
export function takeBodyText(body: object): string | undefined {
  const text = texts.get(body);
  if (text !== undefined) texts.delete(body);
  return text;
}

/** The body was changed in place: its client text no longer says what it says. */
export function bodyEdited(body: object): void {
  texts.delete(body);
}

/**
 * `body[key] = value`, keeping the client text exact: a field the body did
 * not have is written after the others, as JSON.stringify of the changed body
 * would write it; a field it had means the text is dropped.
 */
export function setBodyField(body: Record<string, unknown>, key: string, value: unknown): void {
  const text = texts.get(body);
  if (text !== undefined) {
    const appended = Object.hasOwn(body, key) ? undefined : withFields(text, { [key]: value });
    if (appended === undefined) texts.delete(body);
    else texts.set(body, appended);
  }
  body[key] = value;
}

/**
 * A JSON object's text with `fields` written after its own members (which
 * must not include any of them), or undefined when `text` does not end an
 * object. Fields whose value JSON has no form for (undefined) are left out,
 * as JSON.stringify leaves them out.
 */
export function withFields(text: string, fields: Record<string, unknown>): string | undefined {
  let end = text.length - 1;
  while (end >= 0 && isSpace(text.charCodeAt(end))) end--;
  if (end < 0 || text.charCodeAt(end) !== 0x7d /* } */) return undefined;
  // Whether the object has members already: the last non-space byte before its closing brace opens it, or not.
  let before = end - 1;
  while (before >= 0 && isSpace(text.charCodeAt(before))) before--;
  let sep = before >= 0 && text.charCodeAt(before) === 0x7b /* { */ ? "" : ",";
  let extra = "";
  for (const k in fields) {
    const value = JSON.stringify(fields[k]);
    if (value === undefined) continue;
    extra += `${sep}${JSON.stringify(k)}:${value}`;
    sep = ",";
  }
  return extra ? text.slice(0, end) + extra + "}" : text.slice(0, end + 1);
}

/** JSON's four whitespace characters. */
function isSpace(ch: number): boolean {
  return ch === 0x20 || ch === 0x0a || ch === 0x0d || ch === 0x09;
}
